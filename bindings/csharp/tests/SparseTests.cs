// Sparse attention (pkv 0.7, DeepSeek V3.2 / GLM-5): an MLA layer with an indexer, its keys and
// scales read back where LayerInfo says they are, the top-k of a context longer than IndexTopk
// checked against the answer computed here (positions and slots), sparse MLA attention against
// a double reference over the selected latents, and a layer without an indexer refused.
using System;
using System.Linq;
using System.Runtime.InteropServices;
using Pkv;

static partial class Tests
{
    const int DsaLatent = 16, DsaRope = 8, DsaWidth = DsaLatent + DsaRope, DsaQHeads = 2;
    const int DsaIndexDim = 8, DsaIndexHeads = 2, DsaTopK = 4, DsaTokens = 10;
    const float DsaScale = 0.25f;
    // key s's first value: distinct integers, so its score under the query e0 is known and unique
    static readonly float[] DsaScores = { 3, 9, 1, 7, 5, 10, 2, 8, 4, 6 };

    // layer 0 MLA with an indexer, layer 1 plain MLA (the refusal's)
    static EngineParams DsaParams()
    {
        var p = Small();
        p.KvLayout = KvLayout.Mla; p.KvLoraRank = DsaLatent; p.QkRopeHeadDim = DsaRope;
        p.NumQHeads = DsaQHeads; p.NumKvHeads = 1; p.HeadDim = DsaWidth; p.SoftmaxScale = DsaScale;
        var indexed = LayerSpec.Indexed(DsaIndexDim, DsaIndexHeads, DsaTopK);
        indexed.SoftmaxScale = DsaScale;
        p.LayerSpecs = new[] { indexed, new LayerSpec { Kind = LayerKind.Mla, SoftmaxScale = DsaScale } };
        return p;
    }

    // keys [tokens][dim] whose first value is DsaScores[s] (the largest: it sets the fp8 scale),
    // queries [tokens][heads][dim] (head 0 e0, head 1 -e0: relu makes it 0), weights 1
    static void DsaIndexInputs(ref ulong seed, out float[] keys, out float[] q, out float[] weights)
    {
        keys = MlaValues(ref seed, DsaTokens * DsaIndexDim);  // in [-1, 1): below every score
        q = new float[DsaTokens * DsaIndexHeads * DsaIndexDim];
        weights = Enumerable.Repeat(1f, DsaTokens * DsaIndexHeads).ToArray();
        for (int s = 0; s < DsaTokens; s++)
        {
            keys[s * DsaIndexDim] = DsaScores[s];
            q[s * DsaIndexHeads * DsaIndexDim] = 1;
            q[(s * DsaIndexHeads + 1) * DsaIndexDim] = -1;
        }
    }

    // token t's top keys: the DsaTopK highest scores of positions 0..t, ascending, then -1
    static int[] DsaExpected(int t)
    {
        var best = Enumerable.Range(0, t + 1).OrderByDescending(s => DsaScores[s]).Take(DsaTopK).OrderBy(s => s);
        return best.Concat(Enumerable.Repeat(-1, DsaTopK)).Take(DsaTopK).ToArray();
    }

    // absorbed MLA in double, token t attending over the positions of its row of indices
    static double[] DsaReference(float[] q, float[] latents, int[] indices)
    {
        var output = new double[DsaTokens * DsaQHeads * DsaLatent];
        for (int t = 0; t < DsaTokens; t++)
        {
            int[] keys = indices.Skip(t * DsaTopK).Take(DsaTopK).Where(j => j >= 0 && j <= t).ToArray();
            for (int h = 0; h < DsaQHeads; h++)
            {
                var w = new double[keys.Length];
                double top = double.NegativeInfinity, total = 0;
                for (int i = 0; i < keys.Length; i++)
                {
                    for (int d = 0; d < DsaWidth; d++)
                        w[i] += (double)q[(t * DsaQHeads + h) * DsaWidth + d] * latents[keys[i] * DsaWidth + d];
                    w[i] *= DsaScale;
                    top = Math.Max(top, w[i]);
                }
                for (int i = 0; i < w.Length; i++) { w[i] = Math.Exp(w[i] - top); total += w[i]; }
                for (int d = 0; d < DsaLatent; d++)
                {
                    double sum = 0;
                    for (int i = 0; i < keys.Length; i++) sum += w[i] * latents[keys[i] * DsaWidth + d];
                    output[(t * DsaQHeads + h) * DsaLatent + d] = sum / total;
                }
            }
        }
        return output;
    }

    // the fp32 scale of the key in slot, read where LayerInfo says it is (4-token blocks)
    static float DsaScaleOf(LayerInfo info, long slot)
    {
        long at = (long)info.IndexScalePool.Value + slot / 4 * (long)info.IndexBlockBytes + 4 * (slot % 4);
        return BitConverter.ToSingle(BitConverter.GetBytes(Marshal.ReadInt32((IntPtr)at)), 0);
    }

    static void SparseLayerInfo()
    {
        using (var e = new Engine(DsaParams()))
        {
            LayerInfo l = e.LayerInfo(0);
            Equal((uint)DsaIndexDim, l.IndexHeadDim, "index_head_dim");
            Equal(DType.Fp8E4m3, l.IndexDType, "index_dtype");
            Equal((uint)DsaIndexHeads, l.IndexNHeads, "index_n_heads");
            Equal((uint)DsaTopK, l.IndexTopk, "index_topk");
            Equal(e.Budget().BlockBytes, l.IndexBlockBytes, "index_block_bytes: the page");
            // a page holds the block's 4 f32 latents, then their 4 fp8 keys, then their 4 scales
            Equal(l.KPool.Value + 4 * DsaWidth * 4, l.IndexPool.Value, "index_base");
            Equal(l.IndexPool.Value + 4 * DsaIndexDim, l.IndexScalePool.Value, "index_scale_base");
            Assert(l.HostIndexPool.IsZero && l.HostIndexScalePool.IsZero, "no host tier");
            LayerInfo plain = e.LayerInfo(1);
            Assert(plain.IndexHeadDim == 0 && plain.IndexTopk == 0 && plain.IndexPool.IsZero, "layer 1");
            LayerSpec spec = e.Params.LayerSpecs[0];
            Equal((uint)DsaTopK, spec.IndexTopk, "spec read back");
            Equal(DType.Fp8E4m3, spec.IndexDType, "spec dtype read back");
        }
    }

    static void SparseTopKAndAttention()
    {
        using (var e = new Engine(DsaParams()))
        {
            Sequence seq = e.Allocate(Enumerable.Range(1, DsaTokens).ToArray());
            using (Batch b = e.BeginBatch(new[] { seq }))
            {
                LayerInfo info = e.LayerInfo(0);
                // its KV group's slots: layer 1 has another group
                long[] slots = b.GroupSlotMapping().Skip((int)info.Group * DsaTokens).Take(DsaTokens).ToArray();
                ulong seed = 29;
                float[] keys, iq, weights;
                DsaIndexInputs(ref seed, out keys, out iq, out weights);
                b.IndexerWrite(0, keys, IndexerFlags.ScaleUe8m0);
                Equal((float)Math.Pow(2, Math.Ceiling(Math.Log(3.0 / 448, 2))), DsaScaleOf(info, slots[0]), "ue8m0 scale");
                b.IndexerWrite(0, keys);
                for (int s = 0; s < DsaTokens; s++)
                    Assert(Math.Abs(DsaScaleOf(info, slots[s]) - DsaScores[s] / 448.0) < 1e-7, "scale " + s);
                var top = new int[DsaTokens * DsaTopK];
                b.IndexerTopK(0, iq, weights, top);
                for (int t = 0; t < DsaTokens; t++)
                    Equal(string.Join(",", DsaExpected(t)), string.Join(",", top.Skip(t * DsaTopK).Take(DsaTopK)),
                          "token " + t + "'s top-k");
                var bySlot = new int[top.Length];
                b.IndexerTopK(0, iq, weights, bySlot, TopKKind.Slots);
                for (int i = 0; i < top.Length; i++)
                    Equal(top[i] < 0 ? -1 : (int)slots[top[i]], bySlot[i], "slot of entry " + i);
                float[] q = MlaValues(ref seed, DsaTokens * DsaQHeads * DsaWidth);
                float[] latents = MlaValues(ref seed, DsaTokens * DsaWidth);
                var output = new float[DsaTokens * DsaQHeads * DsaLatent];
                b.SparseMlaAttention(0, q, latents, top, output);
                double[] want = DsaReference(q, latents, top);
                double worst = want.Select((w, i) => Math.Abs(output[i] - w)).Max();
                Assert(worst <= 1e-4, "sparse MLA max error " + worst);
                b.End();
            }
            Equal((uint)DsaTokens, seq.Info().NumComputedTokens, "computed");
            e.Check();
        }
    }

    static void SparseRefusals()
    {
        using (var e = new Engine(DsaParams()))
        {
            Sequence seq = e.Allocate(Enumerable.Range(1, DsaTokens).ToArray());
            using (Batch b = e.BeginBatch(new[] { seq }))
            {
                ulong seed = 3;
                float[] keys, iq, weights;
                DsaIndexInputs(ref seed, out keys, out iq, out weights);
                var top = new int[DsaTokens * DsaTopK];
                PkvException x = Throws(Status.InvalidArgument, () => b.IndexerTopK(1, iq, weights, top));
                Assert(x.Detail.Contains("layer 1 has no indexer"), x.Detail);  // pkv's own message
                x = Throws(Status.InvalidArgument, () => b.IndexerWrite(1, keys));
                Assert(x.Detail.Contains("layer 1 has no indexer"), x.Detail);
                x = Throws(Status.InvalidArgument, () => b.IndexerTopK(0, iq, new float[3], top));  // before pkv
                Assert(x.Message.Contains("weights has 3 elements, this step needs 20"), x.Message);
            }
        }
    }
}
