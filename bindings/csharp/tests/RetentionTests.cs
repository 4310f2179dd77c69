// Retention (since 0.8.0): a system prompt kept by its cache priority through a burst of unique
// prompts (and evicted by plain LRU), evictions by priority, pins and their cap, a retention that
// decays on the test clock.
//
// Block size 4, a pool of 8 blocks. A prompt of 9 tokens holds 3 blocks while it runs; released,
// its 2 full blocks stay cached and the third is free. The system prompts are 8 tokens (2 blocks);
// each request is one plus a token of its own.
using System;
using System.Linq;
using Pkv;

static partial class Tests
{
    static readonly int[] SystemPrompt = Span(1000, 8), OtherPrompt = Span(2000, 8);

    static int[] Span(int first, int n) { return Enumerable.Range(first, n).ToArray(); }
    static int[] WithOne(int[] prefix) { return prefix.Concat(new[] { 1 }).ToArray(); }

    static Engine RetentionEngine(DebugFlags flags = DebugFlags.None)
    {
        var p = Small();
        p.NumBlocks = 8;
        p.DebugFlags = flags;
        return new Engine(p);
    }

    // Allocates tokens with r, computes them and releases them.
    static void RunPrompt(Engine e, int[] tokens, Retention r)
    {
        using (var s = e.Allocate(tokens, retention: r)) RunStep(e, s);
    }

    // count unique 9-token prompts of priority 0 from first
    static void Burst(Engine e, int count, int first)
    {
        for (int i = 0; i < count; i++) RunPrompt(e, Span(first + 100 * i, 9), default(Retention));
    }

    static uint CachedOf(Engine e, int[] prefix)
    {
        uint cached;
        e.AllocateQuery(WithOne(prefix), out cached);
        return cached;
    }

    static Stats CheckSums(Engine e)
    {
        Stats s = e.Stats();
        Equal(s.NumEvictions, s.NumEvictionsLow + s.NumEvictionsNormal + s.NumEvictionsHigh + s.NumEvictionsHighest,
              "evictions by priority sum to num_evictions");
        e.Check();
        return s;
    }

    // SystemPrompt cached with priority through Allocate, OtherPrompt at 0 and then given it by
    // CacheSetPriority; 4 bursts. 4 free blocks: the first burst takes 3 and frees 1 (6 of 8
    // cached); each later one needs 1 (then 2, 2) more than is free: 5 evictions.
    static void SystemPromptsAfterABurst(int priority, uint wantCached)
    {
        using (var e = RetentionEngine())
        {
            RunPrompt(e, WithOne(SystemPrompt), new Retention(priority));
            RunPrompt(e, WithOne(OtherPrompt), default(Retention));
            if (priority != 0) Equal(2u, e.CacheSetPriority(OtherPrompt, new Retention(priority)), "blocks given it");
            Equal(4UL, e.Stats().NumCachedBlocks, "cached blocks");
            Burst(e, 4, 5000);
            Equal(wantCached, CachedOf(e, SystemPrompt), "system prompt cached, priority " + priority);
            Equal(wantCached, CachedOf(e, OtherPrompt), "other prompt cached, priority " + priority);
            Stats s = CheckSums(e);
            Equal(5UL, s.NumEvictions, "evictions");
            Equal(5UL, s.NumEvictionsNormal, "normal evictions");
        }
    }

    static void RetentionKeepsSystemPrompts()
    {
        SystemPromptsAfterABurst(Constants.CachePriorityMax, 8);
        SystemPromptsAfterABurst(0, 0);  // plain LRU: the 4 oldest blocks go first
    }

    static void RetentionEvictionsByPriority()
    {
        using (var e = RetentionEngine())
        {
            RunPrompt(e, WithOne(SystemPrompt), new Retention(Constants.CachePriorityMax));
            RunPrompt(e, WithOne(OtherPrompt), new Retention(Constants.CachePriorityMin));
            RunPrompt(e, Span(3000, 9), new Retention(1));
            RunPrompt(e, Span(0, 32), default(Retention));  // the whole pool: every cached block goes
            Stats s = CheckSums(e);
            Equal("2 0 2 2 6", string.Join(" ", s.NumEvictionsLow, s.NumEvictionsNormal, s.NumEvictionsHigh,
                                           s.NumEvictionsHighest, s.NumEvictions), "evictions by priority, all");
        }
    }

    static void RetentionRefusals()
    {
        using (var e = RetentionEngine())
        {
            RunPrompt(e, WithOne(SystemPrompt), default(Retention));
            var err = Throws(Status.InvalidArgument,
                             () => e.CacheSetPriority(SystemPrompt, new Retention(Constants.CachePriorityMax + 1)));
            Assert(err.Detail.Contains("priority"), "message: " + err.Detail);
            Throws(Status.InvalidArgument,
                   () => e.Allocate(SystemPrompt, retention: new Retention(Constants.CachePriorityMin - 1)));
            RequestParams rp = RequestParams.Defaults();
            rp.CachePriority = Constants.CachePriorityMax + 1;
            Throws(Status.InvalidArgument, () => e.Submit(SystemPrompt, rp));
            Equal(0UL, e.Stats().NumSeqs, "sequences after refusals");
        }
    }

    static void RetentionOfARequest()
    {
        using (var e = RetentionEngine())
        {
            RequestParams rp = RequestParams.Defaults();
            rp.MaxNewTokens = 1;
            rp.CachePriority = Constants.CachePriorityMax;
            using (var seq = e.Submit(WithOne(SystemPrompt), rp))
            {
                using (var b = e.Step())
                {
                    var q = new float[b.NumTokens * 64];
                    var kv = new float[b.NumTokens * 32];
                    for (uint layer = 0; layer < 2; layer++) b.Attention(layer, q, kv, kv, new float[q.Length]);
                    b.Commit(new[] { 7 });
                }
                Equal(seq.Id, e.DrainFinished().Single(), "finished");
            }
            Burst(e, 4, 5000);
            Equal(8u, CachedOf(e, SystemPrompt), "the request's system prompt cached");
            CheckSums(e);
        }
    }

    static void CachePinHoldsAPrefix()
    {
        using (var e = RetentionEngine())
        {
            RunPrompt(e, WithOne(SystemPrompt), default(Retention));
            using (var pin = e.CachePin(SystemPrompt))
            {
                Equal(8u, pin.NumTokens, "pinned tokens");
                Assert(pin.Id != 0, "a pin id");
                Stats s = e.Stats();
                Equal("1 2", s.NumPins + " " + s.NumPinnedBlocks, "pins, pinned blocks");
                Burst(e, 4, 5000);  // 6 blocks left to it: it evicts its own, never the pinned ones
                Equal(8u, CachedOf(e, SystemPrompt), "pinned prefix cached");
                pin.Unpin();
                s = e.Stats();
                Equal("0 0", s.NumPins + " " + s.NumPinnedBlocks, "unpinned: pins, pinned blocks");
                var err = Throws(Status.NotFound, pin.Unpin);  // the second unpin
                Assert(err.Detail.Contains("no pin " + pin.Id), "message: " + err.Detail);
            }  // Dispose after Unpin: nothing
            RunPrompt(e, Span(0, 32), default(Retention));  // the whole pool: the system prompt goes
            Equal(0u, CachedOf(e, SystemPrompt), "unpinned prefix evicted");
            CheckSums(e);
        }
    }

    static void CachePinCap()
    {
        using (var e = RetentionEngine())
        {
            RunPrompt(e, WithOne(SystemPrompt), default(Retention));
            RunPrompt(e, Span(3000, 13), default(Retention));  // 3 cached blocks
            var pin = e.CachePin(SystemPrompt);
            // 2 + 3 pinned blocks would pass MaxPinnedPercent (50) of 8
            Equal(50, Constants.MaxPinnedPercent, "MaxPinnedPercent");
            var err = Throws(Status.NoSpace, () => e.CachePin(Span(3000, 12)));
            Assert(err.Detail.Contains("PKV_MAX_PINNED_PERCENT"), "message: " + err.Detail);
            Stats s = e.Stats();
            Equal("1 2", s.NumPins + " " + s.NumPinnedBlocks, "a refused pin changed nothing");
            pin.Dispose();
            pin.Dispose();  // once only
            Throws(Status.NotFound, () => e.CacheUnpin(pin.Id));
            using (var other = e.CachePin(Span(3000, 12))) Equal(12u, other.NumTokens, "pinned tokens");
            e.Check();
            var last = e.CachePin(SystemPrompt);
            e.Dispose();  // ends every pin: Dispose of one then asks nothing of the disposed engine
            last.Dispose();
            Throws<ObjectDisposedException>(last.Unpin);
        }
    }

    static void RetentionDecays()
    {
        // the engine's clock (DebugFlags.TestClock) is this process's environment
        Environment.SetEnvironmentVariable("PKV_TEST_CLOCK_MS", "1000");
        try
        {
            using (var e = RetentionEngine(DebugFlags.TestClock))
            {
                RunPrompt(e, WithOne(SystemPrompt), new Retention(Constants.CachePriorityMax, 500));  // until 1500
                Burst(e, 4, 5000);
                Equal(8u, CachedOf(e, SystemPrompt), "retained");
                Environment.SetEnvironmentVariable("PKV_TEST_CLOCK_MS", "1500");  // decayed
                Burst(e, 1, 9000);  // 1 free block, then 2 evictions: the system prompt's
                Equal(0u, CachedOf(e, SystemPrompt), "decayed");
                Stats s = CheckSums(e);
                Equal(0UL, s.NumEvictionsHighest, "highest evictions");
                Equal(s.NumEvictions, s.NumEvictionsNormal, "decayed blocks are evicted as normal ones");
            }
        }
        finally
        {
            Environment.SetEnvironmentVariable("PKV_TEST_CLOCK_MS", null);
        }
    }
}
