// The cache described per layer (pkv 0.5): EngineParams.LayerSpecs (owned by the params, pinned
// per call), each KV group's bytes, an engine's layers, attention sinks, Attention on
// heterogeneous layers (each layer's own shape, K = V and Shared layers), a config's specs.
using System;
using System.IO;
using System.Linq;
using Pkv;

static partial class Tests
{
    const uint LayersQHeads = 4, LayersTokens = 5;

    // Four layers: 0 full (2 kv heads x 16), 1 sliding 8 with sinks, 2 full K = V (2 kv heads x
    // 32: the bytes of layer 0's K and V), 3 shared (reads layer 0).
    static EngineParams MixedLayers()
    {
        var p = EngineParams.Defaults();
        p.NumLayers = 4; p.NumQHeads = LayersQHeads; p.NumKvHeads = 2; p.HeadDim = 16;
        p.DType = DType.F32; p.BlockSize = 4; p.NumBlocks = 32; p.Device = Device.Cpu; p.NumThreads = 1;
        LayerSpec sliding = LayerSpec.Sliding(8);
        sliding.Sinks = true;
        p.LayerSpecs = new[] { new LayerSpec(), sliding,
                               new LayerSpec { HeadDim = 32, KEqV = true }, LayerSpec.Shared(0) };
        return p;
    }

    static float[] LayerValues(uint n, int seed)
    {
        var r = new Random(seed);
        return Enumerable.Range(0, (int)n).Select(_ => (float)(r.NextDouble() * 2 - 1)).ToArray();
    }

    static void LayerSpecsOwnedAndChecked()
    {
        EngineParams p = MixedLayers();
        LayerSpec[] specs = p.LayerSpecs;
        Equal(4, specs.Length, "specs");
        Equal(AttentionKind.Sliding, specs[1].Attention, "attention");
        Equal(LayerKind.Shared, specs[3].Kind, "kind");
        specs[0].HeadDim = 99;  // a copy: the params' array is their own
        Equal(0u, p.LayerSpecs[0].HeadDim, "owned");
        p.NumLayers = 3;  // refused by the binding, before pkv reads the specs
        foreach (Action call in new Action[] { () => new Engine(p).Dispose(), () => Library.Profile(p),
                                               () => Library.KvGroups(p), () => Library.KvGroupInfo(p, 0) })
            Assert(Throws(Status.InvalidArgument, call).Detail.Contains("LayerSpecs has 4 entries, NumLayers is 3"),
                   "names the count");
    }

    // What holds however layers of one window but other shapes are grouped (pkv.h: by attention
    // and window; DESIGN §12: also by bytes per token).
    static void KvGroupBytes()
    {
        EngineParams p = MixedLayers();
        KvGroups g = Library.KvGroups(p);
        uint[] lg = g.LayerGroup;
        Equal(lg[0], lg[3], "the shared layer is in its source's group");
        Assert(lg[1] != lg[0] && lg[1] != lg[2], "the windowed layer has its own group");
        Equal(8u, g.GroupWindow[lg[1]], "its window");
        Equal(0u, g.GroupWindow[0], "full groups first");
        KvGroupInfo[] infos = Enumerable.Range(0, g.NumGroups).Select(i => Library.KvGroupInfo(p, (uint)i)).ToArray();
        KvGroupInfo sliding = infos[lg[1]];
        Equal(AttentionKind.Sliding, sliding.Attention, "sliding group");
        Equal(1u, sliding.NumLayers, "its layers");
        Equal((ulong)2 * 16 * 2 * 4, sliding.BytesPerToken, "its bytes");
        Assert(infos.Where((x, i) => i != lg[1]).All(x => x.Attention == AttentionKind.Full), "the others are full");
        Equal(3u, (uint)infos.Sum(x => x.NumLayers), "the shared layer has no cache");
        const ulong model = (2 * 16 * 2 * 2 + 2 * 32) * 4;  // K and V of layers 0 and 1, K of layer 2
        Equal(model, (ulong)infos.Sum(x => (long)x.BytesPerToken), "bytes per token, summed");
        Throws(Status.InvalidArgument, () => Library.KvGroupInfo(p, (uint)g.NumGroups));
        KvBudget b = Library.Profile(p);
        Equal(3u, b.NumCachedLayers, "cached layers");
        Equal(model, b.ModelBytesPerToken, "model bytes per token");
    }

    static void EngineLayersAndSinks()
    {
        using (var e = new Engine(MixedLayers()))
        {
            Equal(LayerKind.Shared, e.Params.LayerSpecs[3].Kind, "kept past create");
            LayerInfo[] info = Enumerable.Range(0, 4).Select(l => e.LayerInfo((uint)l)).ToArray();
            Equal(8u, e.KvGroupInfo(info[1].Group).Window, "the engine's windowed group");
            Equal("Attention Attention Attention Shared", string.Join(" ", info.Select(i => i.Kind)), "kinds");
            Equal(string.Join(" ", e.KvGroups().LayerGroup), string.Join(" ", info.Select(i => i.Group)), "groups");
            Equal(info[0].Group, info[3].Group, "the shared layer's group");
            Equal("0 1 2 0", string.Join(" ", info.Select(i => i.SourceLayer)), "sources");
            Equal("2x16x16 2x16x16 2x32x32 2x16x16",
                  string.Join(" ", info.Select(i => i.KvHeads + "x" + i.HeadDim + "x" + i.VHeadDim)), "shapes");
            Assert(info[2].IsKEqV && !info[0].IsKEqV && info[1].HasSinks && !info[0].HasSinks, "flags");
            Equal(info[2].KPool, info[2].VPool, "V is K");
            Equal(info[0].KPool, info[3].KPool, "the shared layer reads layer 0");
            Assert(Math.Abs(info[2].SoftmaxScale - 1 / Math.Sqrt(32)) < 1e-6, "layer 2's own scale");
            Throws(Status.InvalidArgument, () => e.LayerInfo(4));
            PoolInfo pool = e.PoolInfo();  // unequal layers: one range of pages
            Assert(pool.NumLayers == 1 && pool.VPool == NativeAddress.Zero, "pages: " + pool.NumLayers);
            Throws(Status.InvalidArgument, () => e.SetAttentionSinks(0, new float[LayersQHeads]));  // no sinks
            Throws(Status.InvalidArgument, () => e.SetAttentionSinks(1, new float[LayersQHeads - 1]));
            Throws(Status.InvalidArgument, () => e.SetAttentionSinks(1, Enumerable.Repeat(float.NaN, 4).ToArray()));
            Sequence seq = e.Allocate(new[] { 1, 2, 3, 4, 5 });
            using (var b = e.BeginBatch(new[] { seq }))  // sinks never set: refused, not ignored
                Throws(Status.State, () => b.Attention(1, new float[5 * 64], new float[5 * 32], new float[5 * 32],
                                                       new float[5 * 64]));
            Throws(Status.State, () => e.SetAttentionSinks(1, new float[LayersQHeads]));  // a sequence exists
        }
    }

    static void AttentionOnHeterogeneousLayers()
    {
        using (var e = new Engine(MixedLayers()))
        {
            e.SetAttentionSinks(1, new[] { 0.5f, -1f, 2f, 0f });
            const uint n = LayersTokens;
            Sequence seq = e.Allocate(new[] { 1, 2, 3, 4, 5 });
            float[] q16 = LayerValues(n * 64, 1), k16 = LayerValues(n * 32, 2), v16 = LayerValues(n * 32, 3);
            float[] q32 = LayerValues(n * 128, 4), k32 = LayerValues(n * 64, 5);
            float[] out0 = new float[n * 64], out1 = new float[n * 64], out2 = new float[n * 128], out3 = new float[n * 64];
            using (var b = e.BeginBatch(new[] { seq }))
            {
                b.Attention(0, q16, k16, v16, out0);
                b.Attention(1, q16, k16, v16, out1);  // layer 0's inputs: its window holds them all
                Assert(Throws(Status.InvalidArgument, () => b.Attention(2, q32, k32, k32, out2)).Detail.Contains("K = V"),
                       "a V on a K = V layer");
                Assert(Throws(Status.InvalidArgument, () => b.Attention(2, q16, k32, null, out2)).Detail
                           .Contains("q has 320 elements, this step needs 640"), "layer 2's own q width");
                b.Attention(2, q32, k32, null, out2);
                Assert(Throws(Status.InvalidArgument, () => b.Attention(3, q16, k16, null, out3)).Detail
                           .Contains("reads layer 0's"), "a K on a shared layer");
                b.Attention(3, q16, null, null, out3);
                b.End();
            }
            Assert(out3.SequenceEqual(out0), "the shared layer attends over layer 0's K and V");
            for (int d = 0; d < 32; d++)  // the first token sees only itself: q head 0's output is kv head 0's K
                Assert(Math.Abs(out2[d] - k32[d]) <= 1e-6, "K = V output " + d);
            Assert(!out1.SequenceEqual(out0), "the sinks took weight");
            for (int i = 0; i < out1.Length; i++)
                Assert(Math.Abs(out1[i]) <= Math.Abs(out0[i]) + 1e-6, "a sink adds nothing to the output: " + i);
            e.Check();
        }
    }

    static void Fp8ScalesPerLayer()
    {
        var p = EngineParams.Defaults();
        p.NumLayers = 3; p.NumQHeads = LayersQHeads; p.NumKvHeads = 2; p.HeadDim = 16; p.DType = DType.F32;
        p.KvDType = DType.Fp8E4m3; p.BlockSize = 4; p.NumBlocks = 16; p.Device = Device.Cpu; p.NumThreads = 1;
        p.LayerSpecs = new[] { new LayerSpec(), new LayerSpec { NumKvHeads = 1, KEqV = true }, LayerSpec.Shared(0) };
        using (var e = new Engine(p))
        {
            e.SetKvScales(0, new[] { 0.5f, 0.25f }, new[] { 2f, 1f });
            e.SetKvScales(1, new[] { 0.5f });  // K = V: its one kv head, no V scales
            Assert(Throws(Status.InvalidArgument, () => e.SetKvScales(1, new[] { 0.5f, 0.5f })).Detail
                       .Contains("layer 1 has 1 kv heads"), "the layer's heads, not the flat field's");
            Throws(Status.InvalidArgument, () => e.SetKvScales(2, new[] { 0.5f, 0.5f }, new[] { 0.5f, 0.5f }));  // its source's
        }
    }

    // q = 0 makes every score equal: each token's output is the mean of the V it sees
    static void ChunkedAndSlidingLayersMask()
    {
        const int n = 6, width = 2 * 8;  // tokens; 2 heads of 8
        var p = EngineParams.Defaults();
        p.NumLayers = 2; p.NumQHeads = 2; p.NumKvHeads = 2; p.HeadDim = 8;
        p.DType = DType.F32; p.BlockSize = 4; p.NumBlocks = 16; p.Device = Device.Cpu; p.NumThreads = 1;
        p.LayerSpecs = new[] { LayerSpec.Chunked(4), LayerSpec.Sliding(3) };
        Func<int, int, int> first = (layer, t) => layer == 0 ? t / 4 * 4 : Math.Max(0, t - 2);
        using (var e = new Engine(p))
        using (var b = e.BeginBatch(new[] { e.Allocate(new[] { 1, 2, 3, 4, 5, 6 }) }))
        {
            float[] q = new float[n * width], k = LayerValues(n * width, 9), v = LayerValues(n * width, 10);
            for (uint layer = 0; layer < 2; layer++)
            {
                var output = new float[n * width];
                b.Attention(layer, q, k, v, output);
                for (int t = 0; t < n; t++)
                    for (int i = 0; i < width; i++)
                    {
                        int from = first((int)layer, t);
                        double want = Enumerable.Range(from, t + 1 - from).Average(j => v[j * width + i]);
                        Assert(Math.Abs(output[t * width + i] - want) <= 1e-5, "layer " + layer + " token " + t);
                    }
            }
            b.End();
        }
    }

    static void ConfigLayerSpecs()
    {
        string configs = Path.Combine(Path.Combine(RepoRoot(), "tools"), "configs");
        EngineParams oss = EngineParams.FromHfConfigLayers(File.ReadAllText(Path.Combine(configs, "gpt-oss-20b.json")));
        LayerSpec[] specs = oss.LayerSpecs;
        Equal((int)oss.NumLayers, specs.Length, "one spec per layer");
        Assert(specs.All(s => s.Sinks), "gpt-oss: sinks in every layer");
        Equal("128 0 128 0", string.Join(" ", specs.Take(4).Select(s => s.Window)), "alternating windows");
        Assert(oss.LayerWindows == null && oss.SlidingWindow == 0, "the windows are in the specs");
        EngineParams gemma2 = EngineParams.FromHfConfigLayers(File.ReadAllText(Path.Combine(configs, "gemma-2-9b.json")));
        Assert(gemma2.LayerSpecs.All(s => s.LogitSoftcap == 50f), "Gemma 2's soft-cap");
        EngineParams llama = EngineParams.FromHfConfigLayers(File.ReadAllText(Path.Combine(configs, "llama-3-8b.json")));
        Assert(llama.LayerSpecs == null && llama.NumLayers == 32, "a model the flat fields describe");
        Throws(Status.Unsupported, () => EngineParams.FromHfConfig(File.ReadAllText(Path.Combine(configs, "gpt-oss-20b.json"))));
    }

    static string RepoRoot()
    {
        return Path.GetDirectoryName(Path.GetDirectoryName(Path.GetDirectoryName(Path.GetFullPath(hashVectors))));
    }
}
