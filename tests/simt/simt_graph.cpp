// The emulator's stream capture and graphs (simt_stream.h): what a capturing stream submits is
// recorded as nodes (simt_stream.cpp's submit_work), a graph replays them in order, and the calls
// CUDA forbids during a capture are refused, counted and invalidate it.
#include <atomic>
#include <cstdio>
#include <set>

#include "simt.h"
#include "simt_internal.h"
#include "simt_stream_state.h"

namespace simt {
namespace {

struct Graph {
  std::shared_ptr<const Nodes> nodes;
};
std::set<const Graph *> g_graphs, g_execs;  // a cudaGraphExec_t is a Graph of its own

// This thread's capture interaction mode (cudaThreadExchangeStreamCaptureMode).
thread_local cudaStreamCaptureMode tls_mode = cudaStreamCaptureModeGlobal;
unsigned long long g_capture_ids = 0;

bool valid_mode(cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeGlobal || m == cudaStreamCaptureModeThreadLocal ||
         m == cudaStreamCaptureModeRelaxed;
}

// CUDA's rule: a thread may not make a potentially unsafe call while it captures itself (a
// capture not begun in the relaxed mode), nor, in the global interaction mode, while another
// thread captures in the global mode.
bool forbids(const Capture &c, std::thread::id me) {
  if (tls_mode == cudaStreamCaptureModeRelaxed || c.mode == cudaStreamCaptureModeRelaxed)
    return false;
  return c.thread == me ||
         (tls_mode == cudaStreamCaptureModeGlobal && c.mode == cudaStreamCaptureModeGlobal);
}

const char *error_name(cudaError_t e) {
  switch (e) {
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    case cudaErrorStreamCaptureIsolation:
      return "cudaErrorStreamCaptureIsolation";
    default:
      return "a capture error";
  }
}

Graph *find(const std::set<const Graph *> &set, const void *handle) {
  auto *g = static_cast<Graph *>(const_cast<void *>(handle));
  return set.count(g) ? g : nullptr;
}

}  // namespace

cudaError_t refuse(const char *api, Capture *cap, cudaError_t err) {
  StreamCounters &c = counters();
  c.forbidden++;
  c.last_forbidden = api;
  if (cap) cap->invalidated = true;
  fprintf(stderr, "simt: %s during a stream capture: refused (%s)%s\n", api, error_name(err),
          cap ? ", the capture is invalidated" : "");
  return err;
}

cudaError_t unsafe_call(const char *api) {
  const std::thread::id me = std::this_thread::get_id();
  Capture *refused = nullptr;
  for (auto &s : all_streams()) {
    Capture *c = s->capture.get();
    if (c && c->origin == s.get() && forbids(*c, me)) c->invalidated = true, refused = c;
  }
  return refused ? refuse(api, refused, cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t null_stream_conflict(const char *api) {
  for (auto &s : all_streams())
    if (s->capture && s->blocking)
      return refuse(api, s->capture.get(), cudaErrorStreamCaptureImplicit);
  return cudaSuccess;
}

size_t graph_num_nodes(cudaGraph_t graph) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  const Graph *g = find(g_graphs, graph);
  return g ? g->nodes->size() : 0;
}

}  // namespace simt

using simt::Capture;
using simt::Graph;
using simt::Stream;
using simt::stream_mutex;

extern "C" {

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode *mode) {
  if (!mode || !simt::valid_mode(*mode)) return cudaErrorInvalidValue;
  std::swap(*mode, simt::tls_mode);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (!simt::valid_mode(mode)) return cudaErrorInvalidValue;
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Stream *s = simt::find_stream(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (s == simt::null_stream()) return cudaErrorStreamCaptureUnsupported;  // as CUDA refuses
  if (s->capture) return cudaErrorIllegalState;
  auto cap = std::make_shared<Capture>();
  cap->mode = mode;
  cap->thread = std::this_thread::get_id();
  cap->id = ++simt::g_capture_ids;
  cap->origin = s;
  cap->members.push_back(s);
  s->capture = cap;
  s->captured = 0;
  return cudaSuccess;
}

// Ends the capture begun on `stream` for every stream in it. The graph comes back only when no
// forbidden call invalidated the capture and every joined stream's work was joined back.
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
  if (!graph) return cudaErrorInvalidValue;
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Stream *s = simt::find_stream(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (!s->capture) return cudaErrorIllegalState;
  const std::shared_ptr<Capture> cap = s->capture;
  if (cap->origin != s) return cudaErrorStreamCaptureUnmatched;
  if (cap->mode != cudaStreamCaptureModeRelaxed && cap->thread != std::this_thread::get_id())
    return cudaErrorStreamCaptureWrongThread;
  bool unjoined = false;
  for (Stream *m : cap->members) {
    if (m != s && cap->joined[m] < m->captured) unjoined = true;
    m->capture.reset();
    m->captured = 0;
  }
  cap->active = false;
  *graph = nullptr;
  if (cap->invalidated) return cudaErrorStreamCaptureInvalidated;
  if (unjoined) return cudaErrorStreamCaptureUnjoined;
  auto *g = new Graph{std::make_shared<const simt::Nodes>(std::move(cap->nodes))};
  simt::g_graphs.insert(g);
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status) {
  if (!status) return cudaErrorInvalidValue;
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Stream *s = simt::find_stream(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (s == simt::null_stream())
    if (cudaError_t e = simt::null_stream_conflict("cudaStreamIsCapturing")) return e;
  *status = !s->capture               ? cudaStreamCaptureStatusNone
            : s->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

// The status and the capture's id; the graph under construction and its dependency nodes are not
// modelled (the emulator's graph is a list), so asking for them is cudaErrorNotSupported.
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus *status,
                                     unsigned long long *id, cudaGraph_t *graph,
                                     const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                     size_t *num_deps) {
  if (graph || deps || edges || num_deps) return cudaErrorNotSupported;
  if (cudaError_t e = cudaStreamIsCapturing(stream, status)) return e;
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Stream *s = simt::find_stream(stream);
  if (id && s->capture) *id = s->capture->id;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  const unsigned long long known =
      cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
      cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;
  if (!exec || (flags & ~known) != 0) return cudaErrorInvalidValue;
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  const Graph *g = simt::find(simt::g_graphs, graph);
  if (!g) return cudaErrorInvalidResourceHandle;
  auto *x = new Graph{g->nodes};  // shared: the graph may be destroyed before its exec
  simt::g_execs.insert(x);
  *exec = reinterpret_cast<cudaGraphExec_t>(x);
  return cudaSuccess;
}

// Replays the nodes in capture order on `stream`, as one item of its work (queued in deferred
// mode; one node of the graph being captured when `stream` captures, as CUDA's child graph).
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  const Graph *x = simt::find(simt::g_execs, exec);
  if (!x) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<const simt::Nodes> nodes = x->nodes;
  const cudaError_t e = simt::submit_work(
      "cudaGraphLaunch", stream,
      [nodes] {
        for (const auto &n : *nodes) n();
      },
      false);
  if (e == cudaSuccess) simt::counters().graph_launches++;
  return e;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Graph *x = simt::find(simt::g_execs, exec);
  if (!x) return cudaErrorInvalidResourceHandle;
  simt::g_execs.erase(x);
  delete x;  // a queued launch keeps the nodes
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Graph *g = simt::find(simt::g_graphs, graph);
  if (!g) return cudaErrorInvalidResourceHandle;
  simt::g_graphs.erase(g);
  delete g;
  return cudaSuccess;
}

}  // extern "C"
