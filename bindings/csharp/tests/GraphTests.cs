// Batch.PlanGraph (pkv_batch_plan_graph, since 0.9.0) and the CUDA step counters on a CPU engine:
// the call reaches pkv, which refuses it (a CPU engine has no CUDA graphs) with Unsupported and
// its message; the batch stays open and usable (Attention, then End computes the decode token);
// Stats' NumHostWaits and NumDeviceAllocs read 0.
using System;
using System.Linq;
using Pkv;

static partial class Tests
{
    // An engine with one sequence whose 3-token prompt is computed and one token appended: its
    // next batch is a decode step.
    static Engine DecodingEngine(out Sequence seq)
    {
        var p = Small(); p.MaxNumSeqs = 8;
        var e = new Engine(p);
        seq = e.Allocate(new[] { 1, 2, 3 });
        RunStep(e, seq);
        seq.Append(4);
        return e;
    }

    static void NoGraphs(Action planGraph)
    {
        PkvException x = Throws(Status.Unsupported, planGraph);
        Assert(x.Detail.Contains("pkv_batch_plan_graph") && x.Detail.Contains("CUDA graphs"),
               "pkv's message: " + x.Detail);
    }

    static void PlanGraphOnACpuEngineKeepsTheBatch()
    {
        Sequence seq;
        using (var e = DecodingEngine(out seq))
        {
            Batch b = e.BeginBatch(new[] { seq });
            Equal(1u, b.NumTokens, "a decode step's tokens");
            NoGraphs(() => b.PlanGraph(1));
            Assert(b.IsOpen, "the batch is kept after the refusal");
            RunAttention(b);  // not planned by the refused call: attention runs eagerly
            b.End();
            SeqInfo info = seq.Info();
            Equal(4u, info.NumTokens, "tokens");
            Equal(4u, info.NumComputedTokens, "the decode token computed");
            Assert(!info.InBatch, "out of the batch");
            Throws<ObjectDisposedException>(() => b.PlanGraph(1));  // ended: as every other call
            e.Check();
        }
    }

    static void PlanGraphOnAStepBatchThenCommit()
    {
        var p = Small(); p.MaxNumSeqs = 8;
        using (var e = new Engine(p))
        {
            var rp = RequestParams.Defaults(); rp.MaxNewTokens = 2;
            e.Submit(new[] { 1, 2, 3 }, rp);
            for (int step = 0; step < 2; step++)  // the prefill (3 tokens), then the decode (1)
            {
                Batch b = e.Step();
                NoGraphs(() => b.PlanGraph(8));
                RunAttention(b);
                b.Commit(Enumerable.Repeat(7, (int)b.NumSeqs).ToArray());
            }
            Equal(1, e.DrainFinished().Length, "finished requests");
            Assert(e.Step() == null, "nothing left to run");
        }
    }

    static void StepCountersOnACpuEngine()
    {
        Sequence seq;
        using (var e = DecodingEngine(out seq))
        {
            RunStep(e, seq);
            Stats s = e.Stats();
            Equal(0UL, s.NumHostWaits, "host waits");
            Equal(0UL, s.NumDeviceAllocs, "device allocations");
            Equal(1UL, s.NumSeqs, "sequences (the same struct's other counters)");
        }
    }
}
