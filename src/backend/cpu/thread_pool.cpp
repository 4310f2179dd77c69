#include "backend/cpu/thread_pool.h"

namespace pkv {

ThreadPool::ThreadPool(uint32_t num_threads) {
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(num_threads - 1);
  for (uint32_t i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto &t : workers_) t.join();
}

void ThreadPool::drain(uint32_t index) {
  for (size_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < n_;) (*fn_)(i, index);
}

void ThreadPool::worker(uint32_t index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    drain(index);
    lock.lock();
    if (--busy_ == 0) done_.notify_one();
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, uint32_t)> &fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    n_ = n;
    next_.store(0, std::memory_order_relaxed);
    busy_ = static_cast<uint32_t>(workers_.size());
    generation_++;
  }
  wake_.notify_all();
  drain(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return busy_ == 0; });
  fn_ = nullptr;
}

}  // namespace pkv
