// Batch (pkv_batch): one forward step's plan. Attention per layer, then End (a batch of
// BeginBatch), Commit (a batch of Step) or Abort.
using System;
using System.Runtime.InteropServices;

namespace Pkv
{
    /// <summary>What a listed block copy moves (Batch.CopyKinds(), PKV_COPY_*).</summary>
    public enum CopyKind
    {
        /// <summary>Pool block to pool block: copy-on-write.</summary>
        Cow = Native.PKV_COPY_COW,
        /// <summary>Pool block to host-tier block: Sequence.SwapOut.</summary>
        SwapOut = Native.PKV_COPY_SWAP_OUT,
        /// <summary>Host-tier block to pool block: Sequence.SwapIn.</summary>
        SwapIn = Native.PKV_COPY_SWAP_IN,
        /// <summary>Pool block to host-tier block: a cached block evicted from the pool keeps its
        /// KV in the host tier (EngineParams.HostOffload).</summary>
        Offload = Native.PKV_COPY_OFFLOAD,
        /// <summary>Host-tier block to pool block: a prefix hit on a block held only in the host
        /// tier.</summary>
        Load = Native.PKV_COPY_LOAD,
        /// <summary>State slot to state slot (pkv 0.6; ids are slots, PoolInfo.StatePool): a
        /// fork's copy of its parent's state, run before the step reads any state.</summary>
        State = Native.PKV_COPY_STATE,
        /// <summary>State slot to host state slot (pkv 0.6; Src a state slot, Dst a host state
        /// slot, PoolInfo.HostStatePool): Sequence.SwapOut's working state, or a checkpoint
        /// evicted from the device and offloaded.</summary>
        StateOut = Native.PKV_COPY_STATE_OUT,
        /// <summary>Host state slot to working state slot (pkv 0.6): Sequence.SwapIn, or a prefix
        /// hit restoring an offloaded checkpoint.</summary>
        StateIn = Native.PKV_COPY_STATE_IN,
    }

    /// <summary>One step's plan, from Engine.BeginBatch or Engine.Step. Call Attention for every
    /// layer, then End() (a batch of BeginBatch) or Commit (a batch of Step). Dispose() without
    /// either aborts it (nothing becomes computed), like a transaction:
    /// <c>using (var b = engine.BeginBatch(seqs)) { ...; b.End(); }</c>. A failed End or Commit
    /// leaves the batch open (pkv keeps it, and so does this object): Abort or Dispose still ends
    /// it, and a Batch dropped without ending is aborted when it is collected (the engine holds it
    /// weakly): no sequence of calls leaves the engine with a batch nothing can end. A batch that
    /// is ended, aborted or whose engine is disposed refuses calls with ObjectDisposedException.</summary>
    public sealed unsafe partial class Batch : IDisposable
    {
        readonly Engine engine;
        readonly BatchHandle handle;
        readonly Batch of;  // a rank's handle (Rank, since 0.10): the batch it is of; else null
        BatchView view;

        /// <summary>True for a batch of Engine.Step: it ends with Commit (End refuses it,
        /// PkvException State, and leaves it open).</summary>
        public bool IsScheduled { get; private set; }

        internal Batch(Engine e, BatchHandle h, bool scheduled)
        {
            engine = e;
            handle = h;
            IsScheduled = scheduled;
            var v = new BatchView { StructSize = (uint)sizeof(BatchView) };
            Check(Native.pkv_batch_info(h, &v));
            view = v;
            RankIndex = -1;
        }

        // A rank's handle: pkv's, freed with its batch (never aborted by itself), the batch's view.
        Batch(Batch batch, BatchHandle h, uint rank)
        {
            engine = batch.engine;
            handle = h;
            handle.Detach();  // releasing it must not abort the batch (pkv frees it with the batch)
            of = batch;
            IsScheduled = batch.IsScheduled;
            view = batch.view;
            RankIndex = (int)rank;
        }

        /// <summary>The rank of a rank's handle (Rank); -1 for a batch itself.</summary>
        public int RankIndex { get; private set; }

        bool Closed { get { return of != null ? of.handle.IsClosed : handle.IsClosed; } }

        BatchHandle Handle
        {
            get
            {
                if (Closed) throw new ObjectDisposedException("Pkv.Batch");
                return handle;
            }
        }

        static void Check(Status s)  // batch calls: this thread's message
        {
            if (s != Status.Ok) throw new PkvException(s, Native.Text(Native.pkv_last_error()));
        }

        public bool IsOpen { get { return !Closed; } }

        /// <summary>The raw plan (pointers valid while the batch is open); the arrays below copy.</summary>
        internal BatchView View { get { lock (engine.Gate) { Touch(); return view; } } }
        public uint NumSeqs { get { return view.NumSeqs; } }
        public uint NumTokens { get { return view.NumTokens; } }

        void Touch() { if (Closed) throw new ObjectDisposedException("Pkv.Batch"); }

        int[] Ints(IntPtr p, long n)
        {
            lock (engine.Gate)
            {
                Touch();
                var a = new int[n];
                if (n > 0) Marshal.Copy(p, a, 0, (int)n);
                return a;
            }
        }

        public ulong[] SeqIds()
        {
            lock (engine.Gate)
            {
                Touch();
                var a = new ulong[view.NumSeqs];
                for (int i = 0; i < a.Length; i++) a[i] = ((ulong*)view.SeqIds)[i];
                return a;
            }
        }

        public long[] SlotMapping()
        {
            lock (engine.Gate)
            {
                Touch();
                var a = new long[view.NumTokens];
                if (a.Length > 0) Marshal.Copy(view.SlotMapping, a, 0, a.Length);
                return a;
            }
        }

        public int[] QueryStart() { return Ints(view.QueryStart, view.NumSeqs + 1); }
        public int[] Positions() { return Ints(view.Positions, view.NumTokens); }
        public int[] ContextLens() { return Ints(view.ContextLens, view.NumSeqs); }
        public int[] BlockIndptr() { return Ints(view.BlockIndptr, view.NumSeqs + 1); }
        public int[] BlockIndices()
        {
            return Ints(view.BlockIndices, view.NumSeqs == 0 ? 0 : BlockIndptr()[view.NumSeqs]);
        }
        public int[] LastBlockLen() { return Ints(view.LastBlockLen, view.NumSeqs); }

        /// <summary>[NumSeqs]: the row of the step's output whose token each sequence samples, -1
        /// for a sequence that samples none this step (a prompt chunk short of its end). Commit
        /// takes sampledTokens[i] where SampleRows()[i] != -1.</summary>
        public int[] SampleRows() { return Ints(view.SampleRows, view.NumSeqs); }
        public int[] BlockTables() { return Ints(view.BlockTables, (long)view.NumSeqs * view.MaxBlocksPerSeq); }
        public int[] CopySrc() { return Ints(view.CopySrc, view.NumCopies); }
        public int[] CopyDst() { return Ints(view.CopyDst, view.NumCopies); }

        /// <summary>What each listed copy moves (empty from a library older than 0.2, whose
        /// copies are all copy-on-write).</summary>
        public CopyKind[] CopyKinds()
        {
            int[] kinds = Ints(view.CopyKind, view.CopyKind == IntPtr.Zero ? 0 : view.NumCopies);
            return Array.ConvertAll(kinds, k => (CopyKind)k);
        }

        /// <summary>Does the listed block copies now (pkv_batch_copy), unless they are done
        /// already: for hosts that run no Attention but let pkv move the blocks (the first
        /// Attention does them too).</summary>
        public void Copy()
        {
            lock (engine.Gate) Check(Native.pkv_batch_copy(Handle));
        }

        /// <summary>Plans this decode step for a CUDA graph (pkv_batch_plan_graph, pkv 0.9; a
        /// CUDA engine only): a GPU engine's decode step is captured once in a CUDA graph and
        /// replayed after each later PlanGraph of the same bucket. Call it before the step's first
        /// Attention: it queues the block copies and the batch's arrays, padded to bucket
        /// sequences, into device buffers at fixed addresses, so every Attention (NativeAddress
        /// overload) of the batch launches kernels that depend only on the bucket and the layer;
        /// capture them on the stream of Engine.SetStream (not the legacy NULL stream). Every
        /// sequence computes one token; NumSeqs &lt;= bucket &lt;= EngineParams.MaxNumSeqs.
        /// Between replays the sequences, their count (up to bucket), lengths and block tables and
        /// the contents of q, k and v may change; the bucket, the layers and their order, the q,
        /// k, v and output addresses (bucket rows each) and the stream may not. PkvException:
        /// Unsupported on a CPU engine (it has no CUDA graphs: run Attention as is; the batch stays
        /// usable) or one with indexer layers; InvalidArgument for a bucket of 0, below NumSeqs or
        /// above MaxNumSeqs, or a sequence computing more than one token; State once an Attention
        /// of the batch ran. ObjectDisposedException after the batch ended.</summary>
        public void PlanGraph(uint bucket)
        {
            lock (engine.Gate) Check(Native.pkv_batch_plan_graph(Handle, bucket));
        }

        /// <summary>Rank rank's handle of this batch (pkv_batch_rank, since 0.10) on an engine of
        /// EngineParams.Ranks All (rank = PpRank * TpSize + TpRank). Its Attention (and the
        /// indexer's and sparse MLA's calls, PlanGraph) runs on that rank's pool with that rank's
        /// heads: q and output [tokens][NumQHeads / TpSize][HeadDim], k and v its kv heads; on
        /// such an engine Attention of the batch itself is PkvException InvalidArgument. Its view
        /// is the batch's; End, Commit, Abort and Dispose on it end the batch, every rank's. It is
        /// valid while the batch is open (then ObjectDisposedException). On an engine of one rank,
        /// rank 0 is the batch itself. PkvException InvalidArgument for a rank not below the
        /// engine's ranks, or on a rank's handle.</summary>
        public Batch Rank(uint rank)
        {
            lock (engine.Gate)
            {
                BatchHandle h;
                Check(Native.pkv_batch_rank(Handle, rank, out h));
                return new Batch(this, h, rank);
            }
        }

        /// <summary>This step's plan as bytes (pkv_batch_export_plan, since 0.10), for the Ranks
        /// Pool engines of other processes (Engine.ImportPlan): the batch's view and its block
        /// copies, with a version, the engine's shape, a step number (the engine's exported plans
        /// counted from 0) and a checksum. The host carries the bytes (a pipe, shared memory, an
        /// NCCL broadcast); every export of one batch returns the same plan. PkvException State on
        /// an engine of Ranks Pool (its batches are imported); ObjectDisposedException after the
        /// batch ended.</summary>
        public byte[] ExportPlan()
        {
            lock (engine.Gate)
            {
                ulong n;
                Check(Native.pkv_batch_export_plan(Handle, null, 0, &n));
                var plan = new byte[n];
                fixed (byte* p = plan)
                    if (n > 0) Check(Native.pkv_batch_export_plan(Handle, p, n, &n));
                return plan;
            }
        }

        /// <summary>pkv_attention for one layer of an F32 engine on the CPU. q, output: [tokens][q
        /// heads per rank][head_dim]; k, v: [tokens][kv heads per rank][head_dim]. An MLA engine
        /// (Engine.IsMla) takes the absorbed form, with W = KvLoraRank + QkRopeHeadDim (its
        /// HeadDim): q [tokens][q heads per rank][W], k the new tokens' latents [tokens][W], v
        /// null (V is the latents' first KvLoraRank values; a v is refused), output [tokens][q
        /// heads per rank][KvLoraRank]. An engine of EngineParams.LayerSpecs takes each layer's
        /// own shape (Engine.LayerInfo): q [tokens][q heads per rank][HeadDim], k [tokens][KvHeads]
        /// [HeadDim], v [tokens][KvHeads][VHeadDim], output [tokens][q heads per rank][VHeadDim]; a
        /// K = V layer takes v null, a Shared layer k and v null (it writes nothing and reads its
        /// source layer's cache: call it after its source). Checked before pkv is called
        /// (PkvException InvalidArgument, saying what was expected): the engine's model dtype is
        /// F32, and each array holds at least the elements pkv reads or writes; Unsupported on a
        /// CUDA engine (use the NativeAddress overload).</summary>
        public void Attention(uint layer, float[] q, float[] k, float[] v, float[] output)
        {
            Pinned(layer, q, k, v, output, "float[]");
        }

        /// <summary>pkv_attention for an F16 or BF16 engine on the CPU: the values' raw 16-bit
        /// patterns (IEEE half or bfloat16, as the engine's model dtype), shaped and checked as
        /// the float[] overload.</summary>
        public void Attention(uint layer, ushort[] q, ushort[] k, ushort[] v, ushort[] output)
        {
            Pinned(layer, q, k, v, output, "ushort[]");
        }

        /// <summary>pkv_attention on native addresses (device memory on a CUDA engine), of the
        /// sizes the array overloads check: this overload cannot check them. An MLA engine's v is
        /// NativeAddress.Zero, and so are a K = V layer's v and a Shared layer's k and v.</summary>
        public void Attention(uint layer, NativeAddress q, NativeAddress k, NativeAddress v, NativeAddress output)
        {
            lock (engine.Gate)
                Check(Native.pkv_attention(Handle, layer, (void*)q.Pointer, (void*)k.Pointer, (void*)v.Pointer,
                                           (void*)output.Pointer));
        }

        // k or v null: none (a Shared layer's k and v, MLA's and K = V's v), passed as NULL
        void Pinned(uint layer, Array q, Array k, Array v, Array output, string elem)
        {
            CheckBuffers(layer, q, k, v, output, elem);
            Pinned(new[] { q, k, v, output }, at => Native.pkv_attention(Handle, layer, at[0], at[1], at[2], at[3]));
        }

        /// <summary>Refuses host arrays pkv would misread: of another element type than the
        /// engine's model dtype (float32 given to a bf16 engine reads as garbage), too short for
        /// the step's tokens, or on a CUDA engine (pkv would take them for device memory).</summary>
        void CheckBuffers(uint layer, Array q, Array k, Array v, Array output, string elem,
                          string call = "Attention")
        {
            EngineParams p = engine.Params;
            if (engine.PoolDevice != Device.Cpu)
                throw new PkvException(Status.Unsupported,
                    call + ": arrays are host memory and this engine's pool is on " + engine.PoolDevice +
                    ": pass device buffers with the NativeAddress overload");
            string want = p.DType == DType.F32 ? "float[]" : "ushort[]";
            if (elem != want)
                throw new PkvException(Status.InvalidArgument, string.Format(
                    "{4}: the engine's model dtype is {0}, so q, k, v and output are {1} ({2}), not {3}",
                    p.DType, want, p.DType == DType.F32 ? "float32 values" : p.DType + " bit patterns", elem, call));
            LayerShape shape = engine.Shape(layer);
            CheckAbsent(layer, shape, k, v, call);
            long rows = view.NumTokens;
            Need(q, rows * shape.Q, "q", elem, call);
            if (k != null) Need(k, rows * shape.K, "k", elem, call);
            if (v != null && shape.V > 0) Need(v, rows * shape.V, "v", elem, call);  // MLA's v: pkv says why not
            Need(output, rows * shape.Out, "output", elem, call);
        }

        // k or v given where the layer takes none, or missing where it needs one: refused, saying why
        void CheckAbsent(uint layer, LayerShape shape, Array k, Array v, string call)
        {
            string why = null;
            if (shape.Kind == LayerKind.State)
                why = string.Format("layer {0} is a State layer (a recurrent state, no K and V): pkv has no " +
                                    "attention for it; run its recurrence on the slots of StateSlots()", layer);
            else if (shape.Kind == LayerKind.Shared && (k != null || v != null))
                why = string.Format("layer {0} is Shared (it reads layer {1}'s K and V and writes none): k and v " +
                                    "must be null", layer, engine.LayerInfo(layer).SourceLayer);
            else if (shape.Kind != LayerKind.Shared && k == null)
                why = "k is null: give the new tokens' K (only a Shared layer takes none)";
            else if (shape.KEqV && shape.Kind == LayerKind.Attention && v != null)
                why = string.Format("layer {0} keeps K = V (stored once): v must be null", layer);
            else if (shape.V > 0 && v == null)
                why = "v is null: give the new tokens' V (only an MLA engine, a K = V layer or a Shared layer " +
                      "takes none)";
            if (why != null) throw new PkvException(Status.InvalidArgument, call + ": " + why);
        }

        static void Need(Array a, long need, string name, string elem, string call)
        {
            if (a == null) throw new ArgumentNullException(name);
            if (a.Length < need)
                throw new PkvException(Status.InvalidArgument, string.Format(
                    "{4}: {0} has {1} elements, this step needs {2} ({0} is {3}, [tokens][heads][dims])",
                    name, a.Length, need, elem, call));
        }

        /// <summary>The step ran (pkv_batch_end): its tokens become computed, full blocks are
        /// sealed; frees the batch. On failure (PkvException) the batch stays open, as pkv keeps
        /// it: a batch of Engine.Step is refused here (State: it ends with Commit) and can still
        /// be committed or aborted.</summary>
        public void End()
        {
            if (of != null) { of.End(); return; }  // a rank's handle ends its batch
            lock (engine.Gate)
            {
                Status s = Native.pkv_batch_end(Handle);
                if (s != Status.Ok && IsScheduled)  // say it in this binding's terms
                    throw new PkvException(s, "End: a batch of Engine.Step ends with Commit(sampledTokens) or " +
                                              "Abort(); it is still open (pkv: " + Native.Text(Native.pkv_last_error()) + ")");
                Check(s);
                Freed();
            }
        }

        /// <summary>Ends a batch of Engine.Step (pkv_commit): sampledTokens[i] is the token
        /// sampled for the batch's sequence i (read where SampleRows()[i] != -1; null when none
        /// samples). On failure the batch stays open (Commit again, or Abort).</summary>
        public void Commit(int[] sampledTokens)
        {
            if (of != null) { of.Commit(sampledTokens); return; }
            lock (engine.Gate)
            {
                Touch();
                if (sampledTokens != null && sampledTokens.Length < view.NumSeqs)
                    throw new PkvException(Status.InvalidArgument, string.Format(
                        "Commit: {0} sampled tokens for a batch of {1} sequences: give one per sequence " +
                        "(read where SampleRows() is not -1)", sampledTokens.Length, view.NumSeqs));
                fixed (int* t = sampledTokens)
                    Check(Native.pkv_commit(Handle, t));
                Freed();
            }
        }

        void Freed()  // pkv freed the batch: the handle releases only its engine reference
        {
            handle.Detach();
            Close();
        }

        /// <summary>The step did not run: nothing becomes computed. Idempotent.</summary>
        public void Abort()
        {
            if (of != null) { of.Abort(); return; }
            lock (engine.Gate) Close();
        }

        void Close()
        {
            handle.Dispose();  // aborts unless detached; drops the engine reference
            if (engine.OpenBatch == this) engine.OpenBatch = null;
        }

        public void Dispose() { Abort(); }
    }
}
