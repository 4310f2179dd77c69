// A small fixed thread pool for the CPU backend: parallel_for over n items, the calling thread
// working too. Items are claimed from an atomic counter, so uneven items balance themselves.
#pragma once

#include <atomic>
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

 private:
  void worker(uint32_t index);
  void drain(uint32_t index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t, uint32_t)> *fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  uint64_t generation_ = 0;
  uint32_t busy_ = 0;
  bool stop_ = false;
};

}  // namespace pkv
