// Store administration (pkv_store_open/info/list/verify/clear/close, pkv 0.2): a FILE or REDIS
// store looked at and cleaned with no engine and no model, as `pkv store` does; each value
// describes itself.
using System;
using System.Collections.Generic;
using System.Text;

namespace Pkv
{
    /// <summary>One block of a store listing (pkv_store_entry).</summary>
    public sealed class StoreBlockInfo
    {
        /// <summary>The block's 32-byte key (SHA-256 of its parent and tokens).</summary>
        public byte[] Key { get; internal set; }
        /// <summary>The value's size as listed.</summary>
        public ulong ValueBytes { get; internal set; }
        /// <summary>Unread (StoreListFlags.KeysOnly), Good, or Bad (Problem says why).</summary>
        public StoreValueState State { get; internal set; }
        /// <summary>The block's tokens (Good only; else 0).</summary>
        public uint NumTokens { get; internal set; }
        /// <summary>K and V of every layer (Good only).</summary>
        public ulong PayloadBytes { get; internal set; }
        /// <summary>The parent block's key, or the root of its salt and model (Good only; else
        /// zeros).</summary>
        public byte[] Parent { get; internal set; }
        /// <summary>The model's KV-shape fingerprint (Good only; else zeros).</summary>
        public byte[] Fingerprint { get; internal set; }
        /// <summary>Bad: why; else "".</summary>
        public string Problem { get; internal set; }

        public override string ToString()
        {
            return string.Format("{0} {1} bytes {2}{3}", StoreAdmin.Hex(Key), ValueBytes, State,
                                 Problem.Length > 0 ? ": " + Problem : "");
        }
    }

    /// <summary>What StoreAdmin.Verify found (pkv_store_verify_result).</summary>
    public sealed class StoreVerifyReport
    {
        /// <summary>Values read; of which NumGood good and NumBad bad.</summary>
        public ulong NumBlocks { get; internal set; }
        public ulong NumGood { get; internal set; }
        public ulong NumBad { get; internal set; }
        /// <summary>Of NumBad, removed (removeBad).</summary>
        public ulong NumRemoved { get; internal set; }
        /// <summary>Listed, then gone or resized before they were read (an engine evicted or
        /// rewrote them): not counted above.</summary>
        public ulong NumGone { get; internal set; }
        public ulong GoodBytes { get; internal set; }
        public ulong BadBytes { get; internal set; }
        /// <summary>The first bad value met, null when none; FirstBadProblem says why.</summary>
        public byte[] FirstBadKey { get; internal set; }
        public string FirstBadProblem { get; internal set; }

        public override string ToString()
        {
            return string.Format("{0} blocks: {1} good, {2} bad ({3} removed), {4} gone", NumBlocks, NumGood,
                                 NumBad, NumRemoved, NumGone);
        }
    }

    /// <summary>A store opened for its administrator (pkv_store_open): how much it holds, each
    /// block, whether every value is whole, removing bad values or all. It may be used while
    /// engines use the same store (values written or removed meanwhile may or may not be seen).
    /// Failures throw PkvException (Store: an unreadable directory, a server gone, a timeout).
    /// Dispose (or Close) closes it; a closed one refuses calls with ObjectDisposedException.
    /// Calls may come from several threads; they run one at a time.</summary>
    public sealed unsafe class StoreAdmin : IDisposable
    {
        readonly StoreHandle handle;
        readonly object gate = new object();

        StoreAdmin(StoreHandle h) { handle = h; }

        /// <summary>Opens the store config describes (StoreConfig.File(dir), Redis(...)); its
        /// write-path fields do not apply, but WriteMode StoreWriteMode.ReadOnly opens it for
        /// reading only (Verify(true) and Clear then throw State). A FILE store's directory
        /// must exist (Store otherwise: it is never made here); a Callback store is the host's
        /// own to administer (Unsupported).</summary>
        public static StoreAdmin Open(StoreConfig config)
        {
            if (config == null) throw new ArgumentNullException("config");
            StoreBridge bridge = config.Build();  // pkv copies what it keeps: freed after the open
            try
            {
                StoreHandle h;
                Native.Check(Native.pkv_store_open(bridge.Params, out h));
                return new StoreAdmin(h);
            }
            finally
            {
                bridge.Free();
            }
        }

        StoreHandle Handle
        {
            get
            {
                if (handle.IsClosed) throw new ObjectDisposedException("Pkv.StoreAdmin");
                return handle;
            }
        }

        /// <summary>How many blocks the store holds and their bytes (no value is read).</summary>
        public StoreInfo Info()
        {
            var i = new StoreInfo { StructSize = (uint)sizeof(StoreInfo) };
            lock (gate) Native.Check(Native.pkv_store_info(Handle, &i));
            return i;
        }

        /// <summary>Every block of the store, read a page (pageSize blocks) at a time as the
        /// enumeration goes. Unless flags has KeysOnly each value is read whole and checked
        /// (State, Problem). One listing at a time per StoreAdmin: starting another makes the
        /// first one's next page throw InvalidArgument.</summary>
        public IEnumerable<StoreBlockInfo> List(StoreListFlags flags = StoreListFlags.None, int pageSize = 256)
        {
            if (pageSize < 1)
                throw new PkvException(Status.InvalidArgument, "StoreAdmin.List: pageSize is " + pageSize +
                                       ", give 1 or more");
            return Pages(flags, pageSize);
        }

        IEnumerable<StoreBlockInfo> Pages(StoreListFlags flags, int pageSize)
        {
            var page = new StoreEntry[pageSize];
            var cursor = new ulong[1];  // 0: start; back to 0 when the listing is complete
            do
            {
                foreach (StoreBlockInfo b in Page(flags, page, cursor)) yield return b;
            } while (cursor[0] != 0);
        }

        // One pkv_store_list call (an iterator may not hold pointers).
        List<StoreBlockInfo> Page(StoreListFlags flags, StoreEntry[] page, ulong[] cursor)
        {
            var got = new List<StoreBlockInfo>();
            lock (gate)
                fixed (StoreEntry* e = page)
                fixed (ulong* c = cursor)
                {
                    uint n;
                    Native.Check(Native.pkv_store_list(Handle, c, (uint)flags, e, (uint)sizeof(StoreEntry),
                                                       (uint)page.Length, &n));
                    for (uint i = 0; i < n; i++) got.Add(Block(e + i));
                }
            return got;
        }

        /// <summary>Reads every value and checks it as List does; removeBad removes each bad
        /// value as it is found (State on a store opened ReadOnly). A failure part way
        /// (PkvException Store) keeps what was removed before it.</summary>
        public StoreVerifyReport Verify(bool removeBad = false)
        {
            var r = new StoreVerifyResult { StructSize = (uint)sizeof(StoreVerifyResult) };
            lock (gate) Native.Check(Native.pkv_store_verify(Handle, removeBad ? 1u : 0u, &r));
            byte[] firstBad = Bytes(r.FirstBadKey.Bytes, sizeof(StoreKey));
            return new StoreVerifyReport
            {
                NumBlocks = r.NumBlocks, NumGood = r.NumGood, NumBad = r.NumBad, NumRemoved = r.NumRemoved,
                NumGone = r.NumGone, GoodBytes = r.GoodBytes, BadBytes = r.BadBytes,
                FirstBadKey = r.NumBad == 0 ? null : firstBad,
                FirstBadProblem = Text(r.FirstBadProblem, Native.PKV_STORE_PROBLEM_BYTES),
            };
        }

        /// <summary>Removes every block of the store (other files, or keys outside its
        /// prefix, stay); returns how many. State on a store opened ReadOnly.</summary>
        public ulong Clear()
        {
            ulong removed;
            lock (gate) Native.Check(Native.pkv_store_clear(Handle, &removed));
            return removed;
        }

        /// <summary>Closes the store (pkv_store_close). Idempotent.</summary>
        public void Close() { lock (gate) handle.Dispose(); }

        public void Dispose() { Close(); }

        static StoreBlockInfo Block(StoreEntry* e)
        {
            return new StoreBlockInfo
            {
                Key = Bytes(e->Key.Bytes, sizeof(StoreKey)), ValueBytes = e->ValueBytes, State = e->State,
                NumTokens = e->NumTokens, PayloadBytes = e->PayloadBytes, Parent = Bytes(e->Parent.Bytes, sizeof(StoreKey)),
                Fingerprint = Bytes(e->Fingerprint, 32), Problem = Text(e->Problem, Native.PKV_STORE_PROBLEM_BYTES),
            };
        }

        static byte[] Bytes(byte* p, int n)
        {
            var a = new byte[n];
            for (int i = 0; i < n; i++) a[i] = p[i];
            return a;
        }

        static string Text(byte* p, int cap)  // a NUL-terminated char[cap]
        {
            int n = 0;
            while (n < cap && p[n] != 0) n++;
            return Encoding.UTF8.GetString(Bytes(p, n));
        }

        internal static string Hex(byte[] key)
        {
            var s = new StringBuilder(key.Length * 2);
            foreach (byte b in key) s.Append(b.ToString("x2"));
            return s.ToString();
        }
    }
}
