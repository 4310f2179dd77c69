// Recurrent state (pkv 0.6, issue 28 item 7): state layer specs round-trip through the params
// and Library.Profile, whose budget's state terms are checked against bytes computed here by
// hand; an engine's state pool (PoolInfo), each state layer's parts in a slot (LayerInfo) and the
// batch's state slots; the checkpoint params; refusals that name what was wrong. The same model
// as the other bindings' state tests.
using System;
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
}
