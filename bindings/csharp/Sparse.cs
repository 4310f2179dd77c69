// Sparse attention (pkv 0.7: DeepSeek V3.2, GLM-5; DESIGN.md §14) on an MLA layer with an
// indexer (LayerSpec.Indexed), per layer per step, in this order:
//   b.IndexerWrite(layer, indexK);                      // the new tokens' indexer keys
//   b.IndexerTopK(layer, indexQ, weights, top);         // each token's IndexTopk positions
//   b.SparseMlaAttention(layer, q, latents, top, output); // MLA over those keys only
// Arrays are checked as Attention's are (element type, length) before pkv is called; a layer
// without an indexer is pkv's PkvException InvalidArgument, with its message.
using System;
using System.Runtime.InteropServices;

namespace Pkv
{
    public partial struct LayerSpec
    {
        /// <summary>An MLA layer with a sparse-attention indexer (since 0.7): per token a key of
        /// headDim values beside its latent, in the same block, of dtype (Fp8E4m3: fp8 codes and
        /// one fp32 scale per token; Bf16), heads indexer query heads and topK keys kept per query
        /// token (DeepSeek V3.2: 128, 64, 2048, Fp8E4m3).</summary>
        public static LayerSpec Indexed(uint headDim, uint heads, uint topK, DType dtype = DType.Fp8E4m3)
        {
            return new LayerSpec { Kind = LayerKind.Mla, IndexHeadDim = headDim, IndexNHeads = heads,
                                   IndexTopk = topK, IndexDType = dtype };
        }
    }

    public partial struct LayerInfo
    {
        /// <summary>Block 0's indexer keys (since 0.7; Zero without an indexer): the key of token t
        /// of block b is IndexPool + b * IndexBlockBytes + t * IndexHeadDim * (1 for fp8, 2 for
        /// bf16) bytes.</summary>
        public NativeAddress IndexPool { get { return NativeAddress.Of(IndexBase); } }
        /// <summary>Block 0's fp8 key scales (fp32, Zero for bf16): token t of block b's at
        /// IndexScalePool + b * IndexBlockBytes + 4 * t bytes.</summary>
        public NativeAddress IndexScalePool { get { return NativeAddress.Of(IndexScaleBase); } }
        /// <summary>The host tier's, with the same strides; Zero without a host tier.</summary>
        public NativeAddress HostIndexPool { get { return NativeAddress.Of(HostIndexBase); } }
        public NativeAddress HostIndexScalePool { get { return NativeAddress.Of(HostIndexScaleBase); } }
    }

    public sealed unsafe partial class Batch
    {
        /// <summary>pkv_indexer_write for an F32 engine on the CPU: the new tokens' indexer keys k
        /// [tokens][IndexHeadDim] into their slots of layer, quantized to its index dtype (fp8: one
        /// scale per token, max|x| / 448; IndexerFlags.ScaleUe8m0 rounds it up to a power of two).
        /// Call it before IndexerTopK reads them.</summary>
        public void IndexerWrite(uint layer, float[] k, IndexerFlags flags = IndexerFlags.None)
        {
            IndexerWriteArrays(layer, k, flags, "float[]");
        }

        /// <summary>IndexerWrite for an F16 or BF16 engine: the keys' 16-bit patterns.</summary>
        public void IndexerWrite(uint layer, ushort[] k, IndexerFlags flags = IndexerFlags.None)
        {
            IndexerWriteArrays(layer, k, flags, "ushort[]");
        }

        /// <summary>pkv_indexer_write on a native address (device memory on CUDA), unchecked.</summary>
        public void IndexerWrite(uint layer, NativeAddress k, IndexerFlags flags = IndexerFlags.None)
        {
            lock (engine.Gate) Check(Native.pkv_indexer_write(Handle, layer, (void*)k.Pointer, (uint)flags));
        }

        /// <summary>pkv_indexer_topk for an F32 engine on the CPU: with q [tokens][IndexNHeads]
        /// [IndexHeadDim] and weights [tokens][IndexNHeads], key s scores the sum over heads h of
        /// weights[h] * relu(q[h] . key(s)); output [tokens][IndexTopk] gets each token's keys of
        /// highest score ascending by position (TopKKind.Slots: their slots in the layer's KV
        /// group), then -1 where its context is shorter. Of equal scores the lower position is
        /// kept.</summary>
        public void IndexerTopK(uint layer, float[] q, float[] weights, int[] output,
                                TopKKind kind = TopKKind.Positions)
        {
            IndexerTopKArrays(layer, q, weights, output, kind, "float[]");
        }

        /// <summary>IndexerTopK for an F16 or BF16 engine: q's 16-bit patterns.</summary>
        public void IndexerTopK(uint layer, ushort[] q, float[] weights, int[] output,
                                TopKKind kind = TopKKind.Positions)
        {
            IndexerTopKArrays(layer, q, weights, output, kind, "ushort[]");
        }

        /// <summary>pkv_indexer_topk on native addresses (device memory on CUDA), unchecked.</summary>
        public void IndexerTopK(uint layer, NativeAddress q, NativeAddress weights, NativeAddress output,
                                TopKKind kind = TopKKind.Positions)
        {
            lock (engine.Gate)
                Check(Native.pkv_indexer_topk(Handle, layer, (void*)q.Pointer, (float*)weights.Pointer, (uint)kind,
                                              (int*)output.Pointer));
        }

        /// <summary>pkv_sparse_mla_attention for an F32 engine on the CPU: Attention's MLA form (q
        /// [tokens][q heads per rank][W], k the new tokens' latents [tokens][W], output [tokens][q
        /// heads per rank][KvLoraRank]) with each token attending over the positions indices[t][0
        /// .. IndexTopk) of its sequence only (IndexerTopK's Positions; -1 and positions past the
        /// token's own are skipped, a token with none left gets output 0).</summary>
        public void SparseMlaAttention(uint layer, float[] q, float[] k, int[] indices, float[] output)
        {
            SparseArrays(layer, q, k, indices, output, "float[]");
        }

        /// <summary>SparseMlaAttention for an F16 or BF16 engine: 16-bit patterns.</summary>
        public void SparseMlaAttention(uint layer, ushort[] q, ushort[] k, int[] indices, ushort[] output)
        {
            SparseArrays(layer, q, k, indices, output, "ushort[]");
        }

        /// <summary>pkv_sparse_mla_attention on native addresses (device memory on CUDA), unchecked.</summary>
        public void SparseMlaAttention(uint layer, NativeAddress q, NativeAddress k, NativeAddress indices,
                                       NativeAddress output)
        {
            lock (engine.Gate)
                Check(Native.pkv_sparse_mla_attention(Handle, layer, (void*)q.Pointer, (void*)k.Pointer,
                                                      (int*)indices.Pointer, (void*)output.Pointer));
        }

        void IndexerWriteArrays(uint layer, Array k, IndexerFlags flags, string elem)
        {
            LayerInfo i = Indexer(layer, elem, "IndexerWrite");
            if (i.IndexHeadDim > 0) Need(k, (long)view.NumTokens * i.IndexHeadDim, "k", elem, "IndexerWrite");
            Pinned(new[] { k }, at => Native.pkv_indexer_write(Handle, layer, at[0], (uint)flags));
        }

        void IndexerTopKArrays(uint layer, Array q, float[] weights, int[] output, TopKKind kind, string elem)
        {
            const string call = "IndexerTopK";
            LayerInfo i = Indexer(layer, elem, call);
            long rows = view.NumTokens;
            if (i.IndexHeadDim > 0)
            {
                Need(q, rows * i.IndexNHeads * i.IndexHeadDim, "q", elem, call);
                Need(weights, rows * i.IndexNHeads, "weights", "float[]", call);
                Need(output, rows * i.IndexTopk, "output", "int[]", call);
            }
            Pinned(new Array[] { q, weights, output },
                   at => Native.pkv_indexer_topk(Handle, layer, at[0], (float*)at[1], (uint)kind, (int*)at[2]));
        }

        void SparseArrays(uint layer, Array q, Array k, int[] indices, Array output, string elem)
        {
            const string call = "SparseMlaAttention";
            LayerInfo i = Indexer(layer, elem, call);
            if (i.IndexHeadDim > 0)
            {
                CheckBuffers(layer, q, k, null, output, elem, call);
                Need(indices, (long)view.NumTokens * i.IndexTopk, "indices", "int[]", call);
            }
            Pinned(new Array[] { q, k, indices, output },
                   at => Native.pkv_sparse_mla_attention(Handle, layer, at[0], at[1], (int*)at[2], at[3]));
        }

        /// <summary>The layer's LayerInfo; on a layer with an indexer the engine must take host
        /// arrays of elem (a layer without one is left to pkv, which refuses it by name).</summary>
        LayerInfo Indexer(uint layer, string elem, string call)
        {
            LayerInfo i = engine.LayerInfo(layer);
            if (i.IndexHeadDim == 0) return i;
            if (engine.PoolDevice != Device.Cpu)
                throw new PkvException(Status.Unsupported, call + ": arrays are host memory and this engine's " +
                                       "pool is on " + engine.PoolDevice + ": pass NativeAddress buffers");
            DType dtype = engine.Params.DType;
            string want = dtype == DType.F32 ? "float[]" : "ushort[]";
            if (elem != want)
                throw new PkvException(Status.InvalidArgument, string.Format(
                    "{0}: the engine's model dtype is {1}, so q, k and output are {2}, not {3}",
                    call, dtype, want, elem));
            return i;
        }

        delegate Status PinnedCall(void*[] at);

        // Pins the arrays (null: NULL) for one pkv call under the engine's lock.
        void Pinned(Array[] arrays, PinnedCall call)
        {
            var pins = new GCHandle?[arrays.Length];
            try
            {
                var at = new void*[arrays.Length];
                for (int a = 0; a < arrays.Length; a++)
                {
                    if (arrays[a] == null) continue;
                    pins[a] = GCHandle.Alloc(arrays[a], GCHandleType.Pinned);
                    at[a] = (void*)pins[a].Value.AddrOfPinnedObject();
                }
                lock (engine.Gate) Check(call(at));
            }
            finally
            {
                foreach (var p in pins)
                    if (p.HasValue) p.Value.Free();
            }
        }
    }
}
