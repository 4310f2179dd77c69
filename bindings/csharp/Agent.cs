// The UCX transfer agent (pkv 0.12, DESIGN.md §10): pkv's own transport for KV transfers between
// engines in different processes (Transfers.cs: holds and remote fills). Each engine (rank) that
// takes part has an Agent; a consumer's agent connects to a producer's by address (Agent.Connect,
// the layout fingerprints checked at the handshake) and pulls a held sequence of the producer
// (Engine.Hold, RequestParams.HoldOnFinish) into one of its receiving requests
// (RequestParams.NumRemoteTokens, Engine.DrainReceiving) with one-sided reads (Agent.Pull), then
// ends both sides: ReceiveEnd Done here, HoldEnd Done there. Nothing moves but in Connect and
// Progress: both sides call Progress in their loops.
using System;
using System.Collections.Generic;
using System.Text;

namespace Pkv
{
    /// <summary>An agent's parameters (pkv_agent_params): a new one holds pkv's defaults
    /// (pkv_agent_params_init). pkv copies them when the agent is created.</summary>
    public sealed unsafe class AgentConfig
    {
        /// <summary>The engine's rank whose pool the agent moves (default 0).</summary>
        public uint Rank;
        /// <summary>The "ipv4:port" the agent accepts peers on (port 0: a free one,
        /// Agent.Address says which); null: none, it only connects. Default
        /// "127.0.0.1:0".</summary>
        public string ListenAddress;
        /// <summary>A handshake or a pull taking longer fails (default 30000).</summary>
        public uint TimeoutMs;
        /// <summary>A failed pull's receiving request: TransferOutcome.Failed (it computes its
        /// prompt itself; the default) or FailedFinish (it finishes,
        /// FinishReason.TransferFailed).</summary>
        public TransferOutcome OnFailure;
        /// <summary>Reads in flight at once, over all pulls (at least one segment's are; default
        /// 64 MiB).</summary>
        public ulong MaxInflightBytes;

        public AgentConfig()
        {
            var d = new AgentParams();
            Native.Check(Native.pkv_agent_params_init(&d, (uint)sizeof(AgentParams)));
            Rank = d.Rank;
            ListenAddress = d.ListenAddress == IntPtr.Zero ? null : Native.Text(d.ListenAddress);
            TimeoutMs = d.TimeoutMs;
            OnFailure = (TransferOutcome)d.OnFailure;
            MaxInflightBytes = d.MaxInflightBytes;
        }

        public override string ToString()
        {
            return string.Format("AgentConfig(rank {0}, listen {1}, timeout {2} ms, on failure " +
                                 "{3}, {4} bytes in flight)", Rank, ListenAddress ?? "none",
                                 TimeoutMs, OnFailure, MaxInflightBytes);
        }
    }

    public partial struct AgentCompletion
    {
        /// <summary>Done, or how it failed (AgentConfig.OnFailure for a pull of this agent's;
        /// Failed for one served).</summary>
        public TransferOutcome TransferOutcome { get { return (TransferOutcome)Outcome; } }
        /// <summary>True: Seq is this engine's held sequence a peer pulled (its hold has ended);
        /// false: Seq is this agent's receiving request.</summary>
        public bool IsServed { get { return Served != 0; } }

        public override string ToString()
        {
            return string.Format("AgentCompletion(seq {0}, {1}{2}, {3} bytes)", Seq,
                                 TransferOutcome, IsServed ? ", served" : "", Bytes);
        }
    }

    /// <summary>An engine's UCX transfer agent (pkv_agent). Dispose it (using); a disposed agent
    /// refuses every call with ObjectDisposedException. Engine.Dispose disposes the engine's
    /// agents first; an agent holds its engine's handle, so the engine is never destroyed under
    /// it (not even by finalizers running in any order). Calls may come from several threads: pkv
    /// serializes the calls on an agent, and the agent takes its engine's lock itself, so one
    /// thread may run an agent's Progress loop while others use the engine (or Connect through
    /// another agent).</summary>
    public sealed unsafe class Agent : IDisposable
    {
        readonly AgentHandle handle;

        /// <summary>The agent's engine.</summary>
        public Engine Engine { get; private set; }

        /// <summary>An agent for rank config.Rank of <paramref name="engine"/> (pkv_agent_create;
        /// config null: the defaults), listening on config.ListenAddress unless it is null. It
        /// registers the rank's pool (and host tier and state slots) with UCX once.
        /// PkvException InvalidArgument (a Rank not below the engine's ranks, an address that is
        /// not ipv4:port, an OnFailure other than Failed or FailedFinish, MaxInflightBytes 0);
        /// Unsupported (a libpkv built without UCX, a CUDA engine); Device (UCX failed: the
        /// address cannot be listened on, memory cannot be registered; the message has
        /// UCX's).</summary>
        public Agent(Engine engine, AgentConfig config = null)
        {
            if (engine == null) throw new ArgumentNullException("engine");
            AgentConfig c = config ?? new AgentConfig();
            byte[] listen = Bytes(c.ListenAddress, "config.ListenAddress");
            var p = new AgentParams();
            Native.Check(Native.pkv_agent_params_init(&p, (uint)sizeof(AgentParams)));
            p.Rank = c.Rank;
            p.TimeoutMs = c.TimeoutMs;
            p.OnFailure = (uint)c.OnFailure;
            p.MaxInflightBytes = c.MaxInflightBytes;
            lock (engine.Gate)  // no Engine.Dispose between the create and the agent's listing
            {
                EngineHandle e = engine.Handle;
                Status created;
                fixed (byte* l = listen)
                {
                    p.ListenAddress = (IntPtr)l;
                    created = Native.pkv_agent_create(e, &p, out handle);
                }
                if (created != Status.Ok)
                {
                    handle.Dispose();
                    Native.Check(created);
                }
                handle.HoldEngine(e);
                engine.AddAgent(handle);
            }
            Engine = engine;
        }

        // s as a NUL-terminated string; null stays null.
        static byte[] Bytes(string s, string what)
        {
            if (s == null) return null;
            if (s.IndexOf('\0') >= 0)
                throw new ArgumentException(what + " holds a NUL character", what);
            byte[] b = Encoding.UTF8.GetBytes(s);
            Array.Resize(ref b, b.Length + 1);
            return b;
        }

        public bool IsDisposed { get { return handle.IsClosed; } }

        /// <summary>Ends the agent (pkv_agent_destroy): every pull in flight fails first (its
        /// receiving request ends with AgentConfig.OnFailure, a served hold Failed, once its reads
        /// are cancelled), then its peers are disconnected, the live ones gracefully: keep them
        /// progressed meanwhile (in one process, another thread's Progress loop). Idempotent; a
        /// call in flight on another thread finishes first.</summary>
        public void Dispose() { handle.Dispose(); }

        AgentHandle Handle
        {
            get
            {
                if (handle.IsClosed) throw new ObjectDisposedException("Pkv.Agent");
                return handle;
            }
        }

        /// <summary>The address the agent listens on, "ipv4:port" (pkv_agent_address), its port
        /// resolved when AgentConfig.ListenAddress asked for a free one: what a peer's Connect
        /// takes. PkvException State (it does not listen: ListenAddress null).</summary>
        public string Address()
        {
            var buf = new byte[64];
            fixed (byte* b = buf)
                Native.Check(Native.pkv_agent_address(Handle, b, (uint)buf.Length));
            int n = Array.IndexOf(buf, (byte)0);
            return Encoding.UTF8.GetString(buf, 0, n < 0 ? buf.Length : n);
        }

        /// <summary>Connects to the agent listening at <paramref name="address"/> ("ipv4:port", a
        /// peer's Address) and waits for the handshake, up to AgentConfig.TimeoutMs
        /// (pkv_agent_connect); returns the peer's id for Pull. The listening agent must be
        /// progressed meanwhile (in another process, or another thread's Progress loop). A peer
        /// whose layout fingerprint differs is refused on both sides
        /// (AgentStats.FingerprintMismatches). PkvException InvalidArgument (an address not
        /// ipv4:port; the fingerprints differ: the message says where); Device (no connection:
        /// nobody listens there, the handshake timed out, UCX failed).</summary>
        public uint Connect(string address)
        {
            if (address == null) throw new ArgumentNullException("address");
            byte[] a = Bytes(address, "address");
            uint peer;
            fixed (byte* p = a) Native.Check(Native.pkv_agent_connect(Handle, p, &peer));
            return peer;
        }

        /// <summary>Starts pulling peer <paramref name="peer"/>'s held sequence
        /// <paramref name="remoteSeq"/> (an id of the peer's engine) into
        /// <paramref name="local"/>, a receiving request of the agent's engine
        /// (Engine.DrainReceiving): its blocks SeqInfo.RemoteFirstBlock .. + RemoteNumBlocks - 1,
        /// and with state layers its state (pkv_agent_pull). It ends in Progress, which reports
        /// it; a pull that cannot finish (the peer gone, remoteSeq not held, the timeout) ends
        /// local with AgentConfig.OnFailure and the hold Failed, nothing half-written used.
        /// ArgumentException (local of another engine); PkvException InvalidArgument (no peer
        /// <paramref name="peer"/>); NotFound (no sequence local); State (local is not
        /// receiving, or a pull into it is in flight; the peer is gone).</summary>
        public void Pull(uint peer, ulong remoteSeq, Sequence local)
        {
            if (local == null) throw new ArgumentNullException("local");
            if (local.Engine != Engine)
                throw new ArgumentException("local (sequence " + local.Id + ") is not a sequence " +
                                            "of the agent's engine", "local");
            Native.Check(Native.pkv_agent_pull(Handle, peer, remoteSeq, local.Id));
        }

        /// <summary>Moves things along (pkv_agent_progress): accepts peers, answers their pulls,
        /// issues and completes reads, ends pulls (Engine.ReceiveEnd / Engine.HoldEnd on the
        /// engine, under its lock) and fails those past their timeout. Waits up to
        /// <paramref name="waitMs"/> for something to happen (0: returns at once); returns the
        /// pulls that ended, served ones included (empty when none).</summary>
        public AgentCompletion[] Progress(uint waitMs = 0)
        {
            var all = new List<AgentCompletion>();
            var buf = new AgentCompletion[64];
            uint got;
            do
            {
                fixed (AgentCompletion* c = buf)
                    Native.Check(Native.pkv_agent_progress(Handle, waitMs, c, (uint)buf.Length,
                                                           &got));
                for (int i = 0; i < got; i++) all.Add(buf[i]);
                waitMs = 0;  // more wait: take them now
            } while (got == buf.Length);
            return all.ToArray();
        }

        /// <summary>The agent's counters now (pkv_agent_stats_get).</summary>
        public AgentStats Stats()
        {
            var s = new AgentStats { StructSize = (uint)sizeof(AgentStats) };
            Native.Check(Native.pkv_agent_stats_get(Handle, &s));
            return s;
        }

        public override string ToString()
        {
            return IsDisposed ? "Agent(disposed)" : "Agent(" + Stats().NumPeers + " peers)";
        }
    }

    public sealed partial class Engine
    {
        // The engine's agents, held weakly (a dropped Agent's handle is finalized, which destroys
        // it): Dispose destroys those still open before the engine. Under gate.
        readonly List<WeakReference> agents = new List<WeakReference>();

        internal void AddAgent(AgentHandle h)
        {
            agents.RemoveAll(w => !w.IsAlive);
            agents.Add(new WeakReference(h));
        }

        // Dispose's first step, under gate.
        void DisposeAgents()
        {
            foreach (WeakReference w in agents)
            {
                var h = (AgentHandle)w.Target;
                if (h != null) h.Dispose();
            }
            agents.Clear();
        }
    }
}
