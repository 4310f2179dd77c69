// The store tier (pkv 0.2): StoreConfig (pkv_store_params) given to new Engine(p, store), IStore
// (a store of the host's own that pkv calls through the C callbacks) and MapStore, the example.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Text;

namespace Pkv
{
    /// <summary>A KV store of the host's own (PKV_STORE_CALLBACK): a byte map from 32-byte keys
    /// to values of one size per engine. pkv calls it from its own threads (a fetcher and a
    /// writer, possibly while the engine's thread runs), so it must be thread-safe. An exception
    /// makes every key of that call a miss, counted in Stats.NumStoreErrors and told by
    /// Engine.StoreError(); no engine call fails because of it. pkv checks every value it reads.</summary>
    public interface IStore
    {
        /// <summary>The value held under key, or null.</summary>
        byte[] Get(byte[] key);
        /// <summary>Stores value under key, replacing any; both arrays are the store's to keep.</summary>
        void Put(byte[] key, byte[] value);
    }

    /// <summary>An IStore that can say cheaply whether it holds a key (a hint; pkv uses Get for
    /// a store without it).</summary>
    public interface IStoreExists : IStore
    {
        bool Exists(byte[] key);
    }

    /// <summary>The example store: a dictionary behind a lock. Share one between engines to
    /// share their KV.</summary>
    public sealed class MapStore : IStoreExists
    {
        readonly Dictionary<string, byte[]> values = new Dictionary<string, byte[]>();

        static string Name(byte[] key) { return Convert.ToBase64String(key); }

        public byte[] Get(byte[] key)
        {
            byte[] v;
            lock (values) return values.TryGetValue(Name(key), out v) ? v : null;
        }

        public void Put(byte[] key, byte[] value) { lock (values) values[Name(key)] = value; }
        public bool Exists(byte[] key) { lock (values) return values.ContainsKey(Name(key)); }
        public int Count { get { lock (values) return values.Count; } }
    }

    /// <summary>An engine's store tier (pkv_store_params), with pkv's defaults; see pkv.h for
    /// each field. File(), Redis() and Callback() make the usual ones.</summary>
    public sealed unsafe class StoreConfig
    {
        public StoreKind Kind;
        public StoreWriteMode WriteMode;
        public uint LookupTimeoutMs, WriteQueueBlocks;
        public string Path;          // FILE: the directory, made if missing
        public ulong MaxBytes;       // FILE: size cap (LRU); 0 = none
        public string Host, Username, Password, KeyPrefix;  // REDIS; null = pkv's default
        public uint Port, Database, TtlSeconds, ConnectTimeoutMs, IoTimeoutMs;
        public IStore Store;         // CALLBACK
        /// <summary>The model's identity, in the fingerprint of every key and value: engines
        /// share blocks only when their ids (and KV shapes) are equal. Name it by the weights (a
        /// weights digest, or "org/model@revision"): two fine-tunes of one base model have one
        /// config and KV shape, so only this keeps them from reading each other's KV.
        /// Library.HfConfigDigest gives one from a config.json (it tells configs apart, not
        /// weights). null (the default): none, the KV shape alone (Engine.StoreError says what
        /// that risks). 1 .. Constants.MaxModelIdBytes bytes of UTF-8.</summary>
        public string ModelId;

        public StoreConfig()
        {
            var d = new StoreParams();
            Native.Check(Native.pkv_store_params_init(&d, (uint)sizeof(StoreParams)));
            Kind = d.Kind; WriteMode = d.WriteMode; LookupTimeoutMs = d.LookupTimeoutMs;
            WriteQueueBlocks = d.WriteQueueBlocks; MaxBytes = d.MaxBytes; Port = d.Port;
            Database = d.Database; TtlSeconds = d.TtlSeconds; ConnectTimeoutMs = d.ConnectTimeoutMs;
            IoTimeoutMs = d.IoTimeoutMs;
        }

        public static StoreConfig File(string path)
        {
            return new StoreConfig { Kind = StoreKind.File, Path = path };
        }

        public static StoreConfig Redis(string host = null, uint port = 6379, string password = null)
        {
            return new StoreConfig { Kind = StoreKind.Redis, Host = host, Port = port, Password = password };
        }

        public static StoreConfig Callback(IStore store)
        {
            return new StoreConfig { Kind = StoreKind.Callback, Store = store };
        }

        /// <summary>The native parameters, in memory the bridge owns until the engine is gone
        /// (or, for StoreAdmin.Open, until the open returns).</summary>
        internal StoreBridge Build()
        {
            var b = new StoreBridge();
            try
            {
                var sp = (StoreParams*)b.Alloc(sizeof(StoreParams));
                *sp = new StoreParams
                {
                    StructSize = (uint)sizeof(StoreParams), Kind = Kind, WriteMode = WriteMode,
                    LookupTimeoutMs = LookupTimeoutMs, WriteQueueBlocks = WriteQueueBlocks,
                    Path = b.Text(Path), MaxBytes = MaxBytes, Host = b.Text(Host), Port = Port,
                    Database = Database, Username = b.Text(Username), Password = b.Text(Password),
                    KeyPrefix = b.Text(KeyPrefix), TtlSeconds = TtlSeconds,
                    ConnectTimeoutMs = ConnectTimeoutMs, IoTimeoutMs = IoTimeoutMs, ModelId = b.Text(ModelId),
                };
                if (Store != null) sp->Callbacks = b.Callbacks(Store);
                b.Params = sp;
                return b;
            }
            catch
            {
                b.Free();
                throw;
            }
        }
    }

    /// <summary>The native side of a StoreConfig: its memory and the delegates pkv calls. The
    /// engine's handle holds it, so the delegates live until pkv_engine_destroy has returned
    /// (which waits for the queued writes), even when the engine is finalized.</summary>
    internal sealed unsafe class StoreBridge
    {
        readonly List<IntPtr> memory = new List<IntPtr>();
        IStore store;
        StoreCallbacksExistsFn exists;
        StoreCallbacksGetFn get;
        StoreCallbacksPutFn put;
        internal StoreParams* Params;

        internal IntPtr Alloc(int bytes)
        {
            IntPtr p = Marshal.AllocHGlobal(bytes);
            memory.Add(p);
            for (int i = 0; i < bytes; i++) ((byte*)p)[i] = 0;
            return p;
        }

        internal IntPtr Text(string s)
        {
            if (s == null) return IntPtr.Zero;
            byte[] utf8 = Encoding.UTF8.GetBytes(s);
            IntPtr p = Alloc(utf8.Length + 1);
            Marshal.Copy(utf8, 0, p, utf8.Length);
            return p;
        }

        internal IntPtr Callbacks(IStore s)
        {
            store = s;
            get = OnGet;
            put = OnPut;
            var cb = (StoreCallbacks*)Alloc(sizeof(StoreCallbacks));
            cb->StructSize = (uint)sizeof(StoreCallbacks);
            cb->Get = Marshal.GetFunctionPointerForDelegate(get);
            cb->Put = Marshal.GetFunctionPointerForDelegate(put);
            if (s is IStoreExists)
            {
                exists = OnExists;
                cb->Exists = Marshal.GetFunctionPointerForDelegate(exists);
            }
            return (IntPtr)cb;
        }

        internal void Free()
        {
            foreach (IntPtr p in memory) Marshal.FreeHGlobal(p);
            memory.Clear();
            Params = null;
        }

        static byte[] Key(StoreKey* keys, uint i)
        {
            var k = new byte[sizeof(StoreKey)];
            Marshal.Copy((IntPtr)(keys + i), k, 0, k.Length);
            return k;
        }

        /// <summary>0, or 1 with the exception's text in message: nothing unwinds into pkv.</summary>
        static int Guard(Action call, byte* message, uint cap)
        {
            try
            {
                call();
                return 0;
            }
            catch (Exception e)
            {
                if (message != null && cap > 0)
                {
                    byte[] text = Encoding.UTF8.GetBytes(e.GetType().Name + ": " + e.Message);
                    int n = Math.Min(text.Length, (int)cap - 1);
                    Marshal.Copy(text, 0, (IntPtr)message, n);
                    message[n] = 0;
                }
                return 1;
            }
        }

        int OnExists(void* user, StoreKey* keys, uint n, byte* @out, byte* message, uint cap)
        {
            return Guard(() => {
                for (uint i = 0; i < n; i++) @out[i] = ((IStoreExists)store).Exists(Key(keys, i)) ? (byte)1 : (byte)0;
            }, message, cap);
        }

        int OnGet(void* user, StoreKey* keys, uint n, void* values, ulong valueBytes, byte* found,
                  uint timeoutMs, byte* message, uint cap)
        {
            return Guard(() => {
                for (uint i = 0; i < n; i++)
                {
                    byte[] v = store.Get(Key(keys, i));
                    bool ok = v != null && (ulong)v.LongLength == valueBytes;
                    if (ok) Marshal.Copy(v, 0, (IntPtr)((byte*)values + i * valueBytes), v.Length);
                    found[i] = ok ? (byte)1 : (byte)0;
                }
            }, message, cap);
        }

        int OnPut(void* user, StoreKey* keys, uint n, void* values, ulong valueBytes, byte* message, uint cap)
        {
            return Guard(() => {
                for (uint i = 0; i < n; i++)
                {
                    var v = new byte[valueBytes];
                    Marshal.Copy((IntPtr)((byte*)values + i * valueBytes), v, 0, v.Length);
                    store.Put(Key(keys, i), v);
                }
            }, message, cap);
        }
    }
}
