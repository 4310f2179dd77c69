// The emulator's events (simt_stream.h). A record is a marker queued on its stream (deferred
// mode): the event is complete once the stream ran past it, and cudaStreamWaitEvent queues a
// marker that depends on it. A record on a capturing stream marks a point of the capture instead;
// a stream that waits on it joins the capture (CUDA's fork), and the capture's origin waiting on
// an event of a joined stream joins that stream's work back.
#include <algorithm>
#include <set>

#include "simt.h"
#include "simt_internal.h"
#include "simt_stream_state.h"

namespace simt {
namespace {

std::set<const Event *> g_events;

Event *find_event(cudaEvent_t e) {
  auto *ev = reinterpret_cast<Event *>(e);
  return g_events.count(ev) ? ev : nullptr;
}

bool in_active_capture(const Event *ev) { return ev->capture && ev->capture->active; }

// A wait on an event recorded during a capture: `s` joins that capture, or was in it already.
cudaError_t wait_in_capture(Stream *s, Event *ev) {
  const std::shared_ptr<Capture> cap = ev->capture;
  if (!s->capture) {
    if (s == null_stream())
      return refuse("cudaStreamWaitEvent", cap.get(), cudaErrorStreamCaptureImplicit);
    s->capture = cap;
    s->captured = 0;
    cap->members.push_back(s);
  } else if (s->capture != cap) {
    return refuse("cudaStreamWaitEvent", s->capture.get(), cudaErrorStreamCaptureIsolation);
  }
  size_t &joined = cap->joined[ev->stream];
  joined = std::max(joined, ev->capture_pos);
  return cudaSuccess;
}

}  // namespace
}  // namespace simt

using simt::Event;
using simt::Stream;
using simt::stream_mutex;

extern "C" {

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~known) != 0) return cudaErrorInvalidValue;
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
    return cudaErrorInvalidValue;  // CUDA's rule: interprocess events carry no timing
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  auto *ev = new Event;
  simt::g_events.insert(ev);
  *event = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

// Queued markers hold no reference to the event, so it may go while its record is pending.
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Event *ev = simt::find_event(event);
  if (!ev) return cudaErrorInvalidResourceHandle;
  simt::g_events.erase(ev);
  delete ev;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Event *ev = simt::find_event(event);
  Stream *s = simt::find_stream(stream);
  if (!ev || !s) return cudaErrorInvalidResourceHandle;
  if (s->capture) {
    if (s->capture->invalidated) return cudaErrorStreamCaptureInvalidated;
    *ev = Event{s, 0, s->capture, s->captured};
    return cudaSuccess;
  }
  if (s == simt::null_stream())
    if (cudaError_t e = simt::null_stream_conflict("cudaEventRecord")) return e;
  *ev = Event{s, simt::enqueue(s, {}, true), nullptr, 0};
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Event *ev = simt::find_event(event);
  if (!ev) return cudaErrorInvalidResourceHandle;
  if (simt::in_active_capture(ev))
    return simt::refuse("cudaEventQuery", ev->capture.get(), cudaErrorStreamCaptureUnsupported);
  if (!ev->stream || ev->capture) return cudaSuccess;  // never recorded, or by a past capture
  const auto &q = ev->stream->queue;
  return q.empty() || q.front().seq > ev->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Event *ev = simt::find_event(event);
  if (!ev) return cudaErrorInvalidResourceHandle;
  if (simt::in_active_capture(ev))
    return simt::refuse("cudaEventSynchronize", ev->capture.get(),
                        cudaErrorStreamCaptureUnsupported);
  if (cudaError_t e = simt::unsafe_call("cudaEventSynchronize")) return e;
  simt::counters().event_syncs++;
  simt::counters().host_waits++;
  if (ev->stream && !ev->capture) simt::run_through(ev->stream, ev->seq);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (flags != cudaEventWaitDefault) return cudaErrorInvalidValue;
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Event *ev = simt::find_event(event);
  Stream *s = simt::find_stream(stream);
  if (!ev || !s) return cudaErrorInvalidResourceHandle;
  if (simt::in_active_capture(ev)) return simt::wait_in_capture(s, ev);
  if (!ev->stream || ev->capture) return cudaSuccess;  // nothing to wait for
  // Work recorded outside the capture cannot order captured work (CUDA's isolation rule).
  if (s->capture)
    return simt::refuse("cudaStreamWaitEvent", s->capture.get(), cudaErrorStreamCaptureIsolation);
  if (s == simt::null_stream())
    if (cudaError_t e = simt::null_stream_conflict("cudaStreamWaitEvent")) return e;
  simt::enqueue(s, {}, true, {{ev->stream, ev->seq}});
  return cudaSuccess;
}

}  // extern "C"
