// Recurrent state (pkv 0.6, issue 28 item 7): state layer specs round-trip through the params
// and Library.Profile, whose budget's state terms are checked against bytes computed here by
// hand; an engine's state pool (PoolInfo), each state layer's parts in a slot (LayerInfo) and the
// batch's state slots; the checkpoint params; refusals that name what was wrong. Prefix caching of
// the state through the step loop: the checkpoints each policy takes, the restore of a shared
// prefix from one, their copies in the batches, their events and the Stats' counters. The same
// model and requests as the other bindings' state tests.
using System;
using System.Collections.Generic;
using System.Linq;
using Pkv;

static partial class Tests
{
    // A Gated DeltaNet-like layer, small: a bf16 conv state of 96 channels x 3 taps (576 bytes,
    // 768 with its part rounded to 256) and an f32 delta-rule state of 2 heads x 16 x 16 (2048).
    const ulong ConvBytes = 96 * 3 * 2, SsmBytes = 2 * 16 * 16 * 4;
    const ulong StateLayerBytes = 768 + SsmBytes;  // each part at a 256-byte boundary
    const ulong SlotBytes = 3 * StateLayerBytes;  // 8448, a multiple of 256
    const ulong HybridBlockBytes = 2 * 2 * 16 * 4 * 4;  // layer 3: f32 K and V, 2 kv heads x 16, 4 tokens

    static LayerSpec Gdn()
    {
        return LayerSpec.State(new StatePart(DType.Bf16, 96, 3), new StatePart(DType.F32, 2, 16, 16));
    }

    // Three state layers then one attention layer (3 : 1, as Qwen3-Next's), 8 sequences.
    static EngineParams Hybrid()
    {
        var p = EngineParams.Defaults();
        p.NumLayers = 4; p.NumQHeads = 4; p.NumKvHeads = 2; p.HeadDim = 16; p.MaxNumSeqs = 8;
        p.DType = DType.F32; p.BlockSize = 4; p.NumBlocks = 32; p.Device = Device.Cpu; p.NumThreads = 1;
        p.LayerSpecs = new[] { Gdn(), Gdn(), Gdn(), new LayerSpec() };
        return p;
    }

    static void SameParts(StatePart[] want, StatePart[] got, string what)
    {
        Equal(want.Length, got.Length, what + ": parts");
        for (int i = 0; i < want.Length; i++)
        {
            Equal(want[i].DType, got[i].DType, what + ": part dtype");
            Assert(want[i].Shape.SequenceEqual(got[i].Shape), what + ": part shape " + string.Join("x", got[i].Shape));
        }
    }

    static void StateSpecRoundTrips()
    {
        using (var e = new Engine(Hybrid()))
        {
            LayerSpec[] specs = e.Params.LayerSpecs;
            Equal(LayerKind.State, specs[1].Kind, "kind");
            SameParts(Gdn().StateParts, specs[2].StateParts, "layer 2 read back");
            Equal(null, specs[3].StateParts, "an attention layer has no parts");
        }
        EngineParams p = Hybrid();
        StatePart[] parts = p.LayerSpecs[0].StateParts;
        parts[0] = default(StatePart);  // a copy: the params' specs are their own
        Assert(p.LayerSpecs[0].StateParts[0].IsPresent, "owned");
    }

    static void StateBudgetByHand()
    {
        // default checkpoints: MaxNumSeqs of them, beside the 8 working slots
        KvBudget b = Library.Profile(Hybrid());
        Equal(3u, b.NumStateLayers, "state layers");
        Equal(8u, b.NumStateSlots, "working slots");
        Equal(8u, b.NumStateCheckpoints, "checkpoints");
        Equal(SlotBytes, b.StateBytesPerSeq, "a slot");
        Equal(16 * SlotBytes, b.StatePoolBytes, "state pool");
        Equal(HybridBlockBytes, b.BlockBytes, "the state layers hold no K and V");
        // a budget in bytes: the state pool (8 + 4 slots) first, then whole blocks of what is left
        EngineParams p = Hybrid();
        p.NumBlocks = 0; p.KvCacheBytes = 12 * SlotBytes + 40 * HybridBlockBytes + 100; p.NumStateCheckpoints = 4;
        b = Library.Profile(p);
        Equal(4u, b.NumStateCheckpoints, "checkpoints set");
        Equal(12 * SlotBytes, b.StatePoolBytes, "state pool of 12 slots");
        Equal(40ul, b.NumBlocks, "blocks of the rest");
        Equal(40 * HybridBlockBytes, b.PoolBytes, "KV pool");
        p = Hybrid();
        p.StateCheckpointPolicy = StateCheckpointPolicy.None;
        b = Library.Profile(p);
        Equal(0u, b.NumStateCheckpoints, "NONE: no checkpoints");
        Equal(8 * SlotBytes, b.StatePoolBytes, "NONE: working slots only");
        p = Hybrid();
        p.LayerSpecs = null; p.NumLayers = 2;
        b = Library.Profile(p);
        Equal(0ul, b.StatePoolBytes + b.StateBytesPerSeq + b.NumStateLayers + b.NumStateSlots, "no state layers");
    }

    static void BadStateSpecsRefused()
    {
        Assert(Throws(Status.InvalidArgument, () => new StatePart(DType.F32, 1, 2, 3, 4, 5)).Detail
                   .Contains("1 to 4 dimensions"), "five dimensions");
        Throws(Status.InvalidArgument, () => new StatePart(DType.F32, 8, 0));
        var spec = new LayerSpec();
        Assert(Throws(Status.InvalidArgument, () => spec.StateParts = new StatePart[3]).Detail.Contains("3 parts"),
               "three parts");
        // pkv's rules: a state layer has no attention fields, and one part at least
        EngineParams p = Hybrid();
        LayerSpec[] specs = p.LayerSpecs;
        specs[0].NumKvHeads = 2;
        p.LayerSpecs = specs;
        Assert(Throws(Status.InvalidArgument, () => Library.Profile(p)).Detail.Contains("num_kv_heads"), "heads");
        p = Hybrid();
        specs = p.LayerSpecs;
        specs[1] = LayerSpec.State(default(StatePart));
        p.LayerSpecs = specs;
        Assert(Throws(Status.InvalidArgument, () => Library.Profile(p)).Detail.Contains("layer_specs[1]"), "no part");
        p = Hybrid();
        p.StateCheckpointInterval = 3;  // an interval without EVERY
        Assert(Throws(Status.InvalidArgument, () => Library.Profile(p)).Detail.Contains("state_checkpoint_interval"),
               "interval");
    }

    static void EngineStateSlots()
    {
        EngineParams p = Hybrid();
        p.NumStateCheckpoints = 4;
        using (var e = new Engine(p))
        {
            PoolInfo pool = e.PoolInfo();
            Assert(pool.StatePool != NativeAddress.Zero, "a state pool");
            Equal(SlotBytes, pool.StateSlotBytes, "slot bytes");
            Equal(12u, pool.NumStateSlots, "8 working + 4 checkpoint slots");
            for (uint layer = 0; layer < 3; layer++)
            {
                LayerInfo info = e.LayerInfo(layer);
                StatePartInfo[] parts = info.StateParts;
                Equal(LayerKind.State, info.Kind, "kind");
                Equal(NativeAddress.Zero, info.KPool, "no K");
                Equal(layer * StateLayerBytes, parts[0].Offset, "conv offset");
                Equal(ConvBytes, parts[0].Bytes, "conv bytes");
                Equal(layer * StateLayerBytes + 768, parts[1].Offset, "ssm offset");
                Equal(SsmBytes, parts[1].Bytes, "ssm bytes");
                SameParts(Gdn().StateParts, parts.Select(i => i.Part).ToArray(), "layer info");
            }
            Assert(e.LayerInfo(3).StateParts.All(i => i.Bytes == 0 && !i.Part.IsPresent), "layer 3 holds no state");
            // each running sequence its own working slot
            Sequence a = e.Allocate(new[] { 1, 2, 3, 4, 5, 6 }), s2 = e.Allocate(new[] { 50, 51, 52, 53, 54 });
            int[] slots;
            using (Batch b = e.BeginBatch(new[] { a, s2 }))
            {
                slots = b.StateSlots();
                Equal(2, slots.Length, "a slot per sequence");
                Assert(slots[0] != slots[1] && slots.All(s => s >= 0 && s < 8), "working slots " + string.Join(",", slots));
                Assert(Throws(Status.InvalidArgument, () => b.Attention(0, new float[11 * 64], new float[11 * 32],
                                                                        new float[11 * 32], new float[11 * 64]))
                           .Detail.Contains("layer 0 is a State layer"), "attention refused");
                b.End();  // the host ran every layer itself
            }
            // a fork takes a slot of its own, its parent's state copied into it before the step
            Sequence c = a.Fork();
            c.Append(7);
            using (Batch b = e.BeginBatch(new[] { c }))
            {
                int slot = b.StateSlots()[0];
                Assert(!slots.Contains(slot) && slot >= 0 && slot < 8, "the fork's slot " + slot);
                int i = Array.IndexOf(b.CopyKinds(), CopyKind.State);
                Assert(i >= 0, "a state copy listed");
                Equal(slots[0], b.CopySrc()[i], "from the parent's slot");
                Equal(slot, b.CopyDst()[i], "into the fork's");
            }
        }
    }

    // Working slots are ids 0..8 (MaxNumSeqs), checkpoints 8..16 (NumStateCheckpoints' default).
    static bool IsWorking(int slot) { return slot >= 0 && slot < 8; }
    static bool IsCheckpoint(int slot) { return slot >= 8 && slot < 16; }
    // A state copy of a batch (CopyKind.State) from a working slot into a checkpoint slot.
    static bool IsCapture(int[] copy) { return IsWorking(copy[0]) && IsCheckpoint(copy[1]); }
    static string Copies(List<int[]> copies) { return string.Join(" ", copies.Select(c => c[0] + "->" + c[1])); }

    // 14 tokens (3 whole blocks of 4 and 2 more): the 8 every prompt here shares (a system prompt
    // of two blocks), then 6 of its own.
    static int[] SharedPrompt(int own)
    {
        return Enumerable.Range(0, 8).Concat(Enumerable.Range(100 * own, 6)).ToArray();
    }

    // One request of prompt sampling one token, through the step loop until it finishes; the host
    // runs no kernel (pkv's checkpoints and counters do not read the state). Its cached tokens,
    // and the state copies {src, dst} its batches listed into copies.
    static uint RunRequest(Engine e, int[] prompt, List<int[]> copies)
    {
        var rp = RequestParams.Defaults(); rp.MaxNewTokens = 1;
        Sequence seq = e.Submit(prompt, rp);
        int steps = 0;
        for (Batch batch; (batch = e.Step()) != null; )
        {
            Assert(++steps < 10, "the scheduler does not finish");
            CopyKind[] kinds = batch.CopyKinds();
            int[] src = batch.CopySrc(), dst = batch.CopyDst();
            for (int i = 0; i < kinds.Length; i++)
                if (kinds[i] == CopyKind.State) copies.Add(new[] { src[i], dst[i] });
            batch.Commit(new int[batch.NumSeqs]);
        }
        Assert(e.DrainFinished().SequenceEqual(new[] { seq.Id }), "the request finished");
        uint cached = seq.Info().NumCachedTokens;
        seq.Release();
        return cached;
    }

    // Three requests sharing SharedPrompt's first two blocks, one after the other: their cached
    // tokens, their state copies into copies[0..3), then the engine's stats.
    static uint[] ThreeRequests(Engine e, List<int[]>[] copies, out Stats st)
    {
        var cached = new uint[3];
        for (int own = 1; own <= 3; own++)
        {
            copies[own - 1] = new List<int[]>();
            cached[own - 1] = RunRequest(e, SharedPrompt(own), copies[own - 1]);
        }
        e.Check();
        st = e.Stats();
        return cached;
    }

    static void StateCheckpointRestoresASharedPrefix()
    {
        EngineParams p = Hybrid();
        p.EnableKvEvents = true;
        using (var e = new Engine(p))
        {
            var copies = new List<int[]>[3];
            Stats st;
            uint[] cached = ThreeRequests(e, copies, out st);
            // A: nothing cached. B: A's two blocks of KV, but no checkpoint at their end: from
            // token 0. C: the checkpoint B left where its cached KV ended (the branch point).
            Assert(cached.SequenceEqual(new uint[] { 0, 0, 8 }), "cached tokens " + string.Join(",", cached));
            // A checkpoints at its prompt's last boundary (12); B at the branch point (8), then at 12
            List<int[]> a = copies[0], b = copies[1], c = copies[2];
            Assert(a.Count == 1 && a.All(IsCapture), "A's state copies " + Copies(a));
            Assert(b.Count == 2 && b.All(IsCapture), "B's state copies " + Copies(b));
            // C's working slot starts from B's checkpoint at 8, before any write, then checkpoints at 12
            Assert(c.Count == 2 && c[0][0] == b[0][1] && IsWorking(c[0][1]) && IsCapture(c[1]) && c[1][0] == c[0][1],
                   "C's state copies " + Copies(c) + ", B's " + Copies(b));
            Equal(4ul, st.NumStateCheckpointsTaken, "checkpoints taken");
            Equal(1ul, st.NumStateRestores, "restores");
            Equal(4ul, st.NumStateCheckpointsHeld, "checkpoints held");
            Equal(8ul, st.StateFallbackTokens, "B's cached tokens recomputed");
            Equal(0ul, st.NumStateCheckpointEvictions, "evictions");
            Equal(8ul, st.PrefixHitTokens, "hit tokens");
            // each checkpoint is a BlockStored of its block's hash in the state "group", after the KV's
            uint groups = (uint)e.KvGroups().GroupWindow.Length;
            KvEvent[] stored = e.DrainKvEvents().Where(ev => ev.Group == groups).ToArray();
            Equal(4, stored.Length, "checkpoint events");
            Assert(stored.All(ev => ev.Type == KvEventType.BlockStored && ev.Medium == Tier.Device), "stored on the device");
            ulong block0 = Library.BlockHash(0, Library.BlockHashRoot(0, null), new[] { 0, 1, 2, 3 });
            ulong branch = Library.BlockHash(0, block0, new[] { 4, 5, 6, 7 });  // B's checkpoint at 8
            Equal(1, stored.Count(ev => ev.BlockHash == branch), "B's checkpoint's event");
        }
    }

    static void StateCheckpointPolicies()
    {
        // EVERY 1: A leaves checkpoints at 4, 8 and 12; B and C each restore at 8, checkpoint at 12
        EngineParams p = Hybrid();
        p.StateCheckpointPolicy = StateCheckpointPolicy.Every; p.StateCheckpointInterval = 1;
        var copies = new List<int[]>[3];
        Stats st;
        using (var e = new Engine(p))
        {
            Assert(ThreeRequests(e, copies, out st).SequenceEqual(new uint[] { 0, 8, 8 }), "EVERY 1: cached tokens");
            Equal(5ul, st.NumStateCheckpointsTaken, "EVERY 1: checkpoints taken");
            Equal(2ul, st.NumStateRestores, "EVERY 1: restores");
            Equal(0ul, st.StateFallbackTokens, "EVERY 1: tokens recomputed");
            Equal(5ul, st.NumStateCheckpointsHeld, "EVERY 1: checkpoints held");
        }
        // NONE: no checkpoint and no hit: every prompt from token 0, no fallback counted
        p.StateCheckpointPolicy = StateCheckpointPolicy.None; p.StateCheckpointInterval = 0;
        using (var e = new Engine(p))
        {
            Assert(ThreeRequests(e, copies, out st).All(n => n == 0), "NONE: no hit");
            Assert(copies.All(list => list.Count == 0), "NONE: no state copy");
            Equal(0ul, st.NumStateCheckpointsTaken, "NONE: checkpoints taken");
            Equal(0ul, st.NumStateRestores, "NONE: restores");
            Equal(0ul, st.NumStateCheckpointsHeld, "NONE: checkpoints held");
            Equal(0ul, st.StateFallbackTokens, "NONE: no fallback counted");
            Equal(0ul, st.PrefixHitTokens, "NONE: hit tokens");
        }
    }

    static void StateCheckpointsEvictTheLeastRecentlyUsed()
    {
        // 2 checkpoint slots: B's at 12 evicts A's (the oldest); C's restore touches B's at 8, so
        // C's at 12 evicts B's at 12
        EngineParams p = Hybrid();
        p.EnableKvEvents = true; p.NumStateCheckpoints = 2;
        using (var e = new Engine(p))
        {
            var copies = new List<int[]>[3];
            Stats st;
            Assert(ThreeRequests(e, copies, out st).SequenceEqual(new uint[] { 0, 0, 8 }), "cached tokens");
            Equal(4ul, st.NumStateCheckpointsTaken, "checkpoints taken");
            Equal(2ul, st.NumStateCheckpointEvictions, "evictions");
            Equal(1ul, st.NumStateRestores, "restores");
            Equal(2ul, st.NumStateCheckpointsHeld, "checkpoints held");
            uint groups = (uint)e.KvGroups().GroupWindow.Length;
            KvEvent[] events = e.DrainKvEvents().Where(ev => ev.Group == groups).ToArray();
            ulong[] stored = events.Where(ev => ev.Type == KvEventType.BlockStored).Select(ev => ev.BlockHash).ToArray();
            ulong[] removed = events.Where(ev => ev.Type == KvEventType.BlockRemoved).Select(ev => ev.BlockHash).ToArray();
            // stored: A's at 12, B's at 8, B's at 12, C's at 12
            Equal(4, stored.Length, "checkpoints stored");
            Assert(removed.SequenceEqual(new[] { stored[0], stored[2] }), "removed: A's at 12, then B's at 12");
        }
    }
}
