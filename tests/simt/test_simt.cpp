// The emulator's own test: collectives compute what CUDA specifies, barriers hold in every
// resume order, unwritten memory reads as NaN, and each misuse aborts with a message naming it
// (checked in a forked child).
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <string>

#include "simt_selftest.cuh"

namespace {

int failures = 0;

void expect(bool ok, const char *what) {
  if (!ok) fprintf(stderr, "FAIL %s\n", what), failures++;
}

// Device memory for n elements of T. Through a void * of its own: cudaMalloc writing a void *
// into an int * object (the usual cast of &d to void **) is type punning.
template <class T> T *dev_alloc(size_t n) {
  void *p = nullptr;
  expect(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess, "cudaMalloc");
  return static_cast<T *>(p);
}

// Runs f in a child; expects it to abort with `message` in its stderr.
template <class F> void expect_abort(const char *what, const char *message, F f) {
  int fds[2];
  if (pipe(fds) != 0) return expect(false, "pipe");
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    f();
    _exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const bool ok =
      WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && err.find(message) != std::string::npos;
  if (!ok) fprintf(stderr, "FAIL %s: child said: %s\n", what, err.c_str()), failures++;
}

void test_collectives() {
  int h[64 * 6];
  int *d = dev_alloc<int>(64 * 6);
  selftest_collectives(d);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, warp0 = t - lane, *o = h + t * 6;
    expect(o[0] == 32 * warp0 + 496, "xor reduction");
    expect(o[1] == warp0 + 3, "shfl from lane 3");
    expect(o[2] == (lane % 8 == 0 ? t : t - 1), "shfl_up within width 8");
    expect(o[3] == (lane % 8 == 7 ? t : t + 1), "shfl_down within width 8");
    expect(unsigned(o[4]) == 0xAAAAAAAAu, "ballot of odd lanes");
    expect(o[5] == (t + 1) % 64, "static shared memory across a barrier");
  }
}

void test_memory() {
  int *counter = dev_alloc<int>(1), got = 0;
  cudaMemset(counter, 0, sizeof(int));
  selftest_atomic(counter);
  cudaMemcpy(&got, counter, sizeof got, cudaMemcpyDeviceToHost);
  expect(got == 8 * 64, "atomicAdd over blocks");
  cudaFree(counter);
  float h[32];
  float *d = dev_alloc<float>(32);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  expect(std::isnan(h[0]) && std::isnan(h[31]), "cudaMalloc memory reads as NaN");
  selftest_smem_poison(d);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  expect(std::isnan(h[0]) && std::isnan(h[31]), "dynamic shared memory starts as NaN");
  cudaFree(d);
  selftest_too_many_threads();
  expect(cudaGetLastError() != cudaSuccess, "2048 threads per block is refused");
  expect(cudaGetLastError() == cudaSuccess, "cudaGetLastError clears the error");
}

}  // namespace

int main() {
  test_collectives();
  test_memory();
  int *d = dev_alloc<int>(32);
  expect_abort("divergent barrier", "divergent __syncthreads",
               [] { selftest_divergent_barrier(); });
  expect_abort("exit before barrier", "exited", [] { selftest_exit_before_barrier(); });
  expect_abort("shuffle with an exited lane", "has exited", [d] { selftest_exited_lane(d); });
  expect_abort("mask without the caller", "leaves it out", [d] { selftest_bad_mask(d); });
  cudaFree(d);
  printf("simt self-test: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
