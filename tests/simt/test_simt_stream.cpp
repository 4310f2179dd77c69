// The emulator's streams and events in deferred mode (simt_stream.h): work runs only when the host
// waits, in the order the streams, events and the legacy null stream impose, exactly as far as
// the wait covers; pageable copy sources are snapshotted, pinned ones read when the copy runs.
// main() also runs the capture tests (test_simt_capture.cpp) in both modes.
#include <cstdlib>
#include <cstring>

#include "simt_stream_selftest.cuh"
#include "stream_test_util.h"

int g_failures = 0;

namespace {

constexpr int kN = 100;  // two blocks of the test kernels, the second one partial

bool all_eq(const int *x, int v, int n = kN) {
  for (int i = 0; i < n; ++i)
    if (x[i] != v) return false;
  return true;
}

void fill(int *x, int v, int n = kN) {
  for (int i = 0; i < n; ++i) x[i] = v;
}

cudaStream_t new_stream(unsigned flags) {
  cudaStream_t s = nullptr;
  EXPECT_OK(cudaStreamCreateWithFlags(&s, flags));
  return s;
}

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  EXPECT_OK(cudaEventCreate(&e));
  return e;
}

// Stream b waits on an event of stream a: syncing b runs a up to the record and no further.
void test_event_order() {
  cudaStream_t a = new_stream(cudaStreamNonBlocking), b = new_stream(cudaStreamNonBlocking);
  cudaEvent_t e1 = new_event(), e2 = new_event();
  int *x = dev_alloc<int>(kN), *y = dev_alloc<int>(kN), *z = dev_alloc<int>(kN);
  simt::reset_stream_counters();
  EXPECT_OK(cudaMemsetAsync(x, 0, kN * sizeof(int), a));
  stream_affine(x, 1, 1, kN, a);  // x = 1
  EXPECT_OK(cudaEventRecord(e1, a));
  stream_affine(z, 0, 7, kN, a);  // z = 7, after e1
  EXPECT_OK(cudaEventRecord(e2, a));
  EXPECT_OK(cudaStreamWaitEvent(b, e1, 0));
  EXPECT_OK(cudaMemcpyAsync(y, x, kN * sizeof(int), cudaMemcpyDeviceToDevice, b));
  stream_affine(y, 2, 5, kN, b);  // y = 2 * x + 5 = 7
  EXPECT(simt::pending_work() == 5);
  EXPECT(unwritten(x, kN) && unwritten(y, kN) && unwritten(z, kN));
  EXPECT_EQ_ERR(cudaEventQuery(e1), cudaErrorNotReady);
  EXPECT_EQ_ERR(cudaStreamQuery(b), cudaErrorNotReady);
  EXPECT_OK(cudaStreamSynchronize(b));
  EXPECT(all_eq(x, 1) && all_eq(y, 7));
  EXPECT(unwritten(z, kN));  // queued after e1: b's wait does not cover it
  EXPECT_OK(cudaEventQuery(e1));
  EXPECT_EQ_ERR(cudaEventQuery(e2), cudaErrorNotReady);
  EXPECT(simt::pending_work() == 1);
  EXPECT_OK(cudaEventSynchronize(e2));
  EXPECT(all_eq(z, 7) && simt::pending_work() == 0);
  EXPECT_OK(cudaStreamQuery(a));
  const simt::StreamCounters c = simt::stream_counters();
  EXPECT(c.stream_syncs == 1 && c.event_syncs == 1 && c.host_waits == 2);
  EXPECT(c.launches == 3 && c.async_copies == 2 && c.pageable_copies == 0);
  EXPECT_OK(cudaEventDestroy(e1));
  EXPECT_OK(cudaEventDestroy(e2));
  EXPECT_OK(cudaStreamDestroy(a));
  EXPECT_OK(cudaStreamDestroy(b));
  for (int *p : {x, y, z}) EXPECT_OK(cudaFree(p));
}

// The legacy null stream: its work and a synchronous cudaMemcpy wait for the blocking streams'
// earlier work and order their later work, but not a cudaStreamNonBlocking stream's.
void test_null_stream() {
  cudaStream_t blocking = new_stream(cudaStreamDefault);
  cudaStream_t nonblocking = new_stream(cudaStreamNonBlocking);
  int *x = dev_alloc<int>(kN), *y = dev_alloc<int>(kN), h[kN];
  simt::reset_stream_counters();
  stream_affine(x, 0, 3, kN, blocking);
  stream_affine(y, 0, 4, kN, nonblocking);
  EXPECT_OK(cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost));
  EXPECT(all_eq(h, 3));
  EXPECT(unwritten(y, kN));
  stream_affine(x, 1, 1, kN, nullptr);   // x = 4 on the null stream
  stream_affine(x, 2, 0, kN, blocking);  // x = 8, after it
  EXPECT_OK(cudaStreamSynchronize(blocking));
  EXPECT(all_eq(x, 8) && unwritten(y, kN));
  EXPECT_OK(cudaStreamSynchronize(nonblocking));
  EXPECT(all_eq(y, 4));
  stream_affine(y, 1, 1, kN, nonblocking);
  EXPECT_OK(cudaFree(x));  // cudaFree syncs the whole device
  EXPECT(all_eq(y, 5));
  const simt::StreamCounters c = simt::stream_counters();
  EXPECT(c.implicit_syncs == 2 && c.stream_syncs == 2 && c.host_waits == 4 && c.frees == 1);
  EXPECT_OK(cudaFree(y));
  EXPECT_OK(cudaStreamDestroy(blocking));
  EXPECT_OK(cudaStreamDestroy(nonblocking));
}

// A result copied back to pinned memory is there only once the host waited for it.
void test_read_after_wait() {
  cudaStream_t s = new_stream(cudaStreamDefault);
  int *d = dev_alloc<int>(kN), *out = pinned_alloc<int>(kN);
  simt::reset_stream_counters();
  EXPECT_OK(cudaMemsetAsync(d, 0, kN * sizeof(int), s));
  stream_affine(d, 1, 9, kN, s);
  EXPECT_OK(cudaMemcpyAsync(out, d, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
  EXPECT(unwritten(out, kN));  // a host that reads now reads stale memory
  EXPECT_OK(cudaStreamSynchronize(s));
  EXPECT(all_eq(out, 9));
  EXPECT(simt::stream_counters().host_waits == 1);
  EXPECT_OK(cudaFree(d));
  EXPECT_OK(cudaFreeHost(out));
  EXPECT_OK(cudaStreamDestroy(s));
}

// An upload from pageable memory copies its source when queued; from pinned memory, when it
// runs. A download into pageable memory is deferred like any other.
void test_pageable_snapshot() {
  cudaStream_t s = new_stream(cudaStreamDefault);
  int page[kN], back[kN], rows[3 * 8], *pin = pinned_alloc<int>(kN);
  int *d1 = dev_alloc<int>(kN), *d2 = dev_alloc<int>(kN), *d3 = dev_alloc<int>(3 * 4);
  fill(page, 1), fill(pin, 1), fill(back, 0), fill(rows, 6, 3 * 8);
  simt::reset_stream_counters();
  EXPECT_OK(cudaMemcpyAsync(d1, page, sizeof page, cudaMemcpyHostToDevice, s));
  EXPECT_OK(cudaMemcpyAsync(d2, pin, kN * sizeof(int), cudaMemcpyDefault, s));
  EXPECT_OK(cudaMemcpy2DAsync(d3, 4 * sizeof(int), rows, 8 * sizeof(int), 4 * sizeof(int), 3,
                              cudaMemcpyHostToDevice, s));
  EXPECT_OK(cudaMemcpyAsync(back, d1, sizeof back, cudaMemcpyDeviceToHost, s));
  fill(page, 2), fill(pin, 2), fill(rows, 7, 3 * 8);  // rewritten before the uploads ran
  EXPECT(all_eq(back, 0));
  EXPECT_OK(cudaStreamSynchronize(s));
  EXPECT(all_eq(d1, 1) && all_eq(back, 1));  // the snapshot
  EXPECT(all_eq(d2, 2));                     // pinned: read when the copy ran
  EXPECT(all_eq(d3, 6, 3 * 4));
  const simt::StreamCounters c = simt::stream_counters();
  EXPECT(c.async_copies == 4 && c.pageable_copies == 3);
  EXPECT_EQ_ERR(cudaMemcpy2DAsync(d3, 4, rows, 8, 5, 1, cudaMemcpyHostToDevice, s),
                cudaErrorInvalidValue);  // wider than the pitch
  EXPECT_EQ_ERR(cudaMemcpyAsync(d1, page, 4, cudaMemcpyKind(9), s),
                cudaErrorInvalidMemcpyDirection);
  for (int *p : {d1, d2, d3}) EXPECT_OK(cudaFree(p));
  EXPECT_OK(cudaFreeHost(pin));
  EXPECT_OK(cudaStreamDestroy(s));
}

// Bad flags and handles are refused; destroying a stream runs its queued work; a launch with a
// bad configuration fails at the launch and queues nothing.
void test_handles() {
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  EXPECT_EQ_ERR(cudaStreamCreateWithFlags(&s, 4), cudaErrorInvalidValue);
  EXPECT_EQ_ERR(cudaEventCreateWithFlags(&e, cudaEventInterprocess), cudaErrorInvalidValue);
  s = new_stream(cudaStreamDefault);
  int *x = dev_alloc<int>(kN);
  stream_affine(x, 0, 2, kN, s);
  EXPECT_OK(cudaStreamDestroy(s));
  EXPECT(all_eq(x, 2));
  EXPECT_EQ_ERR(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ_ERR(cudaStreamDestroy(nullptr), cudaErrorInvalidResourceHandle);
  stream_affine(x, 0, 3, kN, s);
  EXPECT_EQ_ERR(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  stream_affine(x, 0, 3, 0, nullptr);  // a grid of 0 blocks
  EXPECT_EQ_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT(simt::pending_work() == 0 && all_eq(x, 2));
  e = new_event();
  EXPECT_OK(cudaEventSynchronize(e));  // never recorded: complete
  EXPECT_OK(cudaEventDestroy(e));
  EXPECT_EQ_ERR(cudaEventQuery(e), cudaErrorInvalidResourceHandle);
  EXPECT_OK(cudaFree(x));
}

}  // namespace

void test_deferred_streams() {
  test_event_order();
  test_null_stream();
  test_read_after_wait();
  test_pageable_snapshot();
  test_handles();
}

int main() {
  const char *env = getenv("SIMT_STREAMS");
  const bool env_deferred = env && strcmp(env, "deferred") == 0;
  EXPECT(simt::stream_mode() ==
         (env_deferred ? simt::StreamMode::deferred : simt::StreamMode::immediate));
  if (!env_deferred) {  // immediate: the work runs inside the call
    int *x = dev_alloc<int>(kN);
    stream_affine(x, 0, 5, kN, nullptr);
    EXPECT(all_eq(x, 5) && simt::pending_work() == 0);
    EXPECT_OK(cudaFree(x));
  }
  simt::set_stream_mode(simt::StreamMode::deferred);
  test_deferred_streams();
  for (simt::StreamMode mode : {simt::StreamMode::immediate, simt::StreamMode::deferred}) {
    simt::set_stream_mode(mode);
    test_capture();
  }
  printf("simt stream test: %s\n", g_failures ? "FAILED" : "passed");
  return g_failures ? 1 : 0;
}
