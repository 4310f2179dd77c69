// Offload to the host tier (pkv 0.2, EngineParams.HostOffload): a cached block evicted from the
// pool is copied to the host tier (CopyKind.Offload, a stored event of Tier.Host) and a later
// prefix hit loads it back (CopyKind.Load); the per-tier stats; HostOffload 0 drops evicted blocks.
using System;
using System.Linq;
using System.Runtime.InteropServices;
using Pkv;

static partial class Tests
{
    static readonly int[] OffloadFirst = Enumerable.Range(1, 13).ToArray();    // 3 full blocks + 1 token
    static readonly int[] OffloadOther = Enumerable.Range(100, 16).ToArray();  // the whole pool

    static Engine OffloadEngine(bool hostOffload)
    {
        var p = Small();
        p.NumBlocks = 4; p.HostNumBlocks = HostBlocks; p.EnableKvEvents = true; p.HostOffload = hostOffload;
        var e = new Engine(p);
        Equal(hostOffload, e.Params.HostOffload, "Params.HostOffload");
        return e;
    }

    static ulong[] Hashes(KvEvent[] events, KvEventType type, Tier tier)
    {
        return events.Where(ev => ev.Type == type && ev.Tier == tier).Select(ev => ev.BlockHash)
                     .OrderBy(h => h).ToArray();
    }

    static void OffloadAndLoadBack()
    {
        Equal(true, EngineParams.Defaults().HostOffload, "HostOffload default");
        Equal(Native.PKV_COPY_LOAD, (int)CopyKind.Load, "CopyKind.Load");
        Equal(56, Marshal.SizeOf(typeof(KvEvent)), "sizeof(KvEvent) (0.5: LoraId, NumExtraKeys)");
        var firstHashes = new ulong[3];
        ulong h = Library.BlockHashRoot(0, null);
        for (int i = 0; i < 3; i++)
            firstHashes[i] = h = Library.BlockHash(0, h, OffloadFirst.Skip(4 * i).Take(4).ToArray());
        using (var e = OffloadEngine(true))
        {
            var a = e.Allocate(OffloadFirst);
            RunStep(e, a);
            a.Release();
            Assert(Hashes(e.DrainKvEvents(), KvEventType.BlockStored, Tier.Device)
                   .SequenceEqual(firstHashes.OrderBy(x => x)), "stored in the pool");
            // OffloadOther takes every pool block: the 3 cached ones are offloaded, and its batch
            // lists the copies out (pool -> host tier) before anything is written.
            var b = e.Allocate(OffloadOther);
            var st = e.Stats();
            Equal(3UL, st.NumEvictions, "num_evictions");
            Equal(3UL, st.NumOffloadedBlocks, "num_offloaded_blocks");
            Equal(3UL, st.NumHostCachedBlocks, "num_host_cached_blocks");
            Equal(0UL, st.NumHostEvictions, "num_host_evictions");
            using (var batch = e.BeginBatch(new[] { b }))
            {
                Assert(batch.CopyKinds().SequenceEqual(Enumerable.Repeat(CopyKind.Offload, 3)), "offload kinds");
                Assert(batch.CopyDst().OrderBy(x => x).SequenceEqual(new[] { 0, 1, 2 }), "host-tier blocks");
            }
            RunStep(e, b);
            b.Release();
            KvEvent[] events = e.DrainKvEvents();
            Assert(Hashes(events, KvEventType.BlockStored, Tier.Host)
                   .SequenceEqual(firstHashes.OrderBy(x => x)), "stored in the host tier");
            Assert(Hashes(events, KvEventType.BlockRemoved, Tier.Device)
                   .SequenceEqual(firstHashes.OrderBy(x => x)), "removed from the pool");
            // OffloadFirst again: its 12 tokens of sealed blocks are a prefix hit on the host tier.
            uint cached;
            Equal(4u, e.AllocateQuery(OffloadFirst, out cached), "query blocks");
            Equal(12u, cached, "query cached");
            a = e.Allocate(OffloadFirst);
            Equal(12u, a.NumCachedTokens, "cached tokens");
            st = e.Stats();
            Equal(12UL, st.PrefixHitTokens, "prefix_hit_tokens");
            Equal(12UL, st.HostHitTokens, "host_hit_tokens");
            Equal(0UL, st.DeviceHitTokens, "device_hit_tokens");
            Equal(3UL, st.NumLoadedBlocks, "num_loaded_blocks");
            Equal(7UL, st.NumOffloadedBlocks, "num_offloaded_blocks, OffloadOther's too");
            using (var batch = e.BeginBatch(new[] { a }))
            {
                CopyKind[] kinds = batch.CopyKinds();
                int[] dst = batch.CopyDst();
                int[] loads = Enumerable.Range(0, kinds.Length).Where(i => kinds[i] == CopyKind.Load)
                                        .Select(i => dst[i]).ToArray();
                Assert(loads.SequenceEqual(a.BlockTable().Take(3)), "loads into the first 3 blocks");
                Equal(4, kinds.Count(k => k == CopyKind.Offload), "offloads");
                Equal(7, kinds.Length, "copies");
                Equal(1u, batch.NumTokens, "only the last token computed");
                batch.Copy();
                batch.End();
            }
            Equal(13u, a.Info().NumComputedTokens, "computed");
            a.Release();
            e.Check();
        }
    }

    static void HostOffloadOff()
    {
        using (var e = OffloadEngine(false))
        {
            var a = e.Allocate(OffloadFirst);
            RunStep(e, a);
            a.Release();
            var b = e.Allocate(OffloadOther);
            using (var batch = e.BeginBatch(new[] { b }))
                Equal(0, batch.CopyKinds().Length, "no copies");
            RunStep(e, b);
            b.Release();
            a = e.Allocate(OffloadFirst);
            Equal(0u, a.NumCachedTokens, "cached tokens");
            var st = e.Stats();
            Equal(7UL, st.NumEvictions, "num_evictions");
            Equal(0UL, st.NumOffloadedBlocks + st.NumLoadedBlocks + st.NumHostCachedBlocks + st.HostHitTokens,
                  "no offload, load, host-cached block or host hit");
            Assert(e.DrainKvEvents().All(ev => ev.Tier == Tier.Device), "every event in the pool");
            a.Release();
            e.Check();
        }
    }
}
