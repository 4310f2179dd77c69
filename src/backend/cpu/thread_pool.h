// A small fixed thread pool for the CPU backend: parallel_for over n items, the calling thread
// working too. Items are claimed from an atomic counter, so uneven items balance themselves.
// Handing work over: waiting threads (idle workers, and the caller waiting for the last item)
// spin for up to kSpin before they block on a condition variable. pkv_attention runs once per
// layer, and a decode of one short context is a fraction of a millisecond per layer: sleeping
// and being woken through the kernel every time cost a quarter of such a step (see
// bench_attention's 1-sequence 2k rows). The spin is short so that between calls the workers
// give the host's own threads (its GEMMs) the cores back.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pkv {

class ThreadPool {
 public:
  explicit ThreadPool(uint32_t num_threads);  // total, the caller included; 0 = one per core
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  uint32_t num_threads() const { return static_cast<uint32_t>(workers_.size()) + 1; }
  // Runs fn(item, thread_index) for item in [0, n). Returns when all are done. Not reentrant.
  void parallel_for(size_t n, const std::function<void(size_t, uint32_t)> &fn);

  static constexpr std::chrono::microseconds kSpin{50};

 private:
  void worker(uint32_t index);
  void drain(uint32_t index);

  std::vector<std::thread> workers_;
  // Written by parallel_for before it publishes a generation (release), read by the workers
  // after they see it (acquire).
  const std::function<void(size_t, uint32_t)> *fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  std::atomic<uint64_t> generation_{0};  // one more per parallel_for (and at the end)
  std::atomic<uint32_t> busy_{0};        // workers not yet done with this generation
  std::atomic<bool> stop_{false};
  std::mutex mutex_;  // guards the sleeping: sleepers_, caller_waits_
  std::condition_variable wake_, done_;
  uint32_t sleepers_ = 0;      // workers blocked on wake_
  bool caller_waits_ = false;  // parallel_for blocked on done_
};

}  // namespace pkv
