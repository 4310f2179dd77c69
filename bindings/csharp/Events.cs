// KV events on the wire (pkv 0.3): an engine publishes its KV events over ZeroMQ in vLLM's
// protocol (a PUB socket, msgpack KVEventBatch, an optional replay socket), so a KV-aware router
// written for vLLM hears pkv unchanged; pkv.h documents the protocol. EventPublisherConfig is
// given to new Engine(p, ..., eventPublisher), engine.EventPublisherInfo() says what it did.
using System;

namespace Pkv
{
    /// <summary>An engine's event publisher (pkv_event_publisher_params): fields left at 0 or
    /// null keep pkv's defaults; Endpoint is required. pkv copies it when the engine is
    /// created.</summary>
    public sealed class EventPublisherConfig
    {
        /// <summary>The ZeroMQ endpoint the PUB socket binds, e.g. "tcp://127.0.0.1:5557";
        /// "tcp://127.0.0.1:*" binds a free port (EventPublisherInfo().Endpoint says which).</summary>
        public string Endpoint;
        /// <summary>The ROUTER socket's that answers replay requests; null = no replay.</summary>
        public string ReplayEndpoint;
        /// <summary>Every message's first frame; null = pkv's default, "kv-events".</summary>
        public string Topic;
        /// <summary>Every batch's data_parallel_rank (default 0).</summary>
        public uint DataParallelRank;
        /// <summary>Batches kept for replay (0: PKV_DEFAULT_EVENT_REPLAY_BATCHES).</summary>
        public uint ReplayBufferBatches;
        /// <summary>Messages queued per subscriber before it loses them (ZeroMQ's SNDHWM; 0:
        /// PKV_DEFAULT_EVENT_SEND_HWM).</summary>
        public uint SendHwm;
        /// <summary>Events waiting for the publishing thread, at most (0:
        /// PKV_DEFAULT_EVENT_QUEUE_EVENTS).</summary>
        public uint MaxQueueEvents;
        /// <summary>Events of one batch, at most (0: PKV_DEFAULT_EVENT_BATCH_EVENTS).</summary>
        public uint MaxBatchEvents;
        /// <summary>How batches are encoded: EventFormat.Map (the default: msgpack maps with
        /// named fields, vLLM 0.26 and later) or Array (fields by position, older routers).</summary>
        public EventFormat Format = EventFormat.Map;

        public EventPublisherConfig() { }
        public EventPublisherConfig(string endpoint) { Endpoint = endpoint; }

        /// <summary>The native parameters in memory of bridge (freed after the engine's create,
        /// which copies them).</summary>
        internal unsafe EventPublisherParams* Build(StoreBridge bridge)
        {
            var p = (EventPublisherParams*)bridge.Alloc(sizeof(EventPublisherParams));
            Native.Check(Native.pkv_event_publisher_params_init(p, (uint)sizeof(EventPublisherParams)));
            p->Endpoint = bridge.Text(Endpoint);
            p->ReplayEndpoint = bridge.Text(ReplayEndpoint);
            p->Topic = bridge.Text(Topic);
            p->DataParallelRank = DataParallelRank;
            p->ReplayBufferBatches = ReplayBufferBatches;
            p->SendHwm = SendHwm;
            p->MaxQueueEvents = MaxQueueEvents;
            p->MaxBatchEvents = MaxBatchEvents;
            p->Format = Format;
            return p;
        }
    }

    /// <summary>What an engine's event publisher did (pkv_event_publisher_info).</summary>
    public sealed class PublisherInfo
    {
        /// <summary>The PUB socket's endpoint as bound, a '*' port resolved.</summary>
        public string Endpoint { get; internal set; }
        /// <summary>The replay socket's as bound; "" without replay.</summary>
        public string ReplayEndpoint { get; internal set; }
        /// <summary>The seq the next batch gets (batches sent so far).</summary>
        public ulong NextSeq { get; internal set; }
        public ulong EventsPublished { get; internal set; }
        /// <summary>Events lost to a full queue (each loss sent AllBlocksCleared).</summary>
        public ulong EventsDropped { get; internal set; }
        public ulong ReplayRequests { get; internal set; }
        /// <summary>Events waiting for the publishing thread now.</summary>
        public ulong EventsQueued { get; internal set; }

        public override string ToString()
        {
            return string.Format("PublisherInfo({0}, replay {1}, next seq {2}, {3} published, {4} dropped)",
                                 Endpoint, ReplayEndpoint, NextSeq, EventsPublished, EventsDropped);
        }
    }

    public sealed unsafe partial class Engine
    {
        /// <summary>What the engine's event publisher did (pkv_event_publisher_info): its
        /// endpoints as bound and its counters. PkvException State without a publisher.</summary>
        public PublisherInfo EventPublisherInfo()
        {
            var raw = new EventPublisherInfo { StructSize = (uint)sizeof(EventPublisherInfo) };
            lock (gate)
            {
                Call(Native.pkv_event_publisher_info(Handle, &raw));
                return new PublisherInfo  // its strings live in the engine: copied under the lock
                {
                    Endpoint = Native.Text(raw.Endpoint), ReplayEndpoint = Native.Text(raw.ReplayEndpoint),
                    NextSeq = raw.NextSeq, EventsPublished = raw.EventsPublished,
                    EventsDropped = raw.EventsDropped, ReplayRequests = raw.ReplayRequests,
                    EventsQueued = raw.EventsQueued,
                };
            }
        }
    }
}
