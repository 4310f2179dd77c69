// The UCX transfer agent (since 0.12): two engines of this process, each with an Agent, as
// tests/agent/test_agent_procs.c's two processes. Connect waits for the listening agent's answer,
// so a thread (AgentPump) runs the producer's agent's Progress loop meanwhile. A held sequence
// pulled into a receiving request (its bytes, the step that runs on, both agents' counters, the
// producer's hold ended); a fingerprint mismatch; a pull of a sequence not held; the refusals.
// Each test is skipped (and passes) when libpkv was built without UCX (Unsupported).
using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using Pkv;

static partial class Tests
{
    static bool? agentsSupported;

    // False (and says so once) when libpkv has no UCX: pkv_agent_create is Unsupported.
    static bool AgentsSupported(string test)
    {
        if (agentsSupported == null)
        {
            using (var e = new Engine(XferParams(8)))
            {
                try
                {
                    new Agent(e).Dispose();
                    agentsSupported = true;
                }
                catch (PkvException x)
                {
                    if (x.Status != Status.Unsupported) throw;
                    agentsSupported = false;
                }
            }
        }
        if (agentsSupported == false) Console.WriteLine("skip " + test + ": libpkv without UCX");
        return agentsSupported == true;
    }

    // A thread running agent.Progress(1) until disposed, keeping the completions it reports.
    sealed class AgentPump : IDisposable
    {
        readonly Agent agent;
        readonly Thread thread;
        readonly List<AgentCompletion> seen = new List<AgentCompletion>();
        volatile bool stop;
        Exception error;

        public AgentPump(Agent a)
        {
            agent = a;
            thread = new Thread(Loop) { IsBackground = true, Name = "agent pump" };
            thread.Start();
        }

        void Loop()
        {
            try
            {
                while (!stop)
                {
                    AgentCompletion[] got = agent.Progress(1);
                    lock (seen) seen.AddRange(got);
                }
            }
            catch (Exception e) { error = e; }
        }

        public AgentCompletion[] Seen { get { lock (seen) return seen.ToArray(); } }

        // Stops the loop and rethrows what it failed with.
        public void Dispose()
        {
            stop = true;
            thread.Join();
            if (error != null) throw new Exception("the agent pump failed", error);
        }
    }

    // Progresses a until it reports a completion (at most ~20 s).
    static AgentCompletion AgentWaitOne(Agent a)
    {
        for (int i = 0; i < 2000; i++)
        {
            AgentCompletion[] got = a.Progress(10);
            if (got.Length > 0)
            {
                Equal(1, got.Length, "one completion");
                return got[0];
            }
        }
        throw new Exception("no completion");
    }

    // Progresses consumer (0 wait) until the pump has seen a completion (at most ~20 s).
    static AgentCompletion AgentWaitServed(AgentPump pump, Agent consumer)
    {
        for (int i = 0; i < 2000; i++)
        {
            AgentCompletion[] seen = pump.Seen;
            if (seen.Length > 0)
            {
                Equal(1, seen.Length, "one served completion");
                return seen[0];
            }
            Equal(0, consumer.Progress(0).Length, "nothing more ends on the consumer");
            Thread.Sleep(10);
        }
        throw new Exception("no served completion");
    }

    // Disposes consumer while producer's pump runs, and waits until producer saw it go:
    // pkv_agent_destroy closes a live peer gracefully, so that peer must be progressed meanwhile
    // (in one process: by the pump).
    static void AgentDisconnect(Agent consumer, Agent producer)
    {
        consumer.Dispose();
        for (int i = 0; i < 500 && producer.Stats().NumPeers > 0; i++) Thread.Sleep(10);
        Equal(0u, producer.Stats().NumPeers, "the producer's peers, after");
    }

    static AgentConfig AgentConnectOnly()
    {
        return new AgentConfig { ListenAddress = null };
    }

    // The receiving request of prompt on c (its first numRemote tokens to arrive), listed once.
    static Sequence AgentReceiving(Engine c, int[] prompt, uint numRemote)
    {
        Sequence cs = c.Submit(prompt, XferRequest(numRemote));
        Equal(null, c.Step(), "receiving: no batch");
        Equal(TransferState.Receiving, cs.Info().TransferState, "receiving");
        Assert(c.DrainReceiving().SequenceEqual(new[] { cs.Id }), "receiving listed");
        return cs;
    }

    // A held sequence pulled into a receiving request: Done on both sides, the producer's bytes
    // in the consumer's blocks, the step that runs on computes the producer's output, the
    // producer's hold ended (served).
    static void AgentPullBetweenTwoEngines()
    {
        if (!AgentsSupported("agent_pull_between_two_engines")) return;
        using (var p = new Engine(XferParams(64)))
        using (var c = new Engine(XferParams(64)))
        using (var pa = new Agent(p))
        using (var ca = new Agent(c, AgentConnectOnly()))
        {
            Assert(pa.Engine == p && ca.Engine == c, "the agents' engines");
            int[] prompt = XferPrompt(13);
            float[] want;
            Sequence ps = XferComputed(p, prompt, out want);
            byte[][] pbytes = p.SeqSegments(0, ps, 0, 3).Select(SegRead).ToArray();
            p.Hold(ps, Engine.NoTimeout);
            string address = pa.Address();
            Assert(address.StartsWith("127.0.0.1:") && address.Length > 10, "address " + address);
            Throws(Status.State, () => ca.Address());  // it does not listen
            AgentCompletion done, served;
            using (var pump = new AgentPump(pa))
            {
                uint peer = ca.Connect(address);
                Equal(0u, peer, "the first peer");
                Sequence cs = AgentReceiving(c, prompt, 12);
                ca.Pull(peer, ps.Id, cs);
                Throws(Status.State, () => ca.Pull(peer, ps.Id, cs));  // one at a time
                done = AgentWaitOne(ca);
                Equal(cs.Id, done.Seq, "the receiving request");
                Equal(TransferOutcome.Done, done.TransferOutcome, "pulled");
                Assert(!done.IsServed, "not served");
                Equal(3ul * XLayers * 2 * XBlock * XRow * 4, done.Bytes, "3 blocks, K and V, f32");
                AgentStats st = ca.Stats();
                Equal(1ul, st.PullsDone, "pulls done");
                Equal(0ul, st.PullsInFlight, "pulls in flight");
                Equal(0ul, st.PullsFailed, "pulls failed");
                Equal(done.Bytes, st.BytesPulled, "bytes pulled");
                Equal(1u, st.NumPeers, "peers");
                SeqInfo i = cs.Info();
                Equal(TransferState.None, i.TransferState, "received");
                Equal(12u, i.NumComputedTokens, "its remote tokens computed");
                Equal(1ul, c.Stats().NumReceivesDone, "receives done");
                byte[][] cbytes = c.SeqSegments(0, cs, 0, 3).Select(SegRead).ToArray();
                Equal(pbytes.Length, cbytes.Length, "segments");
                for (int k = 0; k < cbytes.Length; k++)
                    Assert(pbytes[k].SequenceEqual(cbytes[k]), "segment " + k + ": its bytes");
                uint cached;
                c.AllocateQuery(prompt, out cached);
                Equal(12u, cached, "the received blocks are cached");
                using (Batch b = c.Step())
                {
                    Assert(b != null && b.NumSeqs == 1 && b.SeqIds()[0] == cs.Id, "it runs on");
                    Equal(1u, b.NumTokens, "its last token only");
                    CloseTo(want, XferRun(b), "the producer's output");
                    b.Commit(new[] { 7 });
                }
                Assert(c.DrainFinished().SequenceEqual(new[] { cs.Id }), "finished");
                cs.Release();
                c.Check();
                served = AgentWaitServed(pump, ca);
                Equal(1u, pa.Stats().NumPeers, "the producer's peers");
                AgentDisconnect(ca, pa);
            }
            Equal(ps.Id, served.Seq, "the held sequence");
            Equal(TransferOutcome.Done, served.TransferOutcome, "served");
            Assert(served.IsServed, "served");
            Equal(done.Bytes, served.Bytes, "served bytes");
            AgentStats pas = pa.Stats();
            Equal(1ul, pas.ServedDone, "served done");
            Equal(0ul, pas.ServedFailed, "served failed");
            Equal(done.Bytes, pas.BytesServed, "bytes served");
            Equal(0ul, pas.PullsDone, "the producer pulled nothing");
            Equal(TransferState.None, ps.Info().TransferState, "the hold ended");
            Stats pst = p.Stats();
            Equal(1ul, pst.NumHoldsDone, "holds done");
            Equal(0ul, pst.NumHeldSeqs, "held seqs");
            ps.Release();
            p.Check();
        }
    }

    // Engines of another dtype refuse each other at the handshake: InvalidArgument, counted on
    // both sides, no peer.
    static void AgentFingerprintMismatch()
    {
        if (!AgentsSupported("agent_fingerprint_mismatch")) return;
        EngineParams bf16 = XferParams(64);
        bf16.DType = DType.Bf16;
        using (var p = new Engine(bf16))
        using (var c = new Engine(XferParams(64)))
        using (var pa = new Agent(p))
        using (var ca = new Agent(c, AgentConnectOnly()))
        {
            ulong tries = 0;
            using (new AgentPump(pa))
            {
                PkvException e = null;
                while (tries < 5)
                {
                    tries++;
                    e = null;
                    try { ca.Connect(pa.Address()); }
                    catch (PkvException x) { e = x; }
                    Assert(e != null, "connected");
                    // The listener force-closes the connection right after its answer, and now
                    // and then the reset reaches this side first (Device, "connection lost"; a
                    // race of libpkv's, reported): that try saw no answer, try again.
                    if (e.Status != Status.Device || !e.Detail.Contains("connection lost")) break;
                }
                Equal(Status.InvalidArgument, e.Status, "status: " + e.Message);
                Assert(e.Detail.Contains("fingerprints differ"), "the message: " + e.Detail);
                AgentStats st = ca.Stats();
                Equal(1ul, st.FingerprintMismatches, "fingerprint mismatches");
                Equal(0u, st.NumPeers, "no peer");
                Throws(Status.State, () => ca.Pull(0, 1, c.Sequence(1)));  // that peer is gone
                for (int k = 0; k < 500 && pa.Stats().FingerprintMismatches < tries; k++)
                    Thread.Sleep(10);
                AgentDisconnect(ca, pa);
            }
            AgentStats pst = pa.Stats();
            Equal(tries, pst.FingerprintMismatches, "refused there too (each try)");
            Equal(0u, pst.NumPeers, "no peer there");
        }
    }

    // A pull of a sequence the producer does not hold fails: the request is preempted and
    // computes its prompt itself (the same output); nothing was received.
    static void AgentPullNotHeld()
    {
        if (!AgentsSupported("agent_pull_not_held")) return;
        using (var p = new Engine(XferParams(64)))
        using (var c = new Engine(XferParams(64)))
        using (var pa = new Agent(p))
        using (var ca = new Agent(c, AgentConnectOnly()))
        {
            int[] prompt = XferPrompt(13);
            float[] want;
            Sequence ps = XferComputed(p, prompt, out want);  // computed, not held
            using (new AgentPump(pa))
            {
                uint peer = ca.Connect(pa.Address());
                Sequence cs = AgentReceiving(c, prompt, 12);
                ca.Pull(peer, ps.Id, cs);
                AgentCompletion done = AgentWaitOne(ca);
                Equal(cs.Id, done.Seq, "the receiving request");
                Equal(TransferOutcome.Failed, done.TransferOutcome, "failed (OnFailure)");
                Assert(!done.IsServed, "not served");
                AgentStats st = ca.Stats();
                Equal(1ul, st.PullsFailed, "pulls failed");
                Equal(0ul, st.PullsDone, "pulls done");
                SeqInfo i = cs.Info();
                Equal(TransferState.None, i.TransferState, "not receiving");
                Assert(i.IsPreempted, "preempted: it computes its prompt itself");
                Stats cst = c.Stats();
                Equal(1ul, cst.NumReceivesFailed, "receives failed");
                Equal(0ul, cst.NumUsedBlocks, "its blocks given back");
                c.Check();
                using (Batch b = c.Step())
                {
                    Assert(b != null && b.NumSeqs == 1 && b.SeqIds()[0] == cs.Id, "its own step");
                    Equal(13u, b.NumTokens, "its whole prompt");
                    CloseTo(want, XferRun(b), "the output computed here");
                    b.Commit(new[] { 7 });
                }
                Assert(c.DrainFinished().SequenceEqual(new[] { cs.Id }), "finished");
                cs.Release();
                AgentDisconnect(ca, pa);
            }
            Equal(0ul, pa.Stats().ServedDone, "nothing served");
            Equal(TransferState.None, ps.Info().TransferState, "never held");
            ps.Release();
            p.Check();
            c.Check();
        }
    }

    // Bad addresses and parameters, a peer that is not there, a sequence of another engine, a
    // disposed agent, and Engine.Dispose disposing its agents.
    static void AgentRefusals()
    {
        if (!AgentsSupported("agent_refusals")) return;
        var config = new AgentConfig();
        Equal("127.0.0.1:0", config.ListenAddress, "the default address");
        Equal(0u, config.Rank, "rank");
        Equal(30000u, config.TimeoutMs, "timeout");
        Equal(TransferOutcome.Failed, config.OnFailure, "on failure");
        Equal(64ul << 20, config.MaxInflightBytes, "in flight");
        using (var e = new Engine(XferParams(64)))
        using (var other = new Engine(XferParams(64)))
        {
            config.TimeoutMs = 2000;
            using (var a = new Agent(e, config))
            {
                Assert(a.Address().StartsWith("127.0.0.1:"), "listening");
                // a port nobody listens on (an agent's, gone)
                string gone;
                using (var b = new Agent(e, config)) gone = b.Address();
                Throws(Status.Device, () => a.Connect(gone));
                Throws(Status.InvalidArgument, () => a.Connect("localhost:1"));
                Throws(Status.InvalidArgument, () => a.Connect("127.0.0.1"));
                Throws(Status.InvalidArgument, () => a.Connect("127.0.0.1:99999"));
                Throws(Status.InvalidArgument, () => a.Connect(""));
                Throws<ArgumentNullException>(() => a.Connect(null));
                Throws<ArgumentException>(() => a.Connect("127.0.0.1:1\0"));
                Throws(Status.InvalidArgument, () => a.Pull(7, 1, e.Sequence(1)));  // no peer 7
                Throws<ArgumentException>(() => a.Pull(0, 1, other.Sequence(1)));
                Throws<ArgumentNullException>(() => a.Pull(0, 1, null));
                Equal(0, a.Progress().Length, "nothing to report");
                Equal(0u, a.Stats().NumPeers, "no peers");
            }
            using (var quiet = new Agent(e, AgentConnectOnly()))
                Throws(Status.State, () => quiet.Address());
            var bad = new[] {
                new AgentConfig { ListenAddress = "nowhere:1" },
                new AgentConfig { ListenAddress = "1.2.3.4" },  // no port
                new AgentConfig { OnFailure = TransferOutcome.Done },
                new AgentConfig { Rank = 1 },  // the engine has one
                new AgentConfig { MaxInflightBytes = 0 },
            };
            foreach (AgentConfig b in bad)
                Throws(Status.InvalidArgument, () => new Agent(e, b));
            Throws<ArgumentNullException>(() => new Agent(null));
            var d = new Agent(e, AgentConnectOnly());
            d.Dispose();
            d.Dispose();  // idempotent
            Assert(d.IsDisposed, "disposed");
            Throws<ObjectDisposedException>(() => d.Stats());
            Throws<ObjectDisposedException>(() => d.Progress());
            Throws<ObjectDisposedException>(() => d.Connect("127.0.0.1:1"));
            e.Check();
        }
        // Engine.Dispose disposes its agents first; a disposed engine makes none
        var e2 = new Engine(XferParams(8));
        var kept = new Agent(e2);
        AgentDropped(e2);
        GC.Collect();
        GC.WaitForPendingFinalizers();  // a dropped agent is destroyed by its finalizer
        e2.Dispose();
        Assert(kept.IsDisposed && e2.IsDisposed, "the engine's agents are disposed with it");
        Throws<ObjectDisposedException>(() => kept.Address());
        Throws<ObjectDisposedException>(() => new Agent(e2));
    }

    // An agent no one keeps (apart, so that nothing on the caller's stack refers to it).
    static void AgentDropped(Engine e) { new Agent(e).Stats(); }
}
