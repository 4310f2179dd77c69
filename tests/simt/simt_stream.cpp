// The emulator's streams (simt_stream.h): per-stream queues of deferred work, the legacy null
// stream's implicit syncs, the host waits that run queued work, and the async copies, memsets and
// kernel launches that submit it. Events are in simt_event.cpp, captures and graphs in
// simt_graph.cpp.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "simt.h"
#include "simt_internal.h"
#include "simt_stream_state.h"

namespace simt {
namespace {

StreamMode env_mode() {
  const char *e = getenv("SIMT_STREAMS");
  if (!e || !*e || strcmp(e, "immediate") == 0) return StreamMode::immediate;
  if (strcmp(e, "deferred") == 0) return StreamMode::deferred;
  die("SIMT_STREAMS=%s: expected immediate or deferred", e);
}

StreamMode &mode() {
  static StreamMode m = env_mode();
  return m;
}

StreamCounters g_counters{};
uint64_t g_seq = 0;
std::vector<std::unique_ptr<Stream>> g_streams;  // [0]: the null stream
std::set<const Stream *> g_live;

// Handles 1 and 2 are cudaStreamLegacy and cudaStreamPerThread; both name the null stream here
// (no test runs with per-thread default streams).
bool names_null_stream(cudaStream_t h) {
  return h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread;
}

// The memory one end of a copy names, when that end may be host memory.
bool pageable(const void *p, bool may_be_host) {
  return may_be_host && memory_kind(p) == MemKind::pageable;
}

bool valid_kind(cudaMemcpyKind k) {
  return k == cudaMemcpyHostToHost || k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToHost ||
         k == cudaMemcpyDeviceToDevice || k == cudaMemcpyDefault;
}

// rows x width bytes, between pitched buffers. A pageable source is copied when queued (CUDA
// stages it through pinned memory at the call); any other source is read when the copy runs.
cudaError_t copy_2d(const char *api, void *dst, size_t dpitch, const void *src, size_t spitch,
                    size_t width, size_t rows, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_kind(kind)) return cudaErrorInvalidMemcpyDirection;
  if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
  if (width == 0 || rows == 0) return cudaSuccess;
  const bool src_host = kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice;
  const bool dst_host = kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice;
  const bool src_pageable = pageable(src, src_host), dst_pageable = pageable(dst, dst_host);
  std::shared_ptr<std::vector<char>> snapshot;
  if (src_pageable && deferred()) {
    snapshot = std::make_shared<std::vector<char>>(width * rows);
    for (size_t r = 0; r < rows; ++r)
      memcpy(snapshot->data() + r * width, static_cast<const char *>(src) + r * spitch, width);
    src = snapshot->data(), spitch = width;
  }
  auto run = [=, snapshot = std::move(snapshot)] {  // the snapshot lives as long as the copy
    for (size_t r = 0; r < rows; ++r)
      memmove(static_cast<char *>(dst) + r * dpitch, static_cast<const char *>(src) + r * spitch,
              width);
  };
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  const cudaError_t e = submit_work(api, stream, run, src_pageable || dst_pageable);
  if (e == cudaSuccess) {
    g_counters.async_copies++;
    if (src_pageable || dst_pageable) g_counters.pageable_copies++;
  }
  return e;
}

void count_wait(uint64_t StreamCounters::*which) {
  g_counters.*which += 1;
  g_counters.host_waits++;
}

}  // namespace

std::recursive_mutex &stream_mutex() {
  static std::recursive_mutex mu;
  return mu;
}

StreamCounters &counters() { return g_counters; }
bool deferred() { return mode() == StreamMode::deferred; }

Stream *null_stream() {
  if (g_streams.empty()) {
    g_streams.push_back(std::make_unique<Stream>());
    g_live.insert(g_streams[0].get());
  }
  return g_streams[0].get();
}

const std::vector<std::unique_ptr<Stream>> &all_streams() {
  null_stream();
  return g_streams;
}

Stream *find_stream(cudaStream_t h) {
  if (names_null_stream(h)) return null_stream();
  auto *s = reinterpret_cast<Stream *>(h);
  return g_live.count(s) ? s : nullptr;
}

cudaStream_t handle_of(Stream *s) {
  return s == null_stream() ? nullptr : reinterpret_cast<cudaStream_t>(s);
}

uint64_t enqueue(Stream *s, std::function<void()> run, bool marker, std::vector<Dep> deps) {
  const uint64_t seq = ++g_seq;
  if (!deferred()) {
    if (run) run();
    s->last_seq = seq;
    return seq;
  }
  // The legacy null stream's implicit syncs: its work waits for the blocking streams' earlier
  // work, and theirs for its.
  Stream *nul = null_stream();
  if (s == nul) {
    for (auto &t : g_streams)
      if (t.get() != nul && t->blocking && !t->queue.empty())
        deps.push_back({t.get(), t->last_seq});
  } else if (s->blocking && !nul->queue.empty()) {
    deps.push_back({nul, nul->last_seq});
  }
  s->queue.push_back(Work{seq, marker, std::move(deps), std::move(run)});
  s->last_seq = seq;
  return seq;
}

void run_through(Stream *s, uint64_t seq) {
  while (!s->queue.empty() && s->queue.front().seq <= seq) {
    Work op = std::move(s->queue.front());
    s->queue.pop_front();
    for (const Dep &d : op.deps) run_through(d.stream, d.seq);  // earlier items only
    if (op.run) op.run();
  }
}

void run_all() {
  for (auto &s : g_streams) run_through(s.get(), UINT64_MAX);
}

cudaError_t submit_work(const char *api, cudaStream_t handle, std::function<void()> run,
                        bool pageable) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Stream *s = find_stream(handle);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (s->capture) {
    Capture *cap = s->capture.get();
    if (cap->invalidated) return cudaErrorStreamCaptureInvalidated;
    if (pageable) return refuse(api, cap, cudaErrorStreamCaptureUnsupported);
    cap->nodes.push_back(std::move(run));
    s->captured++;
    return cudaSuccess;
  }
  if (s == null_stream())
    if (cudaError_t e = null_stream_conflict(api)) return e;
  enqueue(s, std::move(run), false);
  return cudaSuccess;
}

void submit_launch(const LaunchConfig &cfg, const void *kernel_id, std::function<void()> run) {
  if (!launch_config_ok(cfg, kernel_id)) return set_last_error(cudaErrorInvalidConfiguration);
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  const cudaError_t e = submit_work("a kernel launch", cfg.stream, std::move(run), false);
  if (e != cudaSuccess) return set_last_error(e);
  g_counters.launches++;
}

int host_call(HostCall call, const char *api) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  if (cudaError_t e = unsafe_call(api)) return e;
  switch (call) {
    case HostCall::malloc:
      g_counters.mallocs++;
      return cudaSuccess;
    case HostCall::host_alloc:
      g_counters.host_allocs++;
      return cudaSuccess;
    case HostCall::free:
      g_counters.frees++;
      break;
    case HostCall::host_free:
      g_counters.host_frees++;
      break;
  }
  // Freeing syncs the device, as CUDA's cudaFree and cudaFreeHost do: queued work that reads or
  // writes the memory runs before it goes.
  count_wait(&StreamCounters::implicit_syncs);
  run_all();
  return cudaSuccess;
}

int sync_call(const char *api) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  if (cudaError_t e = unsafe_call(api)) return e;
  if (cudaError_t e = null_stream_conflict(api)) return e;
  count_wait(&StreamCounters::implicit_syncs);
  Stream *nul = null_stream();
  run_through(nul, enqueue(nul, {}, true));
  return cudaSuccess;
}

void set_stream_mode(StreamMode m) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  run_all();
  mode() = m;
}

StreamMode stream_mode() {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  return mode();
}

StreamCounters stream_counters() {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  return g_counters;
}

void reset_stream_counters() {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  g_counters = StreamCounters{};
  g_counters.last_forbidden = "";
}

size_t pending_work() {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  size_t n = 0;
  for (auto &s : all_streams())
    for (const Work &op : s->queue) n += op.marker ? 0 : 1;
  return n;
}

}  // namespace simt

using simt::Stream;
using simt::stream_mutex;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  if (!stream || (flags & ~unsigned(cudaStreamNonBlocking)) != 0) return cudaErrorInvalidValue;
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  simt::null_stream();
  simt::g_streams.push_back(std::make_unique<Stream>());
  Stream *s = simt::g_streams.back().get();
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  simt::g_live.insert(s);
  *stream = simt::handle_of(s);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

// CUDA returns at once and lets queued work finish; running it now is one order a GPU may take.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Stream *s = simt::find_stream(stream);
  if (!s || s == simt::null_stream()) return cudaErrorInvalidResourceHandle;
  if (s->capture) return cudaErrorIllegalState;
  simt::run_through(s, UINT64_MAX);
  s->live = false;
  simt::g_live.erase(s);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Stream *s = simt::find_stream(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (s->capture)
    return simt::refuse("cudaStreamSynchronize", s->capture.get(),
                        cudaErrorStreamCaptureUnsupported);
  if (cudaError_t e = simt::unsafe_call("cudaStreamSynchronize")) return e;
  simt::count_wait(&simt::StreamCounters::stream_syncs);
  simt::run_through(s, simt::enqueue(s, {}, true));
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  Stream *s = simt::find_stream(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (s->capture)
    return simt::refuse("cudaStreamQuery", s->capture.get(), cudaErrorStreamCaptureUnsupported);
  return s->queue.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize(void) {
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  // Waiting for the device waits for every capturing stream too, whatever the capture's mode.
  for (auto &s : simt::all_streams())
    if (s->capture && s->capture->origin == s.get())
      return simt::refuse("cudaDeviceSynchronize", s->capture.get(),
                          cudaErrorStreamCaptureUnsupported);
  simt::count_wait(&simt::StreamCounters::device_syncs);
  simt::run_all();
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return simt::copy_2d("cudaMemcpyAsync", dst, n, src, n, n, 1, kind, stream);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  return simt::copy_2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, stream);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(stream_mutex());
  const cudaError_t e = simt::submit_work(
      "cudaMemsetAsync", stream, [p, value, n] { memset(p, value, n); }, false);
  if (e == cudaSuccess) simt::g_counters.async_copies++;
  return e;
}

}  // extern "C"
