// The CPU backend's thread pool (src/backend/cpu/thread_pool.cpp) under ThreadSanitizer: its
// handover (spinning, then sleeping on condition variables) loses no item and no wake-up, and
// publishes each item's writes to the caller. Pools of 2, 3 and 8 threads:
//  - 3000 back-to-back calls of 0 to 16 items (the workers catch them while spinning);
//  - calls 300 us apart, beyond ThreadPool::kSpin (the workers sleep and are woken);
//  - destruction right after a call (workers spinning) and after a pause (workers asleep).
// Each item adds to its own plain int, which the caller reads after parallel_for returns, and
// checks the thread index it is given.
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace {

int failures = 0;

void fail(const char *what, uint32_t threads, int call) {
  if (failures++ < 10) std::fprintf(stderr, "FAIL %s (%u threads, call %d)\n", what, threads, call);
}

void run_calls(pkv::ThreadPool &pool, uint32_t threads, int calls, size_t max_items,
               std::chrono::microseconds pause) {
  for (int call = 0; call < calls; ++call) {
    const size_t n = size_t(call) % (max_items + 1);
    std::vector<int> out(n, 0);
    std::vector<uint32_t> thread_of(n, ~0u);
    pool.parallel_for(n, [&](size_t i, uint32_t t) {
      out[i] += int(i) + 1;
      thread_of[i] = t;
    });
    for (size_t i = 0; i < n; ++i) {
      if (out[i] != int(i) + 1) fail("an item ran not exactly once", threads, call);
      if (thread_of[i] >= threads) fail("a thread index out of range", threads, call);
    }
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
}

}  // namespace

int main() {
  for (uint32_t threads : {2u, 3u, 8u}) {
    {
      pkv::ThreadPool pool(threads);
      if (pool.num_threads() != threads) fail("num_threads", threads, -1);
      run_calls(pool, threads, 3000, 16, std::chrono::microseconds(0));
      run_calls(pool, threads, 40, 64, pkv::ThreadPool::kSpin * 6);
      run_calls(pool, threads, 5, 8, std::chrono::microseconds(0));
    }  // destroyed while its workers spin
    {
      pkv::ThreadPool pool(threads);
      run_calls(pool, threads, 3, 8, std::chrono::microseconds(0));
      std::this_thread::sleep_for(pkv::ThreadPool::kSpin * 20);
    }  // destroyed while they sleep
  }
  std::printf("%s\n", failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
