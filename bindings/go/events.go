package pkv

// KV events on the wire (pkv 0.3): an engine publishes its KV events over ZeroMQ in vLLM's
// protocol (a PUB socket, msgpack KVEventBatch, an optional replay socket), so a KV-aware router
// written for vLLM hears pkv unchanged. pkv.h documents the protocol.

// #include <pkv/pkv.h>
import "C"

import "unsafe"

// EventPublisherParams make an engine publish its KV events (pkv_event_publisher_params): set
// EngineParams.EventPublisher to them. Zero fields keep pkv's defaults; Endpoint is required.
// pkv copies them when the engine is created.
type EventPublisherParams struct {
	// Endpoint is the ZeroMQ endpoint the PUB socket binds, e.g. "tcp://127.0.0.1:5557";
	// "tcp://127.0.0.1:*" binds a free port (Engine.EventPublisherInfo says which).
	Endpoint string
	// ReplayEndpoint is the ROUTER socket's that answers replay requests; "" = no replay.
	ReplayEndpoint string
	// Topic is every message's first frame; "" = pkv's default, "kv-events".
	Topic string
	// DataParallelRank is every batch's data_parallel_rank (default 0).
	DataParallelRank uint32
	// ReplayBufferBatches are the batches kept for replay (0: DefaultEventReplayBatches).
	ReplayBufferBatches uint32
	// SendHWM are the messages queued per subscriber before it loses them (ZeroMQ's SNDHWM;
	// 0: DefaultEventSendHWM).
	SendHWM uint32
	// MaxQueueEvents are the events waiting for the publishing thread, at most (0:
	// DefaultEventQueueEvents); MaxBatchEvents the events of one batch (0: DefaultEventBatchEvents).
	MaxQueueEvents, MaxBatchEvents uint32
	// Format is how batches are encoded (pkv 0.4): EventFormatMap, msgpack maps with named
	// fields (vLLM 0.26 and later; the default), or EventFormatArray, the positional arrays of
	// vLLM before 0.26. Both carry every field; pkv.h lists them.
	Format EventFormat
}

// toC builds the C parameters in m, from pkv's defaults (pkv_event_publisher_params_init) with
// pp's fields over them (a zero field is pkv's "default" in C too).
func (pp *EventPublisherParams) toC(m *cMem) (*C.pkv_event_publisher_params, error) {
	c := (*cEventPublisherParams)(m.alloc(unsafe.Sizeof(cEventPublisherParams{})))
	raw := (*C.pkv_event_publisher_params)(unsafe.Pointer(c))
	if err := check(func() C.pkv_status {
		return C.pkv_event_publisher_params_init(raw, C.uint32_t(unsafe.Sizeof(*c)))
	}); err != nil {
		return nil, err
	}
	c.Endpoint = uintptr(unsafe.Pointer(m.cString(pp.Endpoint)))
	c.ReplayEndpoint = uintptr(unsafe.Pointer(m.cString(pp.ReplayEndpoint)))
	c.Topic = uintptr(unsafe.Pointer(m.cString(pp.Topic)))
	c.DataParallelRank, c.ReplayBufferBatches, c.SendHWM = pp.DataParallelRank, pp.ReplayBufferBatches, pp.SendHWM
	c.MaxQueueEvents, c.MaxBatchEvents, c.Format = pp.MaxQueueEvents, pp.MaxBatchEvents, uint32(pp.Format)
	return raw, nil
}

// eventPublisherParamsOf copies C parameters (an engine's) into Go.
func eventPublisherParamsOf(c *cEventPublisherParams) *EventPublisherParams {
	return &EventPublisherParams{Endpoint: goString(c.Endpoint), ReplayEndpoint: goString(c.ReplayEndpoint),
		Topic: goString(c.Topic), DataParallelRank: c.DataParallelRank, ReplayBufferBatches: c.ReplayBufferBatches,
		SendHWM: c.SendHWM, MaxQueueEvents: c.MaxQueueEvents, MaxBatchEvents: c.MaxBatchEvents,
		Format: EventFormat(c.Format)}
}

// EventPublisherInfo is what the engine's event publisher did (pkv_event_publisher_info): its
// endpoints as bound (a '*' port resolved) and its counters. ErrState when the engine has no
// publisher.
func (eng *Engine) EventPublisherInfo() (EventPublisherInfo, error) {
	var info EventPublisherInfo
	raw := cEventPublisherInfo{StructSize: uint32(unsafe.Sizeof(cEventPublisherInfo{}))}
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		s := C.pkv_event_publisher_info(e, (*C.struct_pkv_event_publisher_info)(unsafe.Pointer(&raw)))
		if s == 0 {
			info.fromC(&raw) // its strings live in the engine: copied under the lock
		}
		return s
	})
	return info, err
}
