// The emulator's stream capture and graphs (simt_stream.h): a capture records and runs nothing; a
// replay reads pinned inputs and device buffers as they are then and kernel arguments as they
// were at capture; every call CUDA forbids during a capture is refused, counted by name and
// invalidates it; the relaxed and thread-local modes let through what CUDA lets through; a forked
// stream must join back. Runs in the mode main() set (immediate and deferred).
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "simt_stream_selftest.cuh"
#include "stream_test_util.h"

namespace {

constexpr int kN = 70;

cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  EXPECT_OK(cudaStreamCreate(&s));
  return s;
}

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  EXPECT_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

bool deferred() { return simt::stream_mode() == simt::StreamMode::deferred; }

cudaGraphExec_t end_and_instantiate(cudaStream_t s, size_t want_nodes) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t x = nullptr;
  EXPECT_OK(cudaStreamEndCapture(s, &g));
  EXPECT(simt::graph_num_nodes(g) == want_nodes);
  EXPECT_OK(cudaGraphInstantiate(&x, g, 0));
  EXPECT_OK(cudaGraphDestroy(g));  // the exec keeps the nodes
  return x;
}

void test_replay() {
  cudaStream_t s = new_stream();
  float *in = pinned_alloc<float>(kN), *out = pinned_alloc<float>(kN), bias_h[kN];
  float *d_in = dev_alloc<float>(kN), *d_bias = dev_alloc<float>(kN);
  float *d_out = dev_alloc<float>(kN);
  simt::reset_stream_counters();
  EXPECT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  EXPECT_OK(cudaStreamGetCaptureInfo(s, &status, &id));
  EXPECT(status == cudaStreamCaptureStatusActive && id != 0);
  float scalar = 1.5f;
  EXPECT_OK(cudaMemcpyAsync(d_in, in, kN * sizeof(float), cudaMemcpyHostToDevice, s));
  EXPECT_OK(cudaMemsetAsync(d_out, 0, kN * sizeof(float), s));
  stream_add(d_out, d_in, d_bias, scalar, kN, s);
  scalar = 100.f;  // the captured launch keeps 1.5
  EXPECT_OK(cudaMemcpyAsync(out, d_out, kN * sizeof(float), cudaMemcpyDeviceToHost, s));
  cudaGraphExec_t x = end_and_instantiate(s, 4);
  EXPECT(unwritten(d_in, kN) && unwritten(d_out, kN) && unwritten(out, kN));  // nothing ran
  EXPECT(simt::pending_work() == 0 && scalar == 100.f);
  for (int r = 0; r < 3; ++r) {  // new pinned inputs and device buffers at each replay
    for (int i = 0; i < kN; ++i) in[i] = float(i + 1000 * r), bias_h[i] = 0.25f * float(i * r);
    EXPECT_OK(cudaMemcpy(d_bias, bias_h, sizeof bias_h, cudaMemcpyHostToDevice));
    EXPECT_OK(cudaGraphLaunch(x, s));
    EXPECT(simt::pending_work() == (deferred() ? 1u : 0u));
    EXPECT_OK(cudaStreamSynchronize(s));
    bool ok = true;
    for (int i = 0; i < kN; ++i) ok = ok && out[i] == in[i] + bias_h[i] + 1.5f;
    EXPECT(ok);
  }
  const simt::StreamCounters c = simt::stream_counters();
  EXPECT(c.launches == 1 && c.graph_launches == 3 && c.forbidden == 0 && c.async_copies == 3);
  EXPECT_OK(cudaGraphExecDestroy(x));
  EXPECT_EQ_ERR(cudaGraphLaunch(x, s), cudaErrorInvalidResourceHandle);
  for (float *p : {d_in, d_bias, d_out}) EXPECT_OK(cudaFree(p));
  for (float *p : {in, out}) EXPECT_OK(cudaFreeHost(p));
  EXPECT_OK(cudaStreamDestroy(s));
}

// One graph replayed 300 times: x = 5 then x = 2x + 1 within a replay (11 in this order, 5 in the
// other), n += 1 across replays. The synchronous copy after 20 runs the 20 queued so far (the
// null stream syncs with the blocking stream s).
void test_many_replays() {
  cudaStream_t s = new_stream();
  int *x = dev_alloc<int>(kN), *n = dev_alloc<int>(kN), h[kN];
  EXPECT_OK(cudaMemset(n, 0, kN * sizeof(int)));
  EXPECT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  stream_affine(x, 0, 5, kN, s);
  stream_affine(x, 2, 1, kN, s);
  stream_affine(n, 1, 1, kN, s);
  cudaGraphExec_t g = end_and_instantiate(s, 3);
  for (int r = 0; r < 300; ++r) {
    EXPECT_OK(cudaGraphLaunch(g, s));
    if (r == 19) {
      EXPECT_OK(cudaMemcpy(h, n, sizeof h, cudaMemcpyDeviceToHost));
      EXPECT(h[0] == 20 && h[kN - 1] == 20);
    }
  }
  EXPECT(simt::pending_work() == (deferred() ? 280u : 0u));
  EXPECT_OK(cudaStreamSynchronize(s));
  EXPECT_OK(cudaMemcpy(h, n, sizeof h, cudaMemcpyDeviceToHost));
  EXPECT(h[0] == 300 && h[kN - 1] == 300);
  EXPECT_OK(cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost));
  EXPECT(h[0] == 11 && h[kN - 1] == 11);
  EXPECT_OK(cudaGraphExecDestroy(g));
  EXPECT_OK(cudaFree(x));
  EXPECT_OK(cudaFree(n));
  EXPECT_OK(cudaStreamDestroy(s));
}

struct Forbidden {
  const char *name;
  cudaError_t want;
  std::function<cudaError_t()> call;
};

// Each call in its own capture: refused with `want`, counted by name, the capture invalidated
// (the stream refuses more work, EndCapture gives no graph) and its captured work never run.
void expect_refused(cudaStream_t s, int *x, const Forbidden &f) {
  EXPECT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  stream_affine(x, 0, 1, kN, s);
  const simt::StreamCounters before = simt::stream_counters();
  const cudaError_t got = f.call();
  const simt::StreamCounters after = simt::stream_counters();
  const bool named = strcmp(after.last_forbidden, f.name) == 0;
  if (got != f.want || after.forbidden != before.forbidden + 1 || !named) {
    fprintf(stderr, "FAIL forbidden %s: returned %d (want %d), counted %d, named %s\n", f.name,
            int(got), int(f.want), int(after.forbidden - before.forbidden), after.last_forbidden);
    g_failures++;
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EXPECT_OK(cudaStreamIsCapturing(s, &status));
  EXPECT(status == cudaStreamCaptureStatusInvalidated);
  EXPECT_EQ_ERR(cudaMemsetAsync(x, 0, 4, s), cudaErrorStreamCaptureInvalidated);
  cudaGraph_t g = reinterpret_cast<cudaGraph_t>(&g);
  EXPECT_EQ_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT(g == nullptr && unwritten(x, kN));
}

void test_forbidden() {
  cudaStream_t s = new_stream(), other = new_stream();
  cudaEvent_t e_other = new_event(), e_in = new_event();
  EXPECT_OK(cudaEventRecord(e_other, other));
  int *x = dev_alloc<int>(kN), *y = dev_alloc<int>(kN), *pin = pinned_alloc<int>(kN), page[kN];
  void *p = nullptr;
  const std::vector<Forbidden> cases = {
      {"cudaStreamSynchronize", cudaErrorStreamCaptureUnsupported,
       [&] { return cudaStreamSynchronize(s); }},
      {"cudaStreamSynchronize", cudaErrorStreamCaptureUnsupported,  // another stream: unsafe
       [&] { return cudaStreamSynchronize(other); }},
      {"cudaStreamQuery", cudaErrorStreamCaptureUnsupported, [&] { return cudaStreamQuery(s); }},
      {"cudaDeviceSynchronize", cudaErrorStreamCaptureUnsupported,
       [] { return cudaDeviceSynchronize(); }},
      {"cudaMalloc", cudaErrorStreamCaptureUnsupported, [&] { return cudaMalloc(&p, 64); }},
      {"cudaFree", cudaErrorStreamCaptureUnsupported, [&] { return cudaFree(y); }},
      {"cudaHostAlloc", cudaErrorStreamCaptureUnsupported,
       [&] { return cudaHostAlloc(&p, 64, cudaHostAllocDefault); }},
      {"cudaFreeHost", cudaErrorStreamCaptureUnsupported, [&] { return cudaFreeHost(pin); }},
      {"cudaMemcpy", cudaErrorStreamCaptureUnsupported,
       [&] { return cudaMemcpy(page, y, sizeof page, cudaMemcpyDeviceToHost); }},
      {"cudaMemset", cudaErrorStreamCaptureUnsupported,
       [&] { return cudaMemset(y, 0, sizeof page); }},
      {"cudaEventSynchronize", cudaErrorStreamCaptureUnsupported,
       [&] { return cudaEventSynchronize(e_other); }},
      {"cudaEventQuery", cudaErrorStreamCaptureUnsupported,
       [&] {
         EXPECT_OK(cudaEventRecord(e_in, s));
         return cudaEventQuery(e_in);
       }},
      {"cudaMemcpyAsync", cudaErrorStreamCaptureUnsupported,
       [&] { return cudaMemcpyAsync(y, page, sizeof page, cudaMemcpyHostToDevice, s); }},
      {"cudaMemcpyAsync", cudaErrorStreamCaptureUnsupported,
       [&] { return cudaMemcpyAsync(page, y, sizeof page, cudaMemcpyDeviceToHost, s); }},
      {"a kernel launch", cudaErrorStreamCaptureImplicit,
       [&] {
         stream_affine(y, 0, 1, kN, nullptr);  // the legacy null stream syncs with s
         return cudaGetLastError();
       }},
      {"cudaStreamWaitEvent", cudaErrorStreamCaptureIsolation,
       [&] { return cudaStreamWaitEvent(s, e_other, 0); }},
  };
  for (const Forbidden &f : cases) expect_refused(s, x, f);
  EXPECT(p == nullptr);  // the refused allocations allocated nothing
  EXPECT_OK(cudaFree(y));
  EXPECT_OK(cudaFreeHost(pin));
  EXPECT_OK(cudaFree(x));
  for (cudaEvent_t e : {e_other, e_in}) EXPECT_OK(cudaEventDestroy(e));
  for (cudaStream_t t : {s, other}) EXPECT_OK(cudaStreamDestroy(t));
}

// The relaxed mode lets allocations through; the thread-local mode lets other threads allocate;
// the global mode refuses them on other threads too, unless that thread is in the relaxed
// interaction mode. Syncing the capturing stream is refused in every mode.
void test_capture_modes() {
  cudaStream_t s = new_stream();
  cudaGraph_t g = nullptr;
  void *p = nullptr;
  simt::reset_stream_counters();
  EXPECT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  EXPECT_OK(cudaMalloc(&p, 64));
  EXPECT_OK(cudaFree(p));
  EXPECT_OK(cudaStreamEndCapture(s, &g));
  EXPECT_OK(cudaGraphDestroy(g));
  EXPECT(simt::stream_counters().forbidden == 0);
  auto other_thread_malloc = [](bool relaxed) {
    cudaError_t e = cudaErrorUnknown;
    std::thread t([&] {
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      if (relaxed) EXPECT_OK(cudaThreadExchangeStreamCaptureMode(&mode));
      void *q = nullptr;
      if ((e = cudaMalloc(&q, 64)) == cudaSuccess) EXPECT_OK(cudaFree(q));
    });
    t.join();
    return e;
  };
  EXPECT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  EXPECT_OK(other_thread_malloc(false));
  EXPECT_OK(cudaStreamEndCapture(s, &g));
  EXPECT_OK(cudaGraphDestroy(g));
  EXPECT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT_OK(other_thread_malloc(true));
  EXPECT_EQ_ERR(other_thread_malloc(false), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT(simt::stream_counters().forbidden == 2);
  EXPECT_EQ_ERR(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
                cudaErrorStreamCaptureUnsupported);  // the legacy null stream cannot capture
  EXPECT_EQ_ERR(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
  EXPECT_OK(cudaStreamDestroy(s));
}

// Stream t forks from s's capture through an event and joins back through another; its node is
// in the graph. Without the join, EndCapture fails with cudaErrorStreamCaptureUnjoined.
void test_fork_join() {
  cudaStream_t s = new_stream(), t = new_stream();
  cudaEvent_t fork = new_event(), join = new_event();
  int *x = dev_alloc<int>(kN), *y = dev_alloc<int>(kN), h[kN];
  EXPECT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  stream_affine(x, 0, 1, kN, s);  // x = 1
  EXPECT_OK(cudaEventRecord(fork, s));
  EXPECT_OK(cudaStreamWaitEvent(t, fork, 0));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EXPECT_OK(cudaStreamIsCapturing(t, &status));
  EXPECT(status == cudaStreamCaptureStatusActive);
  stream_affine(y, 0, 2, kN, t);  // y = 2
  EXPECT_OK(cudaEventRecord(join, t));
  EXPECT_OK(cudaStreamWaitEvent(s, join, 0));
  stream_affine(x, 3, 0, kN, s);  // x = 3
  cudaGraphExec_t g = end_and_instantiate(s, 3);
  EXPECT_OK(cudaStreamIsCapturing(t, &status));
  EXPECT(status == cudaStreamCaptureStatusNone);
  EXPECT_OK(cudaGraphLaunch(g, s));
  EXPECT_OK(cudaStreamSynchronize(s));
  EXPECT_OK(cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost));
  EXPECT(h[0] == 3 && h[kN - 1] == 3);
  EXPECT_OK(cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost));
  EXPECT(h[0] == 2 && h[kN - 1] == 2);
  EXPECT_OK(cudaGraphExecDestroy(g));
  EXPECT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT_OK(cudaEventRecord(fork, s));
  EXPECT_OK(cudaStreamWaitEvent(t, fork, 0));
  stream_affine(y, 0, 4, kN, t);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ_ERR(cudaStreamEndCapture(t, &graph), cudaErrorStreamCaptureUnmatched);
  EXPECT_EQ_ERR(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureUnjoined);
  EXPECT(graph == nullptr);
  for (cudaEvent_t e : {fork, join}) EXPECT_OK(cudaEventDestroy(e));
  for (cudaStream_t u : {s, t}) EXPECT_OK(cudaStreamDestroy(u));
  EXPECT_OK(cudaFree(x));
  EXPECT_OK(cudaFree(y));
}

}  // namespace

void test_capture() {
  test_replay();
  test_many_replays();
  test_forbidden();
  test_capture_modes();
  test_fork_join();
}
