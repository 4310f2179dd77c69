// Engine (pkv_engine). EngineParams and Library are Params.cs, Sequence is Sequence.cs.
using System;
using System.Runtime.InteropServices;
using System.Text;

namespace Pkv
{
    /// <summary>A KV-cache engine. Dispose it (using); a disposed engine refuses every call with
    /// ObjectDisposedException. Calls on one engine may come from several threads.</summary>
    public sealed unsafe partial class Engine : IDisposable
    {
        readonly EngineHandle handle;
        readonly object gate = new object();
        // The open batch (pkv allows one per engine), held weakly: a Batch the host dropped is
        // collected, and its handle's finalizer aborts it, so a dropped batch never strands the
        // engine (the handle holds the engine's, so the engine outlives it).
        readonly WeakReference openBatch = new WeakReference(null);
        internal Batch OpenBatch
        {
            get { return (Batch)openBatch.Target; }
            set { openBatch.Target = value; }
        }

        /// <summary>The effective parameters, LayerWindows included (a copy of the engine's).</summary>
        public EngineParams Params { get; private set; }
        // pkv_attention's checks (Batch.Attention): elements per new token of q, of k/v and of
        // output (MLA: k is the latent, output KvLoraRank wide per q head)
        internal uint QPerToken, KvPerToken, OutPerToken;
        internal Device PoolDevice;  // where the pool is (Params.Device may say Auto)

        /// <summary>True for an MLA engine (Params.KvLayout KvLayout.Mla): Attention and
        /// SetKvScales take no V (null).</summary>
        public bool IsMla { get { return Params.KvLayout == KvLayout.Mla; } }

        public Engine(EngineParams p) : this(p, null, null, null) { }

        /// <summary>An engine whose layers have these sliding windows (one per layer, 0 = full
        /// attention), as p.LayerWindows (give them in one place only): see Variants.cs.</summary>
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
            uint[] windows = Library.Windows(p, layerWindows);
            LayerSpecNative[] specs = Library.NativeSpecs(p);
            int[] devices = p.RankDevicesChecked();
            StoreBridge bridge = store == null ? null : store.Build();
            var publisher = new StoreBridge();  // the publisher's memory, until create has copied it
            Status created;
            try
            {
                EngineParamsNative n = p.ToNative();
                n.Store = bridge == null ? IntPtr.Zero : (IntPtr)bridge.Params;
                if (eventPublisher != null) n.EventPublisher = (IntPtr)eventPublisher.Build(publisher);
                fixed (uint* w = windows)  // pinned for the call: pkv copies them at create
                fixed (LayerSpecNative* s = specs)
                fixed (int* d = devices)
                {
                    n.LayerWindows = (IntPtr)w;
                    n.RankDeviceIds = (IntPtr)d;
                    Library.SetSpecs(ref n, s);
                    created = Native.pkv_engine_create(&n, out handle);
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
            var eff = new EngineParamsNative { StructSize = (uint)sizeof(EngineParamsNative) };
            Call(Native.pkv_engine_params_get(handle, &eff));
            EngineParams effective = EngineParams.FromNative(eff);
            effective.LayerWindows = Library.CopyLayerWindows(eff);  // they point into the engine
            // the specs as the engine holds them, else as given (pkv reads them at create only)
            effective.LayerSpecs = Library.CopyLayerSpecs(eff) ?? p.SpecsNoCopy;
            effective.RankDeviceIds = EngineParams.CopyRankDeviceIds(eff);
            Params = effective;
            uint qHeads = eff.NumQHeads / eff.TpSize;
            QPerToken = qHeads * eff.HeadDim;
            KvPerToken = Budget().KvHeadsPerRank * eff.HeadDim;
            OutPerToken = IsMla ? qHeads * eff.KvLoraRank : QPerToken;
            PoolDevice = PoolInfo().Device;
        }

        public bool IsDisposed { get { return handle.IsClosed; } }

        /// <summary>Destroys the engine (pkv_engine_destroy): its open batch is aborted and its
        /// agents (Agent.cs) are disposed first. Idempotent.</summary>
        public void Dispose()
        {
            lock (gate)
            {
                Batch open = OpenBatch;
                if (open != null) open.Abort();
                DisposeAgents();  // its agents first (each holds the handle: else it would wait)
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

        /// <summary>Admits a prompt (pkv_allocate). PkvException NoSpace: nothing changed. salt: a
        /// tenant key (different salts never share blocks); extraKeys (a multimodal item's
        /// content hash over its placeholder tokens) and loraId (the adapter the KV is computed
        /// with, 0 = none): a block hits only under equal tokens, extra keys and adapter.
        /// retention (since 0.8.0): the eviction priority and retention its blocks keep when it
        /// releases them (Retention says how; default: plain LRU).</summary>
        public Sequence Allocate(int[] tokens, byte[] salt = null, ExtraKey[] extraKeys = null, ulong loraId = 0,
                                 Retention retention = default(Retention))
        {
            ulong id;
            uint cached;
            using (var keys = new PinnedKeys(extraKeys))
            lock (gate)
                fixed (int* t = tokens)
                fixed (byte* s = salt)
                {
                    SeqParams sp = SeqParamsOf(s, salt, keys, loraId, retention);
                    Call(Native.pkv_allocate(Handle, t, (uint)tokens.Length, sp.StructSize == 0 ? null : &sp,
                                             &id, &cached));
                }
            return new Sequence(this, id, cached);
        }

        /// <summary>Free blocks pkv_allocate would take now, and the tokens it would find cached.</summary>
        public uint AllocateQuery(int[] tokens, out uint numCachedTokens, byte[] salt = null, ExtraKey[] extraKeys = null,
                                  ulong loraId = 0)
        {
            uint blocks, cached;
            using (var keys = new PinnedKeys(extraKeys))
            lock (gate)
                fixed (int* t = tokens)
                fixed (byte* s = salt)
                {
                    SeqParams sp = SeqParamsOf(s, salt, keys, loraId);
                    Call(Native.pkv_allocate_query(Handle, t, (uint)tokens.Length,
                                                   sp.StructSize == 0 ? null : &sp, &blocks, &cached));
                }
            numCachedTokens = cached;
            return blocks;
        }

        // The sequence's params, or all zero (passed as NULL, as a 0.4 caller does) when none is given
        internal static SeqParams SeqParamsOf(byte* s, byte[] salt, PinnedKeys keys, ulong loraId,
                                              Retention retention = default(Retention))
        {
            var sp = new SeqParams();
            if (salt == null && keys.Count == 0 && loraId == 0 && retention.Equals(default(Retention))) return sp;
            Native.Check(Native.pkv_seq_params_init(&sp, (uint)sizeof(SeqParams)));
            if (salt != null)
            {
                sp.CacheSalt = (IntPtr)s;
                sp.CacheSaltLen = (uint)salt.Length;
            }
            sp.ExtraKeys = (IntPtr)keys.Keys;
            sp.NumExtraKeys = keys.Count;
            sp.ExtraKeySize = PinnedKeys.Size;
            sp.LoraId = loraId;
            sp.CachePriority = retention.Priority;
            sp.CacheRetentionMs = retention.RetentionMs;
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
                var batch = new Batch(this, b, false);
                OpenBatch = batch;
                return batch;
            }
        }

        /// <summary>Queues a request for the scheduler (pkv_submit); rp null = defaults (its
        /// LoraId: the adapter, as Allocate's loraId; CachePriority and CacheRetentionMs, since
        /// 0.8.0: as Allocate's retention). salt and extraKeys: as Allocate's. Transfers (since
        /// 0.12, Transfers.cs): HoldOnFinish 1 holds its blocks when it finishes, as Hold's
        /// (HoldTimeoutMs: 0 the default, Engine.NoTimeout none), when they fit
        /// EngineParams.MaxHeldBlocks (else Stats.NumHoldsRefused); NumRemoteTokens N (below the
        /// prompt's length) receives its first N tokens' KV from another engine
        /// (DrainReceiving).</summary>
        public Sequence Submit(int[] prompt, RequestParams? rp = null, byte[] salt = null, ExtraKey[] extraKeys = null)
        {
            RequestParams r = rp ?? RequestParams.Defaults();
            ulong id;
            using (var keys = new PinnedKeys(extraKeys))
            lock (gate)
                fixed (int* t = prompt)
                fixed (byte* s = salt)
                {
                    if (salt != null) { r.CacheSalt = (IntPtr)s; r.CacheSaltLen = (uint)salt.Length; }
                    r.ExtraKeys = (IntPtr)keys.Keys;
                    r.NumExtraKeys = keys.Count;
                    r.ExtraKeySize = PinnedKeys.Size;
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
                var batch = new Batch(this, b, true);
                OpenBatch = batch;
                return batch;
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
        /// Tier (Medium) says where its block was stored or removed; LoraId and NumExtraKeys (since
        /// 0.5) what joined its hash. They are written at this binding's sizeof(KvEvent) (56
        /// bytes): a newer libpkv fills only the fields KvEvent has, an older one zeroes those it
        /// does not know.</summary>
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
        /// KBase holds the latents, and its VBase and HostVBase are IntPtr.Zero (no V). Layers of
        /// unequal shapes (LayerSpecs) share one range of pages: NumLayers 1, KPool the first
        /// page, VPool Zero, BlockStride the page; LayerInfo(l) says where each layer is.</summary>
        public PoolInfo PoolInfo()
        {
            var p = new PoolInfo { StructSize = (uint)sizeof(PoolInfo) };
            lock (gate) Call(Native.pkv_pool_info(Handle, &p));
            return p;
        }

        /// <summary>Checks every block-manager invariant; PkvException Internal names the first broken.</summary>
        public void Check() { lock (gate) Call(Native.pkv_engine_check(Handle)); }

        /// <summary>The CUDA stream (a cudaStream_t) the engine's work is queued on
        /// (pkv_engine_set_stream); NativeAddress.Zero: the default stream.</summary>
        public void SetStream(NativeAddress cudaStream)
        {
            lock (gate) Call(Native.pkv_engine_set_stream(Handle, (void*)cudaStream.Pointer));
        }

        /// <summary>Rank rank's pool (pkv_rank_pool_info, since 0.10) on an engine of Ranks All, as
        /// PoolInfo (which is rank 0's): Rank, NumRanks, DeviceId (-1 on the CPU), TpRank, PpRank,
        /// and its stage's layers FirstLayer .. EndLayer - 1, whose K and V the pool holds.
        /// PkvException InvalidArgument for a rank not below NumRanks.</summary>
        public PoolInfo RankPoolInfo(uint rank)
        {
            var p = new PoolInfo { StructSize = (uint)sizeof(PoolInfo) };
            lock (gate) Call(Native.pkv_rank_pool_info(Handle, rank, &p));
            return p;
        }

        /// <summary>Rank rank's CUDA stream (pkv_engine_set_rank_stream, since 0.10), on that
        /// rank's device; NativeAddress.Zero: the default stream. SetStream on an engine of several
        /// ranks takes Zero only. PkvException InvalidArgument for a rank not below NumRanks, or a
        /// stream other than Zero on a CPU engine.</summary>
        public void SetRankStream(uint rank, NativeAddress cudaStream)
        {
            void* stream = (void*)cudaStream.Pointer;
            lock (gate) Call(Native.pkv_engine_set_rank_stream(Handle, rank, stream));
        }

        /// <summary>Opens the batch a decider exported (Batch.ExportPlan; pkv_plan_import, since
        /// 0.10) on this engine of Ranks Pool, made with the decider's parameters (NumBlocks and
        /// HostNumBlocks included) and this process's TpRank and PpRank. The batch runs this
        /// rank's heads of its stage's layers (Attention); End or Abort it (the decider's batch is
        /// the one that commits). Plans come in the order they were exported, each once; a refused
        /// plan changes nothing. PkvException State for a plan out of order (a stale one, or one
        /// ahead of the next), while a batch is open, or on an engine not of Ranks Pool;
        /// InvalidArgument for bytes that are no plan of this engine's shape (damaged, cut,
        /// another version, another shape: the field named).</summary>
        public Batch ImportPlan(byte[] plan)
        {
            if (plan == null) throw new ArgumentNullException("plan");
            lock (gate)
            {
                BatchHandle b;
                fixed (byte* p = plan)
                    Call(Native.pkv_plan_import(Handle, p, (ulong)plan.Length, out b));
                b.HoldEngine(handle);
                var batch = new Batch(this, b, false);
                OpenBatch = batch;
                return batch;
            }
        }

        /// <summary>The segments holding the KV of block ids <paramref name="blocks"/> of
        /// <paramref name="tier"/> (Tier.Device: the pool; Tier.Host: the host tier) on rank
        /// <paramref name="rank"/> (pkv_block_segments, since 0.11; 0 on an engine of one rank):
        /// for each block in order, each of its pool's layers (PoolInfo.NumLayers), K then V (MLA:
        /// the latent alone); the same count for every block. Two engines of equal
        /// LayoutFingerprint give segments of equal bytes in the same order: copying segment i to
        /// segment i moves the blocks. PkvException InvalidArgument for a tier other than Device
        /// or Host, Host on an engine without a host tier, a block id outside the tier, or a rank
        /// not below the engine's ranks.</summary>
        public Segment[] BlockSegments(uint rank, Tier tier, int[] blocks)
        {
            if (blocks == null) throw new ArgumentNullException("blocks");
            lock (gate)
            {
                uint n, t = (uint)tier, count = (uint)blocks.Length;
                fixed (int* b = blocks)
                {
                    Call(Native.pkv_block_segments(Handle, rank, t, b, count, null, 0, &n));
                    var a = new Segment[n];
                    fixed (Segment* p = a)
                        Call(Native.pkv_block_segments(Handle, rank, t, b, count, p, n, &n));
                    return a;
                }
            }
        }

        /// <summary>The segments of running sequence <paramref name="seq"/>'s blocks
        /// <paramref name="first"/> .. first + numBlocks - 1 on rank
        /// <paramref name="rank"/> (pkv_seq_segments, since 0.11): for each block index in order,
        /// each KV group in order, that group's block's segments as BlockSegments gives them. A
        /// block a windowed group gave back gives as many segments of Address Zero and Bytes 0, so
        /// two engines of one layout list each token range at the same positions. PkvException
        /// InvalidArgument for a range past the sequence's blocks (SeqInfo.NumBlocks) or a rank
        /// not below the engine's ranks; NotFound for a released sequence; State when it holds no
        /// blocks of the pool (waiting, preempted or swapped out).</summary>
        public Segment[] SeqSegments(uint rank, Sequence seq, uint first, uint numBlocks)
        {
            if (seq == null) throw new ArgumentNullException("seq");
            lock (gate)
            {
                uint n;
                ulong id = seq.Id;
                Call(Native.pkv_seq_segments(Handle, rank, id, first, numBlocks, null, 0, &n));
                var a = new Segment[n];
                fixed (Segment* p = a)
                    Call(Native.pkv_seq_segments(Handle, rank, id, first, numBlocks, p, n, &n));
                return a;
            }
        }

        /// <summary>Rank <paramref name="rank"/>'s layout fingerprint (pkv_layout_fingerprint,
        /// since 0.11): 32 bytes of SHA-256 over what decides what a block's segments hold and
        /// where (the model's shape and dtypes, fp8 scales, the block size, the layers and groups,
        /// the ranks), not over how many blocks either tier has. Engines of equal fingerprints
        /// can move blocks segment by segment. PkvException InvalidArgument for a rank not below
        /// the engine's ranks.</summary>
        public byte[] LayoutFingerprint(uint rank)
        {
            var fp = new byte[32];
            fixed (byte* p = fp)
                lock (gate) Call(Native.pkv_layout_fingerprint(Handle, rank, p));
            return fp;
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
}
