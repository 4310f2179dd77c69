// Ending batches (issue 26, item 1): a batch ended the wrong way never strands the engine; the
// attention arrays checked against the engine's dtype and shape (item 2); SampleRows (item 9).
using System;
using System.Linq;
using System.Threading;
using Pkv;

static partial class Tests
{
    static void RunAttention(Batch b)
    {
        var q = new float[b.NumTokens * 64];
        var kv = new float[b.NumTokens * 32];
        for (uint layer = 0; layer < 2; layer++) b.Attention(layer, q, kv, kv, new float[q.Length]);
    }

    // The sequence: submit, step, End() -> a clear error, the batch kept; it can then be
    // aborted (and a later Step works) or committed.
    static void SchedulerBatchEndKeepsIt()
    {
        var p = Small(); p.NumBlocks = 32;
        using (var e = new Engine(p))
        {
            var rp = RequestParams.Defaults(); rp.MaxNewTokens = 3;
            var seq = e.Submit(Enumerable.Range(1, 6).ToArray(), rp);
            Batch b = e.Step();
            Assert(b != null && b.IsScheduled, "a scheduler batch");
            PkvException x = Throws(Status.State, () => b.End());
            Assert(x.Detail.Contains("ends with Commit(sampledTokens) or Abort(); it is still open"),
                   "says how it ends: " + x.Detail);
            Assert(b.IsOpen, "the batch is kept after a refused End");
            Throws(Status.State, () => e.Step());  // pkv still holds it open
            b.Abort();
            Assert(!b.IsOpen, "aborted");
            Equal(0u, seq.Info().NumComputedTokens, "nothing computed by the aborted step");

            Batch again = e.Step();
            Assert(again != null, "a later Step works after the abort");
            Throws(Status.State, () => again.End());
            RunAttention(again);
            again.Commit(Enumerable.Repeat(7, (int)again.NumSeqs).ToArray());  // commit after a refused End
            Assert(!again.IsOpen, "committed");
            Equal(6u, seq.Info().NumComputedTokens, "the prompt computed");
            Equal(7u, seq.Info().NumTokens, "the sampled token appended");
            Throws<ObjectDisposedException>(() => again.End());

            using (Batch disposed = e.Step())  // left without Commit: Dispose aborts it
                Throws(Status.State, () => disposed.End());
            Batch next = e.Step();
            Assert(next != null, "Step works after a disposed batch");
            Throws(Status.InvalidArgument, () => next.Commit(new int[0]));  // too few tokens: kept
            Assert(next.IsOpen, "kept after a refused Commit");
            next.Abort();
            e.Check();
        }
    }

    // A scheduler batch the host drops (no reference left, never ended) is aborted when it is
    // collected: the engine is not stuck.
    static void DroppedBatchIsAborted()
    {
        var p = Small(); p.NumBlocks = 32;
        using (var e = new Engine(p))
        {
            e.Submit(Enumerable.Range(1, 6).ToArray());
            // on another thread, so no stack slot of this one still holds the batch
            var drop = new Thread(() => Assert(e.Step() != null, "a batch to drop"));
            drop.Start();
            drop.Join();
            Batch b = null;
            for (int i = 0; i < 50 && b == null; i++)
            {
                GC.Collect();
                GC.WaitForPendingFinalizers();
                try { b = e.Step(); }
                catch (PkvException x) when (x.Status == Status.State) { Thread.Sleep(10); }
            }
            Assert(b != null, "Step works once the dropped batch was collected");
            b.Abort();
            e.Check();
        }
    }

    static void AttentionChecksDtypeAndLength()
    {
        var p = Small(); p.DType = DType.Bf16;
        using (var e = new Engine(p))
        using (var b = e.BeginBatch(new[] { e.Allocate(new[] { 1, 2, 3 }) }))
        {
            var f = new float[3 * 64];
            var x = Throws(Status.InvalidArgument, () => b.Attention(0, f, new float[96], new float[96], new float[192]));
            Assert(x.Detail.Contains("Bf16") && x.Detail.Contains("ushort[]") && x.Detail.Contains("not float[]"),
                   "names the dtype and the type to give: " + x.Detail);
            ushort[] q = new ushort[3 * 64], kv = new ushort[3 * 32];
            x = Throws(Status.InvalidArgument, () => b.Attention(0, q, new ushort[95], kv, new ushort[192]));
            Assert(x.Detail.Contains("k has 95 elements, this step needs 96"), x.Detail);
            x = Throws(Status.InvalidArgument, () => b.Attention(0, q, kv, kv, new ushort[191]));
            Assert(x.Detail.Contains("output has 191 elements, this step needs 192"), x.Detail);
            x = Throws(Status.InvalidArgument, () => b.Attention(0, new ushort[10], kv, kv, new ushort[192]));
            Assert(x.Detail.Contains("q has 10 elements, this step needs 192"), x.Detail);
            x = Throws(Status.InvalidArgument, () => b.Attention(0, q, kv, null, new ushort[192]));
            Assert(x.Detail.Contains("v is null"), x.Detail);
            b.Attention(0, q, kv, kv, new ushort[192]);  // the right ones
        }
        using (var e = new Engine(Small()))  // f32: 16-bit patterns are refused
        using (var b = e.BeginBatch(new[] { e.Allocate(new[] { 1, 2 }) }))
        {
            var x = Throws(Status.InvalidArgument, () => b.Attention(0, new ushort[128], new ushort[64],
                                                                   new ushort[64], new ushort[128]));
            Assert(x.Detail.Contains("F32") && x.Detail.Contains("float[]"), x.Detail);
        }
    }

    static void SampleRowsOfSteps()
    {
        var p = Small(); p.NumBlocks = 32; p.MaxNumBatchedTokens = 8;
        using (var e = new Engine(p))
        {
            var rp = RequestParams.Defaults(); rp.MaxNewTokens = 2;
            e.Submit(Enumerable.Range(1, 12).ToArray(), rp);  // 12 tokens: two chunks of at most 8
            e.Submit(Enumerable.Range(50, 3).ToArray(), rp);
            Batch b = e.Step();
            int[] rows = b.SampleRows(), starts = b.QueryStart();
            Equal((int)b.NumSeqs, rows.Length, "one row per sequence");
            for (int i = 0; i < rows.Length; i++)
            {
                bool whole = starts[i + 1] - starts[i] == e.Sequence(b.SeqIds()[i]).Info().NumTokens;
                Equal(whole ? starts[i + 1] - 1 : -1, rows[i], "sample row of sequence " + i);
            }
            Assert(rows.Contains(-1), "a prompt chunk that samples nothing");
            RunAttention(b);
            b.Commit(Enumerable.Repeat(5, (int)b.NumSeqs).ToArray());
            Throws<ObjectDisposedException>(() => b.SampleRows());
        }
        using (var e = new Engine(Small()))  // a batch of BeginBatch: the last row of each whole sequence
        {
            Sequence a = e.Allocate(new[] { 1, 2, 3 }), c = e.Allocate(new[] { 9, 8, 7, 6, 5 });
            using (var b = e.BeginBatch(new[] { a, c }, new uint[] { 3, 2 }))
                Assert(b.SampleRows().SequenceEqual(new[] { 2, -1 }), "rows " + string.Join(",", b.SampleRows()));
        }
    }
}
