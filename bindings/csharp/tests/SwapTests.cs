// The host tier (pkv 0.2): its size in the budget, pool info and stats; SwapOut / SwapIn, the
// copies the next batch lists by kind and Batch.Copy; refusals; the limits pkv.h names.
using System;
using System.Linq;
using Pkv;

static partial class Tests
{
    const uint HostBlocks = 8;

    static EngineParams WithHostTier()
    {
        var p = Small();
        p.HostNumBlocks = HostBlocks;
        return p;
    }

    static void HostTier()
    {
        var p = WithHostTier();
        using (var e = new Engine(p))
        {
            foreach (var budget in new[] { Library.Profile(p), e.Budget() })
            {
                Equal((ulong)HostBlocks, budget.HostNumBlocks, "host_num_blocks");
                Equal(HostBlocks * budget.BlockBytes, budget.HostPoolBytes, "host_pool_bytes");
            }
            var pool = e.PoolInfo();
            Equal((ulong)HostBlocks, pool.HostNumBlocks, "pool host_num_blocks");
            Assert(!pool.HostKPool.IsZero && !pool.HostVPool.IsZero, "host bases");
            Equal(HostBlocks * pool.BlockStride, pool.HostLayerStride, "host_layer_stride");
            Equal(e.Budget().HostPoolBytes, 2 * pool.HostBytesPerPool, "host_bytes_per_pool");
            var st = e.Stats();
            Equal((ulong)HostBlocks, st.NumHostBlocks, "num_host_blocks");
            Equal((ulong)HostBlocks, st.NumHostFreeBlocks, "num_host_free_blocks");
        }
        using (var none = new Engine(Small()))  // no host tier: every host term is 0
        {
            var b = none.Budget();
            Equal(0UL, b.HostNumBlocks + b.HostPoolBytes, "no host tier");
            Equal(IntPtr.Zero, none.PoolInfo().HostKBase, "no host base");
            var bytes = Small();
            bytes.HostCacheBytes = 3 * b.BlockBytes;
            Equal(3UL, Library.Profile(bytes).HostNumBlocks, "host_cache_bytes");
        }
    }

    static void SwapOutAndIn()
    {
        using (var e = new Engine(WithHostTier()))
        {
            var a = e.Allocate(Enumerable.Range(0, 10).ToArray());  // 3 blocks of 4
            RunStep(e, a);
            int[] table = a.BlockTable();
            Equal(Tier.Device, a.Info().Tier, "tier before");
            a.SwapOut();
            var info = a.Info();
            Equal(Tier.Host, info.Tier, "tier swapped");
            Equal(Tier.Host, info.KvTier, "kv_tier swapped");
            Equal(3u, info.NumHostBlocks, "num_host_blocks");
            Equal(0u, info.NumBlocks, "num_blocks swapped");
            Equal(10u, info.NumComputedTokens, "computed kept");
            var st = e.Stats();
            Equal(1UL, st.NumSwappedSeqs, "num_swapped_seqs");
            Equal(3UL, st.NumSwappedOutBlocks, "num_swapped_out_blocks");
            Equal((ulong)HostBlocks - 3, st.NumHostFreeBlocks, "host free after swap-out");
            Throws(Status.State, () => a.SwapOut());  // not running
            Throws(Status.State, () => a.Append(1));  // a swapped sequence cannot grow
            // The next batch (another sequence's) lists the swap-out copies; Copy does them.
            var b = e.Allocate(Enumerable.Range(100, 6).ToArray());
            Throws(Status.State, () => b.SwapIn());  // not swapped
            using (var batch = e.BeginBatch(new[] { b }))
            {
                Assert(batch.CopyKinds().SequenceEqual(Enumerable.Repeat(CopyKind.SwapOut, 3)), "swap-out kinds");
                Assert(batch.CopySrc().OrderBy(x => x).SequenceEqual(table.OrderBy(x => x)), "swap-out sources");
                Equal(3, batch.CopyDst().Length, "swap-out destinations");
                batch.Copy();
                batch.Copy();  // done already: nothing more
                batch.End();
            }
            e.Check();
            // Back in: the next batch of a lists the swap-in copies into its new blocks.
            a.SwapIn();
            info = a.Info();
            Equal(Tier.Device, info.Tier, "tier swapped in");
            Equal(3u, info.NumBlocks, "num_blocks swapped in");
            Equal(0u, info.NumHostBlocks, "num_host_blocks swapped in");
            st = e.Stats();
            Equal(0UL, st.NumSwappedSeqs, "num_swapped_seqs after swap-in");
            Equal(3UL, st.NumSwappedInBlocks, "num_swapped_in_blocks");
            a.Append(10);
            using (var batch = e.BeginBatch(new[] { a }))
            {
                Assert(batch.CopyKinds().SequenceEqual(Enumerable.Repeat(CopyKind.SwapIn, 3)), "swap-in kinds");
                Assert(batch.CopyDst().OrderBy(x => x).SequenceEqual(a.BlockTable().OrderBy(x => x)),
                       "swap-in destinations");
                batch.Copy();
                batch.End();
            }
            Equal((ulong)HostBlocks, e.Stats().NumHostFreeBlocks, "host free after swap-in");
            Equal(11u, a.Info().NumComputedTokens, "computed after swap-in");
            a.Release();
            b.Release();
            e.Check();
        }
    }

    static void PreemptionBySwapping()
    {
        var p = WithHostTier();
        p.PreemptionMode = PreemptionMode.Swap;
        using (var e = new Engine(p)) { e.Check(); }
        var q = Small();
        q.PreemptionMode = PreemptionMode.Swap;
        Throws(Status.InvalidArgument, () => new Engine(q).Dispose());  // needs the host tier
    }

    static void SwapWithoutHostTier()
    {
        using (var e = new Engine(Small()))
        {
            var seq = e.Allocate(new[] { 1, 2, 3, 4, 5 });
            RunStep(e, seq);
            Throws(Status.Unsupported, () => seq.SwapOut());
            Equal(Tier.Device, seq.Info().Tier, "tier unchanged");
        }
    }

    static void LimitsAndKinds()
    {
        Equal(Native.PKV_COPY_SWAP_OUT, (int)CopyKind.SwapOut, "CopyKind value");
        Equal(Native.PKV_TIER_HOST, (int)Tier.Host, "Tier value");
        Equal(256, Constants.AttentionMaxHeadDim, "attention head_dim limit");
        Equal(65535, Constants.CudaMaxGrid, "CUDA grid limit");
        var p = Small();
        p.HeadDim = Constants.MaxHeadDim;
        Library.Profile(p);
        p.HeadDim = Constants.MaxHeadDim + 1;
        Throws(Status.InvalidArgument, () => Library.Profile(p));
        var raw = Small().ToNative();  // reserved fields are not public; pkv refuses them nonzero
        raw.Reserved1 = 1;
        KvBudget b = new KvBudget { StructSize = (uint)System.Runtime.InteropServices.Marshal.SizeOf(typeof(KvBudget)) };
        unsafe { Equal(Status.InvalidArgument, Native.pkv_profile(&raw, &b), "reserved1 refused"); }
    }
}
