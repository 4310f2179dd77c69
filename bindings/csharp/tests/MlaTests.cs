// Multi-head latent attention (pkv 0.3): an MLA engine's params, its V-less attention checked
// against a reference computed here, its pool without V, V-less fp8 scales, and a DeepSeek-V3
// config profiled as MLA.
using System;
using Pkv;

static partial class Tests
{
    const int MlaLatent = 16, MlaRope = 16, MlaWidth = MlaLatent + MlaRope, MlaQHeads = 4;
    const float MlaScale = 0.2f;

    static EngineParams MlaSmall()
    {
        var p = Small();
        p.KvLayout = KvLayout.Mla; p.KvLoraRank = MlaLatent; p.QkRopeHeadDim = MlaRope;
        p.NumQHeads = MlaQHeads; p.NumKvHeads = 1; p.HeadDim = MlaWidth; p.SoftmaxScale = MlaScale;
        return p;
    }

    // n values in [-1, 1) from a small LCG: the same on every run
    static float[] MlaValues(ref ulong seed, int n)
    {
        var a = new float[n];
        for (int i = 0; i < n; i++)
        {
            seed = unchecked(seed * 6364136223846793005UL + 1442695040888963407UL);
            a[i] = (float)((seed >> 40) / (double)(1 << 24) * 2 - 1);
        }
        return a;
    }

    // Absorbed attention of one sequence's n new tokens (positions 0..n-1) in double:
    // out[t][h] = sum over j <= t of softmax_j(scale * q[t][h] . latent[j]) * latent[j][..KvLoraRank]
    static double[] MlaReference(float[] q, float[] latents, int n)
    {
        var output = new double[n * MlaQHeads * MlaLatent];
        for (int t = 0; t < n; t++)
            for (int h = 0; h < MlaQHeads; h++)
            {
                var w = new double[t + 1];
                double top = double.NegativeInfinity, total = 0;
                for (int j = 0; j <= t; j++)
                {
                    for (int d = 0; d < MlaWidth; d++)
                        w[j] += (double)q[(t * MlaQHeads + h) * MlaWidth + d] * latents[j * MlaWidth + d];
                    w[j] *= MlaScale;
                    top = Math.Max(top, w[j]);
                }
                for (int j = 0; j <= t; j++) { w[j] = Math.Exp(w[j] - top); total += w[j]; }
                for (int d = 0; d < MlaLatent; d++)
                {
                    double sum = 0;
                    for (int j = 0; j <= t; j++) sum += w[j] * latents[j * MlaWidth + d];
                    output[(t * MlaQHeads + h) * MlaLatent + d] = sum / total;
                }
            }
        return output;
    }

    static void MlaParams()
    {
        var p = MlaSmall();
        var b = Library.Profile(p);
        Equal(KvLayout.Mla, b.KvLayout, "budget layout");
        Equal((ulong)(2 * 4 * MlaWidth * 4), b.BlockBytes, "one latent per token per layer, no V");
        Equal(KvLayout.Heads, EngineParams.Defaults().KvLayout, "default layout");
        using (var e = new Engine(p))
        {
            Assert(e.IsMla, "IsMla");
            Equal(KvLayout.Mla, e.Params.KvLayout, "engine layout");
            Equal((uint)MlaLatent, e.Params.KvLoraRank, "kv_lora_rank");
            Equal((uint)MlaRope, e.Params.QkRopeHeadDim, "qk_rope_head_dim");
            Equal(KvLayout.Mla, e.Budget().KvLayout, "engine budget layout");
        }
        var two = MlaSmall(); two.NumKvHeads = 2;  // MLA caches one latent
        Throws(Status.InvalidArgument, () => new Engine(two));
    }

    static void MlaAttentionWithoutV()
    {
        const int n = 10;
        using (var e = new Engine(MlaSmall()))
        {
            var pi = e.PoolInfo();
            Assert(!pi.KPool.IsZero, "k base");
            Equal(NativeAddress.Zero, pi.VPool, "no V");
            Equal(NativeAddress.Zero, pi.HostVPool, "no host V");
            Equal(1u, pi.KvHeads, "one latent");
            Equal((uint)MlaWidth, pi.HeadDim, "latent width");
            var seq = e.Allocate(new[] { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 });
            using (var b = e.BeginBatch(new[] { seq }))
            {
                Equal((uint)n, b.NumTokens, "tokens");
                ulong seed = 7;
                for (uint layer = 0; layer < 2; layer++)
                {
                    float[] q = MlaValues(ref seed, n * MlaQHeads * MlaWidth), latents = MlaValues(ref seed, n * MlaWidth);
                    var output = new float[n * MlaQHeads * MlaLatent];  // kv_lora_rank per head
                    if (layer == 0)  // a V on an MLA engine is refused, and changes nothing
                        Assert(Throws(Status.InvalidArgument, () => b.Attention(layer, q, latents, latents, output))
                                   .Detail.Contains("no V"), "names the V");
                    b.Attention(layer, q, latents, null, output);
                    double[] want = MlaReference(q, latents, n);
                    double worst = 0;
                    for (int i = 0; i < want.Length; i++) worst = Math.Max(worst, Math.Abs(output[i] - want[i]));
                    Assert(worst <= 1e-4, "layer " + layer + ": max error " + worst);
                }
                var shortOut = new float[n * MlaQHeads * MlaLatent - 1];
                Assert(Throws(Status.InvalidArgument, () => b.Attention(0, new float[n * MlaQHeads * MlaWidth],
                                                                      new float[n * MlaWidth], null, shortOut))
                           .Detail.Contains("output has"), "names the short output");
                b.End();
            }
            Equal((uint)n, seq.Info().NumComputedTokens, "computed");
            e.Check();
        }
    }

    static void MlaScalesWithoutV()
    {
        var p = MlaSmall(); p.KvDType = DType.Fp8E4m3;
        using (var e = new Engine(p))
        {
            Equal(2UL * 4, e.Budget().KvScaleBytes, "one scale per layer");
            e.SetKvScales(0, new[] { 0.5f });
            e.SetKvScales(1, new[] { 0.25f }, null);
            Throws(Status.InvalidArgument, () => e.SetKvScales(0, new[] { 0f }));
        }
        using (var e = new Engine(MlaSmall()))
            Assert(Throws(Status.InvalidArgument, () => e.SetKvScales(0, new[] { 1f })).Detail.Contains("not fp8"),
                   "f32 engine has no scales");
    }

    static void MlaDeepSeekV3Config()
    {
        var p = EngineParams.FromHfConfig(Config("deepseek-v3.json"));
        Equal(KvLayout.Mla, p.KvLayout, "layout");
        Equal(512u, p.KvLoraRank, "kv_lora_rank");
        Equal(64u, p.QkRopeHeadDim, "qk_rope_head_dim");
        Equal(1u, p.NumKvHeads, "one latent");
        Equal(576u, p.HeadDim, "latent width");
        double mscale = 0.1 * Math.Log(40) + 1;  // yarn: factor 40, mscale_all_dim 1
        Assert(Math.Abs(p.SoftmaxScale - mscale * mscale / Math.Sqrt(192)) < 1e-6, "softmax scale " + p.SoftmaxScale);
        p.Device = Device.Cpu; p.MemoryTotalBytes = 80UL << 30;
        var b = Library.Profile(p);
        Equal(KvLayout.Mla, b.KvLayout, "budget layout");
        Equal(1u, b.KvHeadsPerRank, "kv heads");
        Equal(61UL * 576 * 2, b.BytesPerToken, "one bf16 latent per token per layer");
    }
}
