// KV transfers between engines (since 0.12): a producer's holds (Engine.Hold, HoldEnd, a
// request's HoldOnFinish, the timeout, MaxHeldBlocks) and a consumer's remote fills (a request's
// NumRemoteTokens, Engine.DrainReceiving, ReceiveEnd): the "transport" copies the producer's
// segments (Engine.SeqSegments, SeqStateSegment) into the consumer's with Buffer.MemoryCopy, and
// the step that runs on computes what the producer computed. Done, failed and failed-and-finished
// fills, a recurrent state moved with its sequence, and the refusals. As
// tests/unit/test_transfers.c.
using System;
using System.Collections.Generic;
using System.Linq;
using Pkv;

static partial class Tests
{
    const int XLayers = 2, XQHeads = 4, XKvHeads = 2, XDim = 8, XBlock = 4;
    const int XRow = XKvHeads * XDim, XQRow = XQHeads * XDim;

    static EngineParams XferParams(uint numBlocks)
    {
        var p = EngineParams.Defaults();
        p.NumLayers = XLayers; p.NumQHeads = XQHeads; p.NumKvHeads = XKvHeads; p.HeadDim = XDim;
        p.DType = DType.F32; p.BlockSize = XBlock; p.NumBlocks = numBlocks;
        p.Device = Device.Cpu; p.NumThreads = 1;
        return p;
    }

    static int[] XferPrompt(int n, int first = 300) { return Enumerable.Range(first, n).ToArray(); }

    // Runs every layer of batch b with values of each token's position and layer only (the same on
    // every engine, as test_transfers.c's qkv), so two engines computing one prompt write the same
    // KV and get the same outputs. Returns the last token's output of each layer ([layers][q row]).
    static float[] XferRun(Batch b)
    {
        int n = (int)b.NumTokens;
        int[] pos = b.Positions();
        var q = new float[n * XQRow];
        var k = new float[n * XRow];
        var v = new float[n * XRow];
        var output = new float[n * XQRow];
        var last = new float[XLayers * XQRow];
        for (int l = 0; l < XLayers; l++)
        {
            for (int t = 0; t < n; t++)
            {
                for (int i = 0; i < XQRow; i++) q[t * XQRow + i] = 0.01f * ((i + pos[t] + l) % 13);
                for (int i = 0; i < XRow; i++)
                {
                    float x = ((pos[t] * 7 + l * 3 + i) % 17) * 0.125f - 1.0f;
                    k[t * XRow + i] = x;
                    v[t * XRow + i] = -0.5f * x;
                }
            }
            b.Attention((uint)l, q, k, v, output);
            Array.Copy(output, (n - 1) * XQRow, last, l * XQRow, XQRow);
        }
        return last;
    }

    // An Allocate sequence of tokens, computed in one batch; last: its last token's outputs.
    static Sequence XferComputed(Engine e, int[] tokens, out float[] last)
    {
        Sequence s = e.Allocate(tokens);
        using (Batch b = e.BeginBatch(new[] { s }))
        {
            last = XferRun(b);
            b.End();
        }
        return s;
    }

    static Sequence XferComputed(Engine e, int[] tokens)
    {
        float[] last;
        return XferComputed(e, tokens, out last);
    }

    static void CloseTo(float[] want, float[] got, string what)
    {
        Equal(want.Length, got.Length, what + ": length");
        for (int i = 0; i < want.Length; i++)
            Assert(Math.Abs(want[i] - got[i]) <= 1e-5f * (1 + Math.Abs(want[i])),
                   what + ": [" + i + "] want " + want[i] + ", got " + got[i]);
    }

    static RequestParams XferRequest(uint numRemoteTokens = 0, bool hold = false)
    {
        RequestParams rp = RequestParams.Defaults();
        rp.MaxNewTokens = 1;
        rp.NumRemoteTokens = numRemoteTokens;
        rp.HoldOnFinish = hold ? 1u : 0u;
        return rp;
    }

    static unsafe void XferCopy(Segment from, Segment to)
    {
        Equal(from.Bytes, to.Bytes, "segment bytes");
        Buffer.MemoryCopy((void*)(long)from.Address.Value, (void*)(long)to.Address.Value,
                          (long)to.Bytes, (long)from.Bytes);
    }

    // The transport: producer sequence ps's blocks first .. first + n - 1 into consumer sequence
    // cs's same blocks, segment by segment, and its state working slot (Bytes 0 without state
    // layers: nothing). Returns the bytes moved.
    static ulong XferMove(Engine p, Sequence ps, Engine c, Sequence cs, uint first, uint n)
    {
        Assert(p.LayoutFingerprint(0).SequenceEqual(c.LayoutFingerprint(0)), "one layout");
        Segment[] from = p.SeqSegments(0, ps, first, n), to = c.SeqSegments(0, cs, first, n);
        Equal(from.Length, to.Length, "segments");
        ulong moved = 0;
        for (int i = 0; i < to.Length; i++)
        {
            XferCopy(from[i], to[i]);
            moved += to[i].Bytes;
        }
        Segment sf = p.SeqStateSegment(0, ps), st = c.SeqStateSegment(0, cs);
        Equal(sf.Bytes, st.Bytes, "state bytes");
        if (!st.Address.IsZero) XferCopy(sf, st);
        return moved + st.Bytes;
    }

    // Holding an Allocate sequence by hand: its bytes stay readable, nothing else is allowed, its
    // prefix is still shared; HoldEnd Done and Failed counted apart.
    static void HoldASequence()
    {
        using (var e = new Engine(XferParams(32)))
        {
            int[] t = XferPrompt(10, 100);
            Sequence s = XferComputed(e, t);
            Stats before = e.Stats();
            e.Hold(s, Engine.NoTimeout);
            SeqInfo i = s.Info();
            Equal(TransferState.Holding, i.TransferState, "held");
            Equal(Tier.Device, i.Tier, "its KV stays in the pool");
            Stats st = e.Stats();
            Equal(1ul, st.NumHeldSeqs, "held seqs");
            Equal(3ul, st.NumHeldBlocks, "held blocks");
            Equal(before.NumUsedBlocks, st.NumUsedBlocks, "nothing moved");
            Equal(3 * XLayers * 2, e.SeqSegments(0, s, 0, 3).Length, "its segments");
            Throws(Status.State, () => s.Release());
            Throws(Status.State, () => s.Append(1));
            Throws(Status.State, () => e.Hold(s));
            Throws(Status.State, () => e.BeginBatch(new[] { s }));
            Throws(Status.InvalidArgument, () => e.HoldEnd(s, TransferOutcome.FailedFinish));
            Throws(Status.InvalidArgument, () => e.HoldEnd(s, (TransferOutcome)7));
            e.Check();
            Sequence other = e.Allocate(t);
            Equal(8u, other.NumCachedTokens, "its sealed blocks stay cached while held");
            other.Release();
            e.HoldEnd(s, TransferOutcome.Done);
            i = s.Info();
            Equal(TransferState.None, i.TransferState, "hold ended");
            Equal(Tier.None, i.Tier, "finished: it holds nothing");
            st = e.Stats();
            Equal(0ul, st.NumHeldSeqs, "held seqs after");
            Equal(0ul, st.NumHeldBlocks, "held blocks after");
            Equal(1ul, st.NumHoldsDone, "holds done");
            Equal(0ul, st.NumUsedBlocks, "used blocks after");
            Throws(Status.State, () => e.HoldEnd(s, TransferOutcome.Done));  // ended once
            Throws(Status.State, () => e.SeqSegments(0, s, 0, 1));
            s.Release();
            s = XferComputed(e, t);
            e.Hold(s);  // the default timeout
            e.HoldEnd(s, TransferOutcome.Failed);
            st = e.Stats();
            Equal(1ul, st.NumHoldsFailed, "holds failed");
            Equal(1ul, st.NumHoldsDone, "holds done, still");
            s.Release();
            e.Check();
        }
    }

    // A hold ends by its timeout on the engine's clock (DebugFlags.TestClock: this process's
    // PKV_TEST_CLOCK_MS): 0 is the default 480 s, NoTimeout never.
    static void HoldTimesOut()
    {
        Environment.SetEnvironmentVariable("PKV_TEST_CLOCK_MS", "1000");
        try
        {
            EngineParams p = XferParams(32);
            p.DebugFlags = DebugFlags.TestClock;
            using (var e = new Engine(p))
            {
                int[] t = XferPrompt(10, 100);
                Sequence a = XferComputed(e, t), b = XferComputed(e, t.Skip(1).ToArray());
                Sequence c = XferComputed(e, t.Skip(2).ToArray());
                e.Hold(a, 500);  // until 1500
                e.Hold(b, 0);  // until 1000 + Constants.TransferTimeoutDefaultMs
                e.Hold(c, Engine.NoTimeout);
                Environment.SetEnvironmentVariable("PKV_TEST_CLOCK_MS", "1499");
                Equal(3ul, e.Stats().NumHeldSeqs, "held until 1500");
                Environment.SetEnvironmentVariable("PKV_TEST_CLOCK_MS", "1500");
                Stats st = e.Stats();  // any call reads the clock
                Equal(2ul, st.NumHeldSeqs, "a timed out");
                Equal(1ul, st.NumHoldsTimedOut, "timed out");
                Equal(TransferState.None, a.Info().TransferState, "a's hold");
                Throws(Status.State, () => e.HoldEnd(a, TransferOutcome.Done));  // too late
                ulong end = 1000 + (ulong)Constants.TransferTimeoutDefaultMs;
                Environment.SetEnvironmentVariable("PKV_TEST_CLOCK_MS", (end - 1).ToString());
                Equal(2ul, e.Stats().NumHeldSeqs, "b held until the default timeout");
                Environment.SetEnvironmentVariable("PKV_TEST_CLOCK_MS", end.ToString());
                Equal(1ul, e.Stats().NumHeldSeqs, "b timed out");
                Environment.SetEnvironmentVariable("PKV_TEST_CLOCK_MS", "999999999");
                st = e.Stats();
                Equal(1ul, st.NumHeldSeqs, "c never times out");
                Equal(2ul, st.NumHoldsTimedOut, "timed out, both");
                a.Release();
                b.Release();
                e.HoldEnd(c, TransferOutcome.Done);
                c.Release();
                Equal(0ul, e.Stats().NumUsedBlocks, "all given back");
                e.Check();
            }
        }
        finally
        {
            Environment.SetEnvironmentVariable("PKV_TEST_CLOCK_MS", null);
        }
    }

    // A request of HoldOnFinish finishes and is listed as any, its blocks held when they fit
    // MaxHeldBlocks, else it finishes without a hold (NumHoldsRefused).
    static void HoldOnFinishOfARequest()
    {
        EngineParams p = XferParams(32);
        p.MaxHeldBlocks = 5;
        using (var e = new Engine(p))
        {
            Equal(5u, e.Params.MaxHeldBlocks, "max held blocks");
            int[] t = XferPrompt(10, 100);
            Sequence r = e.Submit(t, XferRequest(0, true)), plain = e.Submit(t, XferRequest());
            // 5 blocks: past the bound once r holds 3
            Sequence big = e.Submit(XferPrompt(20, 500), XferRequest(0, true));
            var finished = new List<ulong>();
            int steps = 0;
            for (Batch b; (b = e.Step()) != null; )
            {
                Assert(++steps < 10, "the scheduler does not finish");
                XferRun(b);
                b.Commit(new[] { 1, 2, 3 });
                finished.AddRange(e.DrainFinished());
                e.Check();
            }
            Equal(3, finished.Count, "finished");
            SeqInfo i = r.Info();
            Equal(TransferState.Holding, i.TransferState, "r holds");
            Equal(FinishReason.Length, i.FinishReason, "r finished");
            Equal(11u, i.NumTokens, "r's tokens");
            Equal(10u, i.NumComputedTokens, "r's computed tokens");
            Equal(TransferState.None, plain.Info().TransferState, "plain holds nothing");
            Equal(TransferState.None, big.Info().TransferState, "big refused: the bound");
            Stats st = e.Stats();
            Equal(1ul, st.NumHoldsRefused, "holds refused");
            Equal(3ul, st.NumHeldBlocks, "held blocks");
            Equal(3ul, st.NumFinishedRequests, "finished requests");
            Equal(3 * XLayers * 2, e.SeqSegments(0, r, 0, 3).Length, "r's segments");
            Throws(Status.State, () => r.Release());
            e.HoldEnd(r, TransferOutcome.Done);
            foreach (Sequence s in new[] { r, plain, big }) s.Release();
            Equal(0ul, e.Stats().NumUsedBlocks, "all given back");
            e.Check();
        }
    }

    // A producer request of HoldOnFinish computes prompt and holds it; the consumer's request of
    // NumRemoteTokens remote receives them (after a local prefix hit of preload tokens' whole
    // blocks), the producer's segments copied into its own; then its step computes the rest, and
    // gets the producer's output.
    static void XferFill(int n, uint remote, int preload)
    {
        using (var p = new Engine(XferParams(64)))
        using (var c = new Engine(XferParams(64)))
        {
            int[] prompt = XferPrompt(n);
            Sequence ps = p.Submit(prompt, XferRequest(0, true));
            float[] want;
            using (Batch b = p.Step())
            {
                Equal(1u, b.NumSeqs, "the producer's step");
                want = XferRun(b);
                b.Commit(new[] { 7 });
            }
            Assert(p.DrainFinished().SequenceEqual(new[] { ps.Id }), "the producer's request");
            Equal(TransferState.Holding, ps.Info().TransferState, "held when it finished");
            c.Allocate(XferPrompt(8, 900));  // the consumer's blocks at other ids
            uint hit = 0;
            if (preload > 0)
            {
                XferComputed(c, prompt.Take(preload).ToArray()).Release();
                hit = (uint)(preload / XBlock * XBlock);
            }
            Sequence cs = c.Submit(prompt, XferRequest(remote));
            Equal(null, c.Step(), "nothing to run: it receives");
            Assert(c.DrainReceiving().SequenceEqual(new[] { cs.Id }), "receiving");
            Equal(0, c.DrainReceiving().Length, "listed once");
            SeqInfo i = cs.Info();
            Equal(TransferState.Receiving, i.TransferState, "receiving");
            Equal(hit, i.NumComputedTokens, "its local hit");
            uint first = i.RemoteFirstBlock;
            Equal(hit / XBlock, first, "first remote block");
            uint blocks = (remote + XBlock - 1) / XBlock - hit / XBlock;
            Equal(blocks, i.RemoteNumBlocks, "remote blocks");
            Equal(remote, i.NumRemoteTokens, "remote tokens");
            Stats st = c.Stats();
            Equal(1ul, st.NumReceivingRequests, "receiving requests");
            Equal((ulong)blocks, st.NumReceivingBlocks, "receiving blocks");
            Throws(Status.State, () => cs.Release());
            Equal(null, c.Step(), "still receiving: never run");
            c.Check();
            Segment[] from = p.SeqSegments(0, ps, first, blocks);
            Segment[] to = c.SeqSegments(0, cs, first, blocks);
            Assert(!SegRead(from[0]).SequenceEqual(SegRead(to[0])),
                   "the consumer has the KV already");
            Assert(XferMove(p, ps, c, cs, first, blocks) > 0, "bytes moved");
            c.ReceiveEnd(cs, TransferOutcome.Done);
            i = cs.Info();
            Equal(TransferState.None, i.TransferState, "received");
            Equal(remote, i.NumComputedTokens, "computed: the remote tokens");
            st = c.Stats();
            Equal(1ul, st.NumReceivesDone, "receives done");
            Equal((ulong)(remote - hit), st.ReceivedTokens, "received tokens");
            Equal(0ul, st.NumReceivingRequests, "receiving requests after");
            c.Check();
            // the received whole blocks are sealed into the prefix cache, as if computed
            uint cached;
            c.AllocateQuery(prompt, out cached);
            Equal(Math.Min(remote / XBlock, (uint)(n - 1) / XBlock) * XBlock, cached, "cached");
            using (Batch b = c.Step())
            {
                Assert(b != null && b.NumSeqs == 1 && b.SeqIds()[0] == cs.Id,
                       "the consumer's step");
                Assert(b.Positions().SequenceEqual(Enumerable.Range((int)remote, n - (int)remote)),
                       "it computes the rest of its prompt");
                CloseTo(want, XferRun(b), "the consumer's output");
                Segment[] now = c.SeqSegments(0, cs, first, blocks);
                for (int s = 0; s < now.Length; s++)
                    Assert(SegRead(now[s]).SequenceEqual(SegRead(from[s])),
                           "received segment " + s);
                b.Commit(new[] { 7 });
            }
            Assert(c.DrainFinished().SequenceEqual(new[] { cs.Id }), "the consumer's request");
            Equal(FinishReason.Length, cs.Info().FinishReason, "finished");
            cs.Release();
            p.HoldEnd(ps, TransferOutcome.Done);
            ps.Release();
            p.Check();
            c.Check();
        }
    }

    static void RemoteFillBetweenTwoEngines()
    {
        XferFill(10, 9, 0);  // a partial last block
        XferFill(13, 12, 0);  // whole blocks
        XferFill(13, 12, 6);  // a local hit of one block first
    }

    // FAILED: nothing the transfer wrote is used, the request computes its prompt itself (and
    // gets the same output); FAILED_FINISH: it finishes, FinishReason.TransferFailed.
    static void FailedFillComputesItself()
    {
        using (var p = new Engine(XferParams(64)))
        using (var c = new Engine(XferParams(64)))
        {
            int[] prompt = XferPrompt(13);
            float[] want;
            Sequence ps = XferComputed(p, prompt, out want);
            p.Hold(ps, Engine.NoTimeout);
            Sequence cs = c.Submit(prompt, XferRequest(12));
            Equal(null, c.Step(), "receiving");
            Assert(c.DrainReceiving().SequenceEqual(new[] { cs.Id }), "receiving listed");
            // half the bytes arrive, then the peer is gone
            Assert(XferMove(p, ps, c, cs, 0, 1) > 0, "bytes moved");
            Stats before = c.Stats();
            c.ReceiveEnd(cs, TransferOutcome.Failed);
            Stats st = c.Stats();
            Equal(1ul, st.NumReceivesFailed, "receives failed");
            Equal(before.NumPrefixNodes, st.NumPrefixNodes, "nothing sealed");
            Equal(0ul, st.NumUsedBlocks, "its blocks given back");
            uint cached;
            c.AllocateQuery(prompt, out cached);
            Equal(0u, cached, "nothing cached");
            SeqInfo i = cs.Info();
            Equal(TransferState.None, i.TransferState, "not receiving");
            Assert(i.IsPreempted, "preempted: it waits to be admitted again");
            c.Check();
            using (Batch b = c.Step())
            {
                Assert(b != null && b.NumSeqs == 1 && b.SeqIds()[0] == cs.Id, "its own step");
                Equal(13u, b.NumTokens, "it computes its whole prompt");
                CloseTo(want, XferRun(b), "the output computed here");
                b.Commit(new[] { 7 });
            }
            Equal(0ul, c.Stats().NumReceivesDone, "receives done");
            Assert(c.DrainFinished().SequenceEqual(new[] { cs.Id }), "it finished");
            Sequence cs2 = c.Submit(prompt.Skip(1).ToArray(), XferRequest(11));
            Equal(null, c.Step(), "cs2 receives");
            Equal(TransferState.Receiving, cs2.Info().TransferState, "cs2 receiving");
            c.ReceiveEnd(cs2, TransferOutcome.FailedFinish);
            i = cs2.Info();
            Equal(FinishReason.TransferFailed, i.FinishReason, "finish reason");
            Equal(Tier.None, i.Tier, "it holds nothing");
            Equal(TransferState.None, i.TransferState, "not receiving");
            Assert(c.DrainFinished().SequenceEqual(new[] { cs2.Id }), "listed as finished");
            Equal(2ul, c.Stats().NumReceivesFailed, "receives failed, both");
            cs.Release();
            cs2.Release();
            c.Check();
            p.HoldEnd(ps, TransferOutcome.Failed);
            ps.Release();
        }
    }

    // With state layers the transport moves the sequence's state working slot too
    // (SeqStateSegment): the producer's bytes are in the consumer's slot the step reads.
    static unsafe void StateMovesWithItsSequence()
    {
        using (var p = new Engine(Hybrid()))
        using (var c = new Engine(Hybrid()))
        {
            int[] prompt = XferPrompt(9);
            Sequence ps = p.Allocate(prompt);
            Segment pseg;
            using (Batch b = p.BeginBatch(new[] { ps }))
            {
                int slot = b.StateSlots()[0];
                pseg = p.SeqStateSegment(0, ps);
                PoolInfo pool = p.PoolInfo();
                Equal(SlotBytes, pseg.Bytes, "a slot");
                Equal(pool.StatePool.Value + (ulong)slot * SlotBytes, pseg.Address.Value,
                      "its working slot");
                byte* s = (byte*)(long)pseg.Address.Value;
                // "the recurrence"
                for (ulong j = 0; j < pseg.Bytes; j++) s[j] = (byte)(j * 7 + 3);
                b.End();  // the host ran every layer itself
            }
            p.Hold(ps, Engine.NoTimeout);
            Equal(pseg.Address, p.SeqStateSegment(0, ps).Address, "held: the same slot");
            Sequence cs = c.Submit(prompt, XferRequest(8));
            Equal(null, c.Step(), "receiving");
            Assert(c.DrainReceiving().SequenceEqual(new[] { cs.Id }), "receiving listed");
            SeqInfo i = cs.Info();
            Segment cseg = c.SeqStateSegment(0, cs);
            Equal(SlotBytes, cseg.Bytes, "the consumer's slot");
            Assert(!SegRead(cseg).SequenceEqual(SegRead(pseg)),
                   "the consumer has the state already");
            Assert(XferMove(p, ps, c, cs, i.RemoteFirstBlock, i.RemoteNumBlocks) > SlotBytes,
                   "blocks and state moved");
            c.ReceiveEnd(cs, TransferOutcome.Done);
            using (Batch b = c.Step())
            {
                Assert(b != null && b.NumSeqs == 1 && b.NumTokens == 1, "the last prompt token");
                ulong slotAt = c.PoolInfo().StatePool.Value + (ulong)b.StateSlots()[0] * SlotBytes;
                Equal(cseg.Address.Value, slotAt, "the step's slot");
                Assert(SegRead(cseg).SequenceEqual(SegRead(pseg)), "the producer's state");
                b.Commit(new[] { 7 });
            }
            Assert(c.DrainFinished().SequenceEqual(new[] { cs.Id }), "finished");
            Throws(Status.State, () => c.SeqStateSegment(0, cs));  // finished: no slot
            cs.Release();
            p.HoldEnd(ps, TransferOutcome.Done);
            Throws(Status.State, () => p.SeqStateSegment(0, ps));
            ps.Release();
            p.Check();
            c.Check();
        }
    }

    static void TransferRefusals()
    {
        using (var c = new Engine(XferParams(64)))
        {
            int[] t = XferPrompt(13);
            RequestParams rp = XferRequest(13);  // the last prompt token is computed here
            Throws(Status.InvalidArgument, () => c.Submit(t, rp));
            rp.NumRemoteTokens = 14;
            Throws(Status.InvalidArgument, () => c.Submit(t, rp));
            rp.NumRemoteTokens = 12;
            rp.HoldOnFinish = 2;
            Throws(Status.InvalidArgument, () => c.Submit(t, rp));
            rp.HoldOnFinish = 0;
            rp.Reserved1 = 1;
            Throws(Status.InvalidArgument, () => c.Submit(t, rp));
            Equal(0ul, c.Stats().NumWaitingRequests, "nothing queued");
            Equal(0, c.DrainReceiving().Length, "none receiving");
            Throws(Status.NotFound, () => c.ReceiveEnd(c.Sequence(42), TransferOutcome.Done));
            Sequence plain = c.Allocate(t);
            Throws(Status.State, () => c.ReceiveEnd(plain, TransferOutcome.Done));
            Throws(Status.InvalidArgument, () => c.ReceiveEnd(plain, (TransferOutcome)3));
            Segment none = c.SeqStateSegment(0, plain);  // no state layers: nothing to move
            Equal(NativeAddress.Zero, none.Address, "no state");
            Equal(0ul, none.Bytes, "no state bytes");
            Throws(Status.InvalidArgument, () => c.SeqStateSegment(1, plain));
            Throws(Status.NotFound, () => c.SeqStateSegment(0, c.Sequence(42)));
            Throws(Status.NotFound, () => c.Hold(c.Sequence(99)));
            Throws(Status.NotFound, () => c.HoldEnd(c.Sequence(99), TransferOutcome.Done));
            Throws(Status.State, () => c.Hold(plain));  // not computed
            Throws(Status.State, () => c.HoldEnd(plain, TransferOutcome.Done));  // never held
            using (Batch b = c.BeginBatch(new[] { plain }))
            {
                Throws(Status.State, () => c.Hold(plain));  // in the open batch
                b.End();
            }
            plain.Preempt();
            Throws(Status.State, () => c.Hold(plain));  // preempted
            Equal(0ul, c.SeqStateSegment(0, plain).Bytes, "no state layers: none, preempted too");
            plain.Release();
            Sequence r = c.Submit(t, XferRequest());
            Throws(Status.State, () => c.Hold(r));  // a request holds when it finishes
            Throws<ArgumentNullException>(() => c.Hold(null));
            Throws<ArgumentNullException>(() => c.HoldEnd(null, TransferOutcome.Done));
            Throws<ArgumentNullException>(() => c.ReceiveEnd(null, TransferOutcome.Done));
            Throws<ArgumentNullException>(() => c.SeqStateSegment(0, null));
            Equal(0ul, c.Stats().NumHeldSeqs, "nothing held");
            c.Check();
        }
        // the bound: at most the pool's blocks; at 2, a sequence of 3 is refused
        EngineParams p = XferParams(32);
        p.MaxHeldBlocks = 33;
        Throws(Status.InvalidArgument, () => new Engine(p));
        p.MaxHeldBlocks = 2;
        using (var e = new Engine(p))
        {
            int[] t = XferPrompt(10, 100);
            Sequence s = XferComputed(e, t);  // 3 blocks
            Throws(Status.NoSpace, () => e.Hold(s));
            Equal(TransferState.None, s.Info().TransferState, "nothing changed");
            Sequence small = XferComputed(e, t.Take(6).ToArray());  // 2 blocks, 1 shared with s
            e.Hold(small);
            Equal(2ul, e.Stats().NumHeldBlocks, "held blocks");
            e.Check();
        }  // a hold ends with its engine
        // a timeout on one rank of several would let the ranks' clocks disagree
        p = XferParams(32);
        p.TpSize = 2;
        using (var e = new Engine(p))
        {
            int[] t = XferPrompt(10, 100);
            Sequence s = e.Allocate(t);
            using (Batch b = e.BeginBatch(new[] { s }))
            {
                var q = new float[b.NumTokens * XQRow / 2];
                var kv = new float[b.NumTokens * XRow / 2];
                for (uint l = 0; l < XLayers; l++) b.Attention(l, q, kv, kv, new float[q.Length]);
                b.End();
            }
            Throws(Status.Unsupported, () => e.Hold(s));
            Throws(Status.Unsupported, () => e.Hold(s, 1000));
            e.Hold(s, Engine.NoTimeout);
            RequestParams rq = XferRequest(0, true);
            Throws(Status.Unsupported, () => e.Submit(t, rq));
            rq.HoldTimeoutMs = Engine.NoTimeout;
            e.Submit(t, rq);
            e.Check();
        }
    }
}
