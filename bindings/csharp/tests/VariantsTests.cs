// Attention variants (pkv 0.2): fp8 KV and its scales, sliding windows and KV groups, a config's
// per-layer windows, and what they add to the budget, the pool, the batch and events.
using System;
using System.IO;
using System.Linq;
using Pkv;

static partial class Tests
{
    static string Config(string name)
    {
        // hash_vectors.txt is tests/data/ of the source tree; the configs are tools/configs/
        string root = Path.GetDirectoryName(Path.GetDirectoryName(Path.GetDirectoryName(Path.GetFullPath(hashVectors))));
        return File.ReadAllText(Path.Combine(Path.Combine(Path.Combine(root, "tools"), "configs"), name));
    }

    static void ConfigWindowsAndGroups()
    {
        string json = Config("gemma-3-27b.json");
        uint[] w = Library.HfConfigLayerWindows(json);
        uint[] want = Enumerable.Range(0, 62).Select(l => (l + 1) % 6 == 0 ? 0u : 1024u).ToArray();
        Assert(w.SequenceEqual(want), "gemma 3 windows");
        var p = EngineParams.FromHfConfig(json);
        Equal(62u, p.NumLayers, "layers");
        Equal(0u, p.SlidingWindow, "mixed windows: no single sliding_window");
        Assert(p.LayerWindows.SequenceEqual(want), "FromHfConfig reads the windows too");
        var g = Library.KvGroups(p);
        Equal(7, g.NumGroups, "groups");
        Equal(10u, g.GroupLayers, "group layers");
        Assert(g.GroupWindow.SequenceEqual(new uint[] { 0, 1024, 1024, 1024, 1024, 1024, 1024 }), "group windows");
        Equal(62, g.LayerGroup.Zip(g.LayerSlot, (grp, slot) => grp * 1000 + slot).Distinct().Count(), "one slot per layer");
        p.Device = Device.Cpu; p.MemoryTotalBytes = 80UL << 30;
        var b = Library.Profile(p);
        Equal(7u, b.NumKvGroups, "budget groups");
        Equal(8u, b.PaddedLayers, "padded");
        Equal(8192UL + 6 * 65, b.BlocksPerMaxSeq, "blocks per max seq");
        Assert(Library.HfConfigLayerWindows(Config("gpt-oss-20b.json"))
                   .SequenceEqual(Enumerable.Range(0, 24).Select(l => l % 2 == 0 ? 128u : 0u)), "gpt-oss windows");
        Equal(4096u, EngineParams.FromHfConfig(Config("mistral-7b.json")).SlidingWindow, "mistral window");
        var e = Throws(Status.InvalidArgument, () => Library.HfConfigLayerWindows(
            "{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64, \"sliding_window\": 8," +
            " \"layer_types\": [\"sliding_attention\", \"chunked_attention\"]}"));
        Assert(e.Detail.Contains("layer_types[1]"), "names the entry: " + e.Detail);
    }

    // Issue 26, item 3: reading a config is one call that yields the whole shape, windows
    // included: the same sequences as `pkv profile --config tools/configs/gemma-2-9b.json
    // --memory 24GiB` (10) and gemma-3-27b.json (2, not OutOfMemory), and the other bindings.
    static void HfConfigOneCall()
    {
        string[] names = { "gemma-2-9b.json", "gemma-3-27b.json" };
        ulong[] seqs = { 10, 2 };
        uint[] groups = { 2, 7 };
        for (int i = 0; i < names.Length; i++)
        {
            // (0.5: Gemma 2's soft-cap needs layer specs, so its windows come in them)
            var p = i == 0 ? EngineParams.FromHfConfigLayers(Config(names[i])) : EngineParams.FromHfConfig(Config(names[i]));
            p.MemoryTotalBytes = 24UL << 30; p.MemoryUsedBytes = 0;
            Assert(p.LayerWindows != null || p.LayerSpecs != null, names[i] + ": windows read");
            KvBudget b;
            Equal(Status.Ok, Library.ProfileOrShortfall(p, out b), names[i] + " profile");
            Equal(seqs[i], b.MaxSeqsAtMaxModelLen, names[i] + " max sequences");
            Equal(groups[i], b.NumKvGroups, names[i] + " groups");
            var copy = p;  // a copy of the params profiles the same
            Equal(seqs[i], Library.Profile(copy).MaxSeqsAtMaxModelLen, names[i] + " copy");
        }
        var g2 = EngineParams.FromHfConfigLayers(Config("gemma-2-9b.json"));
        LayerSpec[] mine = g2.LayerSpecs;
        mine[0].Window = 7;  // the params own their array: a caller's change is not theirs
        Equal(4096u, g2.LayerSpecs[0].Window, "specs copied out");
        g2.NumLayers = 4; g2.Device = Device.Cpu; g2.NumBlocks = 8; g2.NumThreads = 1; g2.MaxModelLen = 32;
        Assert(Throws(Status.InvalidArgument, () => new Engine(g2)).Detail
                   .Contains("EngineParams.LayerSpecs has 42 entries, NumLayers is 4"), "refused before pkv reads them");
        g2.LayerSpecs = g2.LayerSpecs.Take(4).ToArray();
        using (var e = new Engine(g2))
        {
            Assert(e.Params.LayerSpecs.Select(s => s.Window).SequenceEqual(new uint[] { 4096, 0, 4096, 0 }), "engine windows");
            Assert(e.KvGroups().GroupWindow.SequenceEqual(new uint[] { 0, 4096 }), "engine groups");
        }
        var mistral = EngineParams.FromHfConfig(Config("mistral-7b.json"));
        Equal(4096u, mistral.SlidingWindow, "one window for all: SlidingWindow");
        Assert(mistral.LayerWindows == null, "no per-layer windows");
    }

    static void LayerWindowsChecked()
    {
        var p = Small();
        var g = Library.KvGroups(p, new uint[] { 0, 16 });
        Assert(g.GroupLayers == 1 && g.GroupWindow.SequenceEqual(new uint[] { 0, 16 }) &&
               g.LayerGroup.SequenceEqual(new uint[] { 0, 1 }), "two groups of one layer");
        Equal(2u, Library.Profile(p, new uint[] { 0, 16 }).NumKvGroups, "profile groups");
        Throws(Status.InvalidArgument, () => Library.Profile(p, new uint[] { 0, 16, 16 }));
        Throws(Status.InvalidArgument, () => new Engine(p, new uint[] { 0 }));
        Throws(Status.InvalidArgument, () => Library.KvGroups(p, new uint[] { 0, 1u << 31 }));
        var own = p; own.LayerWindows = new uint[] { 0, 16 };  // the params' windows ...
        Equal(2u, Library.Profile(own).NumKvGroups, "params' windows");
        Assert(Throws(Status.InvalidArgument, () => Library.Profile(own, new uint[] { 0, 16 }))  // ... given twice
                   .Detail.Contains("given twice"), "twice");
        own.LayerWindows = new uint[] { 0 };
        Assert(Throws(Status.InvalidArgument, () => new Engine(own)).Detail.Contains("EngineParams.LayerWindows has 1"),
               "names the field");
        Equal(1, Library.KvGroups(p).NumGroups, "no windows");
        // two groups: created once the block manager keeps a table per group, else Unsupported
        Engine two = null;
        try { two = new Engine(p, new uint[] { 16, 0 }); }
        catch (PkvException ex)
        {
            Equal(Status.Unsupported, ex.Status, "status");
            Assert(ex.Detail.Contains("KV groups"), ex.Detail);
        }
        if (two != null)
            using (two)
            {
                Assert(two.LayerWindows.SequenceEqual(new uint[] { 16, 0 }), "engine windows");
                Assert(two.Params.LayerWindows.SequenceEqual(new uint[] { 16, 0 }), "params' windows");
                Equal(2u, two.PoolInfo().NumKvGroups, "pool groups");
            }
    }

    static void OneWindowEngine()
    {
        var p = Small(); p.SlidingWindow = 8;
        using (var e = new Engine(p))
        {
            Equal(8u, e.Params.SlidingWindow, "window");
            Assert(e.LayerWindows == null, "no per-layer windows");
            Equal(1u, e.Budget().NumKvGroups, "budget groups");
            Equal(1u, e.PoolInfo().NumKvGroups, "pool groups");
            Assert(e.KvGroups().GroupWindow.SequenceEqual(new uint[] { 8 }), "group window");
            var seq = e.Allocate(Enumerable.Range(1, 10).ToArray());
            Assert(seq.GroupBlockTable(0).SequenceEqual(seq.BlockTable()), "group 0 table");
            Throws(Status.InvalidArgument, () => seq.GroupBlockTable(1));
            using (var b = e.BeginBatch(new[] { seq }))
            {
                Equal(1u, b.NumKvGroups, "batch groups");
                Assert(b.GroupSlotMapping().SequenceEqual(b.SlotMapping()), "group slot mapping");
                Assert(b.GroupBlockTables().SequenceEqual(b.BlockTables()), "group tables");
            }
        }
    }

    static void Fp8EngineAndScales()
    {
        foreach (DType kv in new[] { DType.Fp8E4m3, DType.Fp8E5m2 })
        {
            var p = Small(); p.KvDType = kv;
            using (var e = new Engine(p))
            {
                var b = e.Budget();
                Equal(kv, b.KvDType, "kv dtype");
                Equal(2UL * 2 * 2 * 4, b.KvScaleBytes, "scale bytes");
                Equal(2UL * 2 * 4 * 2 * 16, b.BlockBytes, "block bytes");
                var pi = e.PoolInfo();
                Equal(kv, pi.DType, "pool dtype");
                Equal(DType.F32, pi.ModelDType, "model dtype");
                e.SetKvScales(0, new[] { 0.5f, 0.25f }, new[] { 1f, 2f });
                Throws(Status.InvalidArgument, () => e.SetKvScales(0, new[] { 1f }, new[] { 1f, 1f }));
                Throws(Status.InvalidArgument, () => e.SetKvScales(0, new[] { 1f, 0f }, new[] { 1f, 1f }));
                Throws(Status.InvalidArgument, () => e.SetKvScales(2, new[] { 1f, 1f }, new[] { 1f, 1f }));
                e.Allocate(new[] { 1, 2, 3 });
                Throws(Status.State, () => e.SetKvScales(1, new[] { 1f, 1f }, new[] { 1f, 1f }));
            }
        }
        using (var e = new Engine(Small()))
            Assert(Throws(Status.InvalidArgument, () => e.SetKvScales(0, new[] { 1f, 1f }, new[] { 1f, 1f }))
                       .Detail.Contains("not fp8"), "f32 engine has no scales");
        var bad = Small(); bad.KvDType = (DType)5;
        Throws(Status.InvalidArgument, () => new Engine(bad));
        bad = Small(); bad.KvDType = DType.F16;
        Throws(Status.InvalidArgument, () => new Engine(bad));
        bad = Small(); bad.DType = DType.Fp8E4m3;
        Throws(Status.InvalidArgument, () => new Engine(bad));
        bad = Small(); bad.SlidingWindow = 1u << 31;
        Throws(Status.InvalidArgument, () => new Engine(bad));
    }

    static void KvEventGroup()
    {
        var p = Small(); p.EnableKvEvents = true;
        using (var e = new Engine(p))
        {
            var seq = e.Allocate(Enumerable.Range(1, 8).ToArray());
            RunStep(e, seq);
            var events = e.DrainKvEvents();
            Assert(events.Length > 0, "events");
            Assert(events.All(ev => ev.Group == 0), "group 0");
        }
    }
}
