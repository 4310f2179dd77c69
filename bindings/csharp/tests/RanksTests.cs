// Ranks (since 0.10): one engine holding every tensor-parallel rank's pool (EngineParams.Ranks
// All: Batch.Rank, Engine.RankPoolInfo, Engine.SetRankStream), and a decider's plan carried to a
// rank's pool engine (Ranks Pool: Batch.ExportPlan, Engine.ImportPlan).
using System;
using System.Linq;
using Pkv;

static partial class Tests
{
    // 2 layers, 4 q heads, 2 kv heads, TpSize 2: each rank holds 2 q heads and 1 kv head.
    static EngineParams RankParams(Ranks ranks, uint tpRank)
    {
        var p = EngineParams.Defaults();
        p.NumLayers = 2; p.NumQHeads = 4; p.NumKvHeads = 2; p.HeadDim = 8;
        p.DType = DType.F32; p.BlockSize = 4; p.NumBlocks = 32;
        p.Device = Device.Cpu; p.NumThreads = 1;
        p.TpSize = 2; p.TpRank = tpRank; p.Ranks = ranks;
        return p;
    }

    // One rank's heads of a layer: q, output [tokens][2][8], k, v [tokens][1][8], every V value
    // fill: each head's output is then fill.
    static float[] RankAttention(Batch b, uint layer, float fill)
    {
        var q = Enumerable.Repeat(0.25f, (int)b.NumTokens * 16).ToArray();
        var kv = Enumerable.Repeat(fill, (int)b.NumTokens * 8).ToArray();
        var output = new float[q.Length];
        b.Attention(layer, q, kv, kv, output);
        return output;
    }

    static void Filled(float[] output, float fill)
    {
        for (int i = 0; i < output.Length; i++)
            Assert(Math.Abs(output[i] - fill) < 1e-5,
                   string.Format("output[{0}] {1}, want {2}", i, output[i], fill));
    }

    static void RanksAllRunsEachRanksHeads()
    {
        using (var e = new Engine(RankParams(Ranks.All, 0)))
        {
            Equal(Ranks.All, e.Params.Ranks, "Params.Ranks");
            Equal(2u, e.Budget().NumRanks, "Budget().NumRanks");
            for (uint r = 0; r < 2; r++)
            {
                PoolInfo info = e.RankPoolInfo(r);
                Equal(r, info.Rank, "Rank");
                Equal(2u, info.NumRanks, "NumRanks");
                Equal(r, info.TpRank, "TpRank");
                Equal(0u, info.PpRank, "PpRank");
                Equal(0u, info.FirstLayer, "FirstLayer");
                Equal(2u, info.EndLayer, "EndLayer");
                Equal(-1, info.DeviceId, "DeviceId on the CPU");
            }
            Assert(e.RankPoolInfo(0).KBase != e.RankPoolInfo(1).KBase, "a pool per rank");
            Throws(Status.InvalidArgument, () => e.RankPoolInfo(2));

            Sequence seq = e.Allocate(new[] { 1, 2, 3, 4, 5 });
            using (Batch b = e.BeginBatch(new[] { seq }))
            {
                // The batch's own handle names no rank: refused with pkv's message.
                PkvException x = Throws(Status.InvalidArgument, () => RankAttention(b, 0, 0.5f));
                Assert(x.Detail.Contains("pkv_batch_rank"), "pkv's message: " + x.Detail);
                Batch[] ranks = { b.Rank(0), b.Rank(1) };
                Equal(1, ranks[1].RankIndex, "RankIndex");
                Equal(-1, b.RankIndex, "the batch's RankIndex");
                Equal(5u, ranks[1].NumTokens, "a rank's view is the batch's");
                for (uint layer = 0; layer < 2; layer++)
                    for (uint r = 0; r < 2; r++)
                        Filled(RankAttention(ranks[r], layer, 0.5f + r), 0.5f + r);
                Throws(Status.InvalidArgument, () => b.Rank(2));
                Throws(Status.InvalidArgument, () => ranks[0].Rank(0));  // no ranks of its own
                ranks[1].End();  // ends the batch, every rank's
                Assert(!b.IsOpen && !ranks[0].IsOpen, "a rank's End ended the batch");
                Throws<ObjectDisposedException>(() => RankAttention(ranks[0], 0, 0.5f));
            }
            Equal(5u, seq.Info().NumComputedTokens, "computed tokens");
            e.Check();
        }
    }

    static void RankStreams()
    {
        using (var e = new Engine(RankParams(Ranks.All, 0)))
        {
            e.SetRankStream(0, NativeAddress.Zero);
            e.SetRankStream(1, NativeAddress.Zero);
            var stream = new NativeAddress(16);
            PkvException x = Throws(Status.InvalidArgument, () => e.SetRankStream(1, stream));
            Assert(x.Detail.Contains("stream"), "pkv's message: " + x.Detail);
            Throws(Status.InvalidArgument, () => e.SetRankStream(2, NativeAddress.Zero));
        }
    }

    static void RankDeviceIds()
    {
        EngineParams p = RankParams(Ranks.All, 0);
        Assert(p.RankDeviceIds == null, "no devices by default");
        p.RankDeviceIds = new[] { 0 };
        PkvException x = Throws(Status.InvalidArgument, () => new Engine(p).Dispose());
        Assert(x.Detail.Contains("TpSize x PpSize is 2"), "one per rank: " + x.Detail);
        p.RankDeviceIds = new[] { 0, 1 };
        Equal(1, p.RankDeviceIds[1], "RankDeviceIds");
        x = Throws(Status.InvalidArgument, () => new Engine(p).Dispose());  // CPU: host memory
        Assert(x.Detail.Contains("rank_device_ids"), "pkv's message: " + x.Detail);
    }

    static void PlanExportedRunsOnAPoolEngineOnce()
    {
        using (var decider = new Engine(RankParams(Ranks.One, 0)))
        using (var pool = new Engine(RankParams(Ranks.Pool, 1)))
        {
            Equal(Ranks.Pool, pool.Params.Ranks, "Params.Ranks");
            Throws(Status.State, () => pool.Allocate(new[] { 1, 2, 3 }));  // it decides nothing
            Sequence seq = decider.Allocate(new[] { 1, 2, 3, 4, 5, 6 });
            byte[] plan;
            using (Batch b = decider.BeginBatch(new[] { seq }))
            {
                plan = b.ExportPlan();
                Assert(plan.Length > 0 && b.ExportPlan().SequenceEqual(plan), "one plan per batch");
                using (Batch imported = pool.ImportPlan(plan))
                {
                    Equal(6u, imported.NumTokens, "imported tokens");
                    Assert(imported.SlotMapping().SequenceEqual(b.SlotMapping()), "its slots");
                    Throws(Status.State, () => imported.ExportPlan());  // not exported again
                    for (uint layer = 0; layer < 2; layer++)
                    {
                        Filled(RankAttention(imported, layer, 1.5f), 1.5f);  // rank 1's heads
                        Filled(RankAttention(b, layer, 0.5f), 0.5f);  // rank 0's, the decider's
                    }
                    imported.End();
                }
                b.End();
            }
            PkvException x = Throws(Status.State, () => pool.ImportPlan(plan));  // the same again
            Assert(x.Detail.Contains("stale"), "pkv's message: " + x.Detail);
            Throws(Status.InvalidArgument, () => pool.ImportPlan(new byte[] { 1, 2, 3 }));
            Throws(Status.State, () => decider.ImportPlan(plan));  // a decider imports nothing
            pool.Check();
        }
    }
}
