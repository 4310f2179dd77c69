// Engine (pkv_engine), Sequence (a sequence id on an engine), EngineParams helpers, Library.
using System;
using System.Runtime.InteropServices;
using System.Text;

namespace Pkv
{
    public partial struct EngineParams
    {
        /// <summary>pkv's defaults (pkv_engine_params_init).</summary>
        public static unsafe EngineParams Defaults()
        {
            var p = new EngineParams();
            Native.Check(Native.pkv_engine_params_init(&p, (uint)sizeof(EngineParams)));
            return p;
        }

        /// <summary>Defaults with the model shape read from a Hugging Face config.json's text. An
        /// MLA config (kv_lora_rank and qk_rope_head_dim: DeepSeek V2/V3, Kimi K2) sets KvLayout
        /// KvLayout.Mla, KvLoraRank, QkRopeHeadDim, NumKvHeads 1, HeadDim their sum and the
        /// model's SoftmaxScale.</summary>
        public static unsafe EngineParams FromHfConfig(string json)
        {
            var p = Defaults();
            byte[] text = Encoding.UTF8.GetBytes(json);
            fixed (byte* t = text)
                Native.Check(Native.pkv_engine_params_from_hf_config(&p, t, (UIntPtr)text.Length));
            return p;
        }
    }

    public partial struct RequestParams
    {
        /// <summary>pkv's defaults for a request (pkv_request_params_init).</summary>
        public static unsafe RequestParams Defaults()
        {
            var p = new RequestParams();
            Native.Check(Native.pkv_request_params_init(&p, (uint)sizeof(RequestParams)));
            return p;
        }
    }

    /// <summary>Where a sequence's KV is (SeqInfo.KvTier) or a block is (KvEvent.Medium),
    /// PKV_TIER_*.</summary>
    public enum Tier
    {
        /// <summary>No KV held: waiting, preempted or finished; for an event, every medium
        /// (ALL_CLEARED, OVERFLOW).</summary>
        None = Native.PKV_TIER_NONE,
        /// <summary>In pool blocks.</summary>
        Device = Native.PKV_TIER_DEVICE,
        /// <summary>In host-tier blocks: swapped out (Sequence.SwapOut), or an offloaded cached
        /// block (EngineParams.HostOffload).</summary>
        Host = Native.PKV_TIER_HOST,
        /// <summary>A block fetched from the store tier (a stored event's medium).</summary>
        Store = Native.PKV_TIER_STORE,
    }

    public partial struct SeqInfo
    {
        /// <summary>KvTier as a Tier.</summary>
        public Tier Tier { get { return (Tier)KvTier; } }
    }

    public partial struct KvEvent
    {
        /// <summary>Medium as a Tier: where the block was stored or removed.</summary>
        public Tier Tier { get { return (Tier)Medium; } }
    }

    /// <summary>Library-wide calls: versions, the KV profiler, the canonical block hash.</summary>
    public static unsafe partial class Library
    {
        public static uint Version { get { return Native.pkv_version(); } }
        public static uint AbiVersion { get { return Native.pkv_abi_version(); } }
        public static string StatusString(Status s) { return Native.Text(Native.pkv_status_string(s)); }

        /// <summary>How many KV blocks fit and why. When the budget is too small it throws a
        /// PkvException (OutOfMemory); ProfileOrShortfall returns the terms either way.</summary>
        public static KvBudget Profile(EngineParams p) { return Profile(p, null); }

        public static Status ProfileOrShortfall(EngineParams p, out KvBudget budget)
        {
            return ProfileOrShortfall(p, null, out budget);
        }

        public static ulong BlockHashRoot(ulong seed, byte[] salt)
        {
            ulong h;
            salt = salt ?? new byte[0];
            fixed (byte* s = salt)
                Native.Check(Native.pkv_block_hash_root(seed, s, (uint)salt.Length, &h));
            return h;
        }

        public static ulong BlockHash(ulong seed, ulong parentHash, int[] tokens)
        {
            ulong h;
            fixed (int* t = tokens)
                Native.Check(Native.pkv_block_hash(seed, parentHash, t, (uint)tokens.Length, &h));
            return h;
        }
    }

    /// <summary>A KV-cache engine. Dispose it (using); a disposed engine refuses every call with
    /// ObjectDisposedException. Calls on one engine may come from several threads.</summary>
    public sealed unsafe partial class Engine : IDisposable
    {
        readonly EngineHandle handle;
        readonly object gate = new object();
        internal Batch openBatch;  // pkv allows one open batch per engine

        /// <summary>The effective parameters; LayerWindows, Store and EventPublisher are zero in
        /// them (see LayerWindows, EventPublisherInfo).</summary>
        public EngineParams Params { get; private set; }
        // pkv_attention's size checks: bytes per new token of q, of k/v and of output (MLA: k is
        // the latent, output KvLoraRank wide per q head)
        internal uint QBytesPerToken, KvBytesPerToken, OutBytesPerToken;

        /// <summary>True for an MLA engine (Params.KvLayout KvLayout.Mla): Attention and
        /// SetKvScales take no V (null).</summary>
        public bool IsMla { get { return Params.KvLayout == KvLayout.Mla; } }

        public Engine(EngineParams p) : this(p, null, null, null) { }

        /// <summary>An engine whose layers have these sliding windows (one per layer, 0 = full
        /// attention; null: EngineParams.SlidingWindow for every layer): see Variants.cs.</summary>
        public Engine(EngineParams p, uint[] layerWindows) : this(p, null, layerWindows, null) { }

        public Engine(EngineParams p, StoreConfig store) : this(p, store, null, null) { }

        /// <summary>An engine with the store tier store (null: none), which needs prefix caching
        /// and a host tier. An IStore is called by pkv until the engine is disposed (which waits
        /// for the queued writes). layerWindows: as Engine(p, layerWindows). eventPublisher: the
        /// engine publishes its KV events over ZeroMQ (null: it does not; Events.cs); e.g.
        /// <c>new Engine(p, eventPublisher: new EventPublisherConfig("tcp://127.0.0.1:*"))</c>.</summary>
        public Engine(EngineParams p, StoreConfig store = null, uint[] layerWindows = null,
                      EventPublisherConfig eventPublisher = null)
        {
            Library.CheckLayerWindows(ref p, layerWindows);
            if (p.EventPublisher != IntPtr.Zero)
                throw new PkvException(Status.InvalidArgument,
                                       "EngineParams.EventPublisher must be zero: give an EventPublisherConfig as an argument");
            StoreBridge bridge = store == null ? null : store.Build();
            var publisher = new StoreBridge();  // the publisher's memory, until create has copied it
            Status created;
            try
            {
                p.Store = bridge == null ? IntPtr.Zero : (IntPtr)bridge.Params;
                if (eventPublisher != null) p.EventPublisher = (IntPtr)eventPublisher.Build(publisher);
                fixed (uint* w = layerWindows)  // pinned for the call: pkv copies them at create
                {
                    p.LayerWindows = (IntPtr)w;
                    created = Native.pkv_engine_create(&p, out handle);
                }
            }
            catch
            {
                if (bridge != null) bridge.Free();
                throw;
            }
            finally
            {
                publisher.Free();
            }
            if (created != Status.Ok && bridge != null) bridge.Free();
            Native.Check(created);
            handle.Store = bridge;
            var eff = new EngineParams { StructSize = (uint)sizeof(EngineParams) };
            Call(Native.pkv_engine_params_get(handle, &eff));
            engineLayerWindows = Library.CopyLayerWindows(eff);  // they point into the engine
            eff.LayerWindows = IntPtr.Zero;
            eff.EventPublisher = IntPtr.Zero;  // into the engine too: EventPublisherInfo() reads it
            eff.Store = IntPtr.Zero;
            Params = eff;
            uint elem = eff.DType == DType.F32 ? 4u : 2u;
            QBytesPerToken = eff.NumQHeads / eff.TpSize * eff.HeadDim * elem;
            KvBytesPerToken = Budget().KvHeadsPerRank * eff.HeadDim * elem;
            OutBytesPerToken = IsMla ? eff.NumQHeads / eff.TpSize * eff.KvLoraRank * elem : QBytesPerToken;
        }

        public bool IsDisposed { get { return handle.IsClosed; } }

        public void Dispose()
        {
            lock (gate)
            {
                if (openBatch != null) openBatch.Abort();
                handle.Dispose();
            }
        }

        internal object Gate { get { return gate; } }

        internal EngineHandle Handle
        {
            get
            {
                if (handle.IsClosed) throw new ObjectDisposedException("Pkv.Engine");
                return handle;
            }
        }

        /// <summary>Throws for a failed engine call with the engine's message; callers hold gate
        /// so no other call on this engine replaces the message first.</summary>
        internal void Call(Status s)
        {
            if (s != Status.Ok) throw new PkvException(s, Native.Text(Native.pkv_engine_last_error(handle)));
        }

        /// <summary>Admits a prompt (pkv_allocate). PkvException NoSpace: nothing changed.</summary>
        public Sequence Allocate(int[] tokens, byte[] salt = null)
        {
            ulong id;
            uint cached;
            lock (gate)
                fixed (int* t = tokens)
                fixed (byte* s = salt)
                {
                    SeqParams sp = SaltParams(s, salt);
                    Call(Native.pkv_allocate(Handle, t, (uint)tokens.Length, salt == null ? null : &sp,
                                             &id, &cached));
                }
            return new Sequence(this, id, cached);
        }

        /// <summary>Free blocks pkv_allocate would take now, and the tokens it would find cached.</summary>
        public uint AllocateQuery(int[] tokens, out uint numCachedTokens, byte[] salt = null)
        {
            uint blocks, cached;
            lock (gate)
                fixed (int* t = tokens)
                fixed (byte* s = salt)
                {
                    SeqParams sp = SaltParams(s, salt);
                    Call(Native.pkv_allocate_query(Handle, t, (uint)tokens.Length,
                                                   salt == null ? null : &sp, &blocks, &cached));
                }
            numCachedTokens = cached;
            return blocks;
        }

        static SeqParams SaltParams(byte* s, byte[] salt)
        {
            var sp = new SeqParams();
            if (salt == null) return sp;
            Native.Check(Native.pkv_seq_params_init(&sp, (uint)sizeof(SeqParams)));
            sp.CacheSalt = (IntPtr)s;
            sp.CacheSaltLen = (uint)salt.Length;
            return sp;
        }

        public Sequence Sequence(ulong id) { return new Sequence(this, id, 0); }

        /// <summary>Plans one step (pkv_batch_begin); null counts = all uncomputed tokens.</summary>
        public Batch BeginBatch(Sequence[] seqs, uint[] numNewTokens = null)
        {
            var ids = new ulong[seqs.Length];
            for (int i = 0; i < ids.Length; i++) ids[i] = seqs[i].Id;
            return BeginBatch(ids, numNewTokens);
        }

        public Batch BeginBatch(ulong[] ids, uint[] numNewTokens = null)
        {
            if (numNewTokens != null && numNewTokens.Length != ids.Length)
                throw new ArgumentException("numNewTokens needs one count per sequence");
            lock (gate)
            {
                BatchHandle b;
                fixed (ulong* s = ids)
                fixed (uint* n = numNewTokens)
                    Call(Native.pkv_batch_begin(Handle, s, n, (uint)ids.Length, out b));
                b.HoldEngine(handle);
                openBatch = new Batch(this, b);
                return openBatch;
            }
        }

        /// <summary>Queues a request for the scheduler (pkv_submit); rp null = defaults.</summary>
        public Sequence Submit(int[] prompt, RequestParams? rp = null, byte[] salt = null)
        {
            RequestParams r = rp ?? RequestParams.Defaults();
            ulong id;
            lock (gate)
                fixed (int* t = prompt)
                fixed (byte* s = salt)
                {
                    if (salt != null) { r.CacheSalt = (IntPtr)s; r.CacheSaltLen = (uint)salt.Length; }
                    Call(Native.pkv_submit(Handle, t, (uint)prompt.Length, &r, &id));
                }
            return new Sequence(this, id, 0);
        }

        /// <summary>The scheduler's next batch (pkv_step), or null when nothing is to run. Run
        /// it, then Commit the sampled tokens (or Abort it).</summary>
        public Batch Step()
        {
            lock (gate)
            {
                BatchHandle b;
                Call(Native.pkv_step(Handle, out b));
                if (b.IsInvalid) return null;
                b.HoldEngine(handle);
                openBatch = new Batch(this, b);
                return openBatch;
            }
        }

        /// <summary>The requests finished since the last call (release them when read).</summary>
        public ulong[] DrainFinished()
        {
            var all = new System.Collections.Generic.List<ulong>();
            var buf = new ulong[256];
            uint got;
            do
            {
                lock (gate)
                    fixed (ulong* p = buf)
                        Call(Native.pkv_drain_finished(Handle, p, (uint)buf.Length, &got));
                for (int i = 0; i < got; i++) all.Add(buf[i]);
            } while (got == buf.Length);
            return all.ToArray();
        }

        /// <summary>Up to maxEvents queued KV events (enable_kv_events), oldest first; an event's
        /// Tier (Medium) says where its block was stored or removed. They are written at this
        /// binding's sizeof(KvEvent) (40 bytes): a newer libpkv fills only the fields KvEvent
        /// has, an older one zeroes those it does not know.</summary>
        public KvEvent[] DrainKvEvents(int maxEvents = 4096)
        {
            var buf = new KvEvent[maxEvents];
            uint got;
            lock (gate)
                fixed (KvEvent* p = buf)
                    Call(Native.pkv_drain_kv_events_sized(Handle, p, (uint)sizeof(KvEvent), (uint)maxEvents,
                                                          &got));
            Array.Resize(ref buf, (int)got);
            return buf;
        }

        /// <summary>Evicts every cached (unreferenced) block from the prefix cache.</summary>
        public void ResetPrefixCache() { lock (gate) Call(Native.pkv_reset_prefix_cache(Handle)); }

        public Stats Stats()
        {
            var s = new Stats { StructSize = (uint)sizeof(Stats) };
            lock (gate) Call(Native.pkv_engine_stats(Handle, &s));
            return s;
        }

        /// <summary>The store's last problem (a miss by error, a rejected value, a failed write),
        /// "" when there was none or the engine has no store (pkv_engine_store_error).</summary>
        public string StoreError()
        {
            lock (gate)
            {
                uint n;
                Call(Native.pkv_engine_store_error(Handle, null, 0, &n));
                var buf = new byte[n + 1];
                fixed (byte* b = buf) Call(Native.pkv_engine_store_error(Handle, b, (uint)buf.Length, &n));
                return Encoding.UTF8.GetString(buf, 0, (int)Math.Min(n, (uint)buf.Length - 1));
            }
        }

        public KvBudget Budget()
        {
            var b = new KvBudget { StructSize = (uint)sizeof(KvBudget) };
            lock (gate) Call(Native.pkv_engine_budget(Handle, &b));
            return b;
        }

        /// <summary>Where the pool is (pkv_pool_info), for a host's own kernels. An MLA engine's
        /// KBase holds the latents, and its VBase and HostVBase are IntPtr.Zero (no V).</summary>
        public PoolInfo PoolInfo()
        {
            var p = new PoolInfo { StructSize = (uint)sizeof(PoolInfo) };
            lock (gate) Call(Native.pkv_pool_info(Handle, &p));
            return p;
        }

        /// <summary>Checks every block-manager invariant; PkvException Internal names the first broken.</summary>
        public void Check() { lock (gate) Call(Native.pkv_engine_check(Handle)); }

        public void SetStream(IntPtr cudaStream)
        {
            lock (gate) Call(Native.pkv_engine_set_stream(Handle, (void*)cudaStream));
        }

        internal int[] IntArray(ulong id, bool blockTable)
        {
            lock (gate)
            {
                uint n;
                Call(blockTable ? Native.pkv_seq_block_table(Handle, id, null, 0, &n)
                                : Native.pkv_seq_tokens(Handle, id, null, 0, &n));
                var a = new int[n];
                fixed (int* p = a)
                    Call(blockTable ? Native.pkv_seq_block_table(Handle, id, p, n, &n)
                                    : Native.pkv_seq_tokens(Handle, id, p, n, &n));
                return a;
            }
        }
    }

    /// <summary>A sequence of an Engine. Dispose releases it (pkv_release), like Release(): a
    /// no-op once it was released (by this object), its id is gone, or its engine was disposed:
    /// <c>using (var seq = engine.Allocate(prompt)) { ... }</c>.</summary>
    public sealed unsafe partial class Sequence : IDisposable
    {
        bool released;

        public Engine Engine { get; private set; }
        public ulong Id { get; private set; }
        /// <summary>Tokens the prefix cache served at the last admission (allocate or resume).</summary>
        public uint NumCachedTokens { get; private set; }

        internal Sequence(Engine e, ulong id, uint cached) { Engine = e; Id = id; NumCachedTokens = cached; }

        /// <summary>Reserves slots for more tokens (pkv_append). PkvException NoSpace: nothing changed.</summary>
        public void Append(params int[] tokens)
        {
            lock (Engine.Gate)
                fixed (int* t = tokens)
                    Engine.Call(Native.pkv_append(Engine.Handle, Id, t, (uint)tokens.Length));
        }

        public Sequence Fork()
        {
            ulong child;
            lock (Engine.Gate) Engine.Call(Native.pkv_fork(Engine.Handle, Id, &child));
            return new Sequence(Engine, child, NumCachedTokens);
        }

        /// <summary>Ends the sequence (pkv_release): its blocks go back, sealed ones stay cached.</summary>
        public void Release()
        {
            lock (Engine.Gate)
            {
                Engine.Call(Native.pkv_release(Engine.Handle, Id));
                released = true;
            }
        }

        /// <summary>Releases the sequence unless it is gone already (see the class).</summary>
        public void Dispose()
        {
            lock (Engine.Gate)
            {
                if (released || Engine.IsDisposed) return;
                Status s = Native.pkv_release(Engine.Handle, Id);
                if (s != Status.NotFound) Engine.Call(s);
                released = true;
            }
        }
        public void Preempt() { lock (Engine.Gate) Engine.Call(Native.pkv_preempt(Engine.Handle, Id)); }

        /// <summary>Keeps the first <paramref name="numTokens"/> tokens, 1..length (pkv_truncate):
        /// rollback of rejected speculative tokens.</summary>
        public void Truncate(uint numTokens)
        {
            lock (Engine.Gate) Engine.Call(Native.pkv_truncate(Engine.Handle, Id, numTokens));
        }

        public uint Resume()
        {
            uint cached;
            lock (Engine.Gate) Engine.Call(Native.pkv_resume(Engine.Handle, Id, &cached));
            return NumCachedTokens = cached;
        }

        /// <summary>Moves the sequence's KV to the host tier (pkv_swap_out), keeping its tokens and
        /// computed count; the next batch lists the copies (CopyKind.SwapOut). PkvException
        /// Unsupported: no host tier; NoSpace: too few host blocks, nothing changed; State: not
        /// running.</summary>
        public void SwapOut() { lock (Engine.Gate) Engine.Call(Native.pkv_swap_out(Engine.Handle, Id)); }

        /// <summary>Brings a swapped-out sequence's KV back into pool blocks (pkv_swap_in), all or
        /// nothing; the next batch lists the copies (CopyKind.SwapIn). State: not swapped out.</summary>
        public void SwapIn() { lock (Engine.Gate) Engine.Call(Native.pkv_swap_in(Engine.Handle, Id)); }

        public SeqInfo Info()
        {
            var i = new SeqInfo { StructSize = (uint)sizeof(SeqInfo) };
            lock (Engine.Gate) Engine.Call(Native.pkv_seq_info(Engine.Handle, Id, &i));
            return i;
        }

        public int[] BlockTable() { return Engine.IntArray(Id, true); }
        public int[] Tokens() { return Engine.IntArray(Id, false); }
        public override string ToString() { return "Sequence " + Id; }
    }
}
