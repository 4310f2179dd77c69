// Recurrent state with a host tier (pkv 0.6, issue 28 item 4): host state slots in the budget and
// PoolInfo, swap's CopyKind.StateOut / StateIn copies, a checkpoint evicted from the device
// offloaded to the host and restored from there, and the Stats' offload counters. The model of
// StateTests.cs; the same cases as the other bindings' state tests.
using System;
using System.Collections.Generic;
using System.Linq;
using Pkv;

static partial class Tests
{
    // The hybrid with a host tier: 8 working slots and `checkpoints` checkpoint slots.
    static EngineParams HostState(uint checkpoints)
    {
        EngineParams p = Hybrid();
        p.HostNumBlocks = 16;
        p.NumStateCheckpoints = checkpoints;
        return p;
    }

    // The copies of `kind` a batch lists, as {src, dst}.
    static List<int[]> CopiesOf(Batch b, CopyKind kind)
    {
        CopyKind[] kinds = b.CopyKinds();
        int[] src = b.CopySrc(), dst = b.CopyDst();
        return Enumerable.Range(0, kinds.Length).Where(i => kinds[i] == kind).Select(i => new[] { src[i], dst[i] }).ToList();
    }

    static void HostStateSlotsInBudgetAndPool()
    {
        // host state slots: one per sequence (swap) and one per checkpoint (offload)
        using (var e = new Engine(HostState(4)))
        {
            foreach (KvBudget b in new[] { Library.Profile(HostState(4)), e.Budget() })
            {
                Equal(8u + 4u, b.NumHostStateSlots, "host state slots: max_num_seqs + checkpoints");
                Equal(12 * SlotBytes, b.HostStateBytes, "host state bytes");
            }
            PoolInfo pool = e.PoolInfo();
            Assert(pool.HostStatePool != NativeAddress.Zero, "a host state pool");
            Equal(12u, pool.NumHostStateSlots, "pool's host state slots");
            Stats st = e.Stats();
            Equal(0UL, st.NumHostStateCheckpointsHeld, "offloaded checkpoints held");
            Equal(0UL, st.NumStateCheckpointsOffloaded, "checkpoints offloaded");
            Equal(0UL, st.NumStateRestoresFromHost, "restores from the host");
        }
        // no host tier: no host state
        KvBudget none = Library.Profile(Hybrid());
        Equal(0UL, none.NumHostStateSlots + none.HostStateBytes, "no host tier: no host state");
        using (var e = new Engine(Hybrid()))
            Equal(NativeAddress.Zero, e.PoolInfo().HostStatePool, "no host state pool");
    }

    static void SwapMovesTheWorkingStateThroughAHostSlot()
    {
        Equal(7, (int)CopyKind.StateOut, "PKV_COPY_STATE_OUT");
        Equal(8, (int)CopyKind.StateIn, "PKV_COPY_STATE_IN");
        using (var e = new Engine(HostState(4)))
        {
            Sequence a = e.Allocate(new[] { 1, 2, 3, 4, 5, 6 });
            int slot;
            using (Batch b = e.BeginBatch(new[] { a }))
            {
                slot = b.StateSlots()[0];
                b.End();  // the host ran every layer itself
            }
            a.SwapOut();
            // the next batch (another sequence's) copies a's working slot out to a host state slot
            Sequence s2 = e.Allocate(new[] { 50, 51, 52, 53, 54 });
            int host;
            using (Batch b = e.BeginBatch(new[] { s2 }))
            {
                List<int[]> out_ = CopiesOf(b, CopyKind.StateOut);
                Equal(1, out_.Count, "one state-out copy");
                Equal(slot, out_[0][0], "from a's working slot");
                host = out_[0][1];
                Assert(host >= 0 && host < 12, "host state slot " + host);
                b.End();
            }
            // back in: a working slot again, the state copied in from the host slot before the step
            a.SwapIn();
            a.Append(7);
            using (Batch b = e.BeginBatch(new[] { a }))
            {
                List<int[]> in_ = CopiesOf(b, CopyKind.StateIn);
                Equal(1, in_.Count, "one state-in copy");
                Equal(host, in_[0][0], "from the host slot");
                Equal(b.StateSlots()[0], in_[0][1], "into a's new working slot");
                b.End();
            }
            e.Check();
        }
    }

    static void ACheckpointIsOffloadedThenRestored()
    {
        // one checkpoint slot: B's checkpoint at 12 evicts A's, which moves to the host; A's prompt
        // again finds its KV on the device and its checkpoint on the host
        using (var e = new Engine(HostState(1)))
        {
            int[] a = Enumerable.Range(0, 14).ToArray(), b = Enumerable.Range(500, 14).ToArray();
            var copies = new List<int[]>();
            RunRequest(e, a, copies);
            RunRequest(e, b, copies);
            Stats st = e.Stats();
            Equal(1UL, st.NumStateCheckpointsOffloaded, "A's checkpoint offloaded");
            Equal(1UL, st.NumHostStateCheckpointsHeld, "held on the host");
            Equal(12u, RunRequest(e, a, copies), "A again: cached tokens");
            st = e.Stats();
            Equal(1UL, st.NumStateRestores, "restores");
            Equal(1UL, st.NumStateRestoresFromHost, "restores from the host");
            e.Check();
        }
    }
}
