// Batch (pkv_batch): one forward step's plan. Attention per layer, then End (or Abort).
using System;
using System.Runtime.InteropServices;

namespace Pkv
{
    /// <summary>What a listed block copy moves (BatchView.CopyKind, PKV_COPY_*).</summary>
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
    }

    /// <summary>One step's plan, from Engine.BeginBatch. Call Attention for every layer, then
    /// End(). Dispose() without End() aborts it (nothing becomes computed), like a transaction:
    /// <c>using (var b = engine.BeginBatch(seqs)) { ...; b.End(); }</c>. A batch that is ended,
    /// aborted or whose engine is disposed refuses calls with ObjectDisposedException.</summary>
    public sealed unsafe partial class Batch : IDisposable
    {
        readonly Engine engine;
        readonly BatchHandle handle;
        BatchView view;

        internal Batch(Engine e, BatchHandle h)
        {
            engine = e;
            handle = h;
            var v = new BatchView { StructSize = (uint)sizeof(BatchView) };
            Check(Native.pkv_batch_info(h, &v));
            view = v;
        }

        BatchHandle Handle
        {
            get
            {
                if (handle.IsClosed) throw new ObjectDisposedException("Pkv.Batch");
                return handle;
            }
        }

        static void Check(Status s)  // batch calls: this thread's message
        {
            if (s != Status.Ok) throw new PkvException(s, Native.Text(Native.pkv_last_error()));
        }

        public bool IsOpen { get { return !handle.IsClosed; } }

        /// <summary>The raw plan (pointers valid while the batch is open); the arrays below copy.</summary>
        public BatchView View { get { lock (engine.Gate) { Touch(); return view; } } }
        public uint NumSeqs { get { return view.NumSeqs; } }
        public uint NumTokens { get { return view.NumTokens; } }

        void Touch() { if (handle.IsClosed) throw new ObjectDisposedException("Pkv.Batch"); }

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

        /// <summary>pkv_attention for one layer, f32 engine. q, output: [tokens][q heads per
        /// rank][head_dim]; k, v: [tokens][kv heads per rank][head_dim]. Lengths are checked.
        /// An MLA engine (Engine.IsMla) takes the absorbed form, with W = KvLoraRank +
        /// QkRopeHeadDim (its HeadDim): q [tokens][q heads per rank][W], k the new tokens'
        /// latents [tokens][W], v null (V is the latents' first KvLoraRank values; a v is refused,
        /// PkvException InvalidArgument), output [tokens][q heads per rank][KvLoraRank].</summary>
        public void Attention(uint layer, float[] q, float[] k, float[] v, float[] output)
        {
            Pinned(layer, q, k, v, output, sizeof(float));
        }

        /// <summary>pkv_attention for an f16 or bf16 engine: the values' raw 16-bit patterns.</summary>
        public void Attention(uint layer, ushort[] q, ushort[] k, ushort[] v, ushort[] output)
        {
            Pinned(layer, q, k, v, output, sizeof(ushort));
        }

        /// <summary>pkv_attention on raw addresses (device memory on a CUDA engine); unchecked. An
        /// MLA engine's v is IntPtr.Zero.</summary>
        public void Attention(uint layer, IntPtr q, IntPtr k, IntPtr v, IntPtr output)
        {
            lock (engine.Gate)
                Check(Native.pkv_attention(Handle, layer, (void*)q, (void*)k, (void*)v, (void*)output));
        }

        // v null: no V (MLA's), passed as NULL
        void Pinned(uint layer, Array q, Array k, Array v, Array output, int elem)
        {
            Need(q, engine.QBytesPerToken, elem, "q");
            Need(k, engine.KvBytesPerToken, elem, "k");
            if (v != null) Need(v, engine.KvBytesPerToken, elem, "v");
            Need(output, engine.OutBytesPerToken, elem, "output");
            var pins = new[] { GCHandle.Alloc(q, GCHandleType.Pinned), GCHandle.Alloc(k, GCHandleType.Pinned),
                               GCHandle.Alloc(output, GCHandleType.Pinned) };
            GCHandle? vPin = v == null ? (GCHandle?)null : GCHandle.Alloc(v, GCHandleType.Pinned);
            try
            {
                Attention(layer, pins[0].AddrOfPinnedObject(), pins[1].AddrOfPinnedObject(),
                          vPin.HasValue ? vPin.Value.AddrOfPinnedObject() : IntPtr.Zero,
                          pins[2].AddrOfPinnedObject());
            }
            finally
            {
                foreach (var p in pins) p.Free();
                if (vPin.HasValue) vPin.Value.Free();
            }
        }

        void Need(Array a, uint bytesPerToken, int elem, string name)
        {
            if (a == null) throw new ArgumentNullException(name);
            long need = (long)view.NumTokens * bytesPerToken;
            if ((long)a.Length * elem < need)
                throw new ArgumentException(string.Format("{0}: {1} bytes, pkv needs {2}", name,
                                                          (long)a.Length * elem, need), name);
        }

        /// <summary>The step ran: its tokens become computed, full blocks are sealed. Frees the batch.</summary>
        public void End()
        {
            lock (engine.Gate)
            {
                Touch();
                IntPtr b = handle.Detach();
                Close();
                Check(Native.pkv_batch_end(b));
            }
        }

        /// <summary>Ends a batch of Engine.Step (pkv_commit): sampledTokens[i] is the token
        /// sampled for the batch's sequence i (read where sample_rows[i] != -1; null when none
        /// samples). On failure the batch stays open.</summary>
        public void Commit(int[] sampledTokens)
        {
            lock (engine.Gate)
            {
                fixed (int* t = sampledTokens)
                    Check(Native.pkv_commit(Handle, t));
                handle.Detach();
                Close();
            }
        }

        /// <summary>The step did not run: nothing becomes computed. Idempotent.</summary>
        public void Abort()
        {
            lock (engine.Gate) Close();
        }

        void Close()
        {
            handle.Dispose();  // aborts unless detached; drops the engine reference
            if (engine.openBatch == this) engine.openBatch = null;
        }

        public void Dispose() { Abort(); }
    }
}
