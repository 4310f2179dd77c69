#include "backend/cpu/thread_pool.h"

namespace pkv {

namespace {
// True once done() is; false if it still is not after ThreadPool::kSpin.
template <class Done> bool spin(Done done) {
  const auto until = std::chrono::steady_clock::now() + ThreadPool::kSpin;
  for (uint32_t i = 1;; ++i) {
    if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) return done();
  }
}
}  // namespace

ThreadPool::ThreadPool(uint32_t num_threads) {
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(num_threads - 1);
  for (uint32_t i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto &t : workers_) t.join();
}

void ThreadPool::drain(uint32_t index) {
  for (size_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < n_;) (*fn_)(i, index);
}

void ThreadPool::worker(uint32_t index) {
  uint64_t seen = 0;
  for (;;) {
    const auto fresh = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!spin(fresh)) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++sleepers_;
      wake_.wait(lock, fresh);
      --sleepers_;
    }
    if (stop_.load(std::memory_order_relaxed)) return;
    seen = generation_.load(std::memory_order_acquire);
    drain(index);
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {  // the last: the caller may sleep
      std::lock_guard<std::mutex> lock(mutex_);
      if (caller_waits_) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, uint32_t)> &fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  next_.store(0, std::memory_order_relaxed);
  busy_.store(static_cast<uint32_t>(workers_.size()), std::memory_order_relaxed);
  {
    // Under the lock: a worker going to sleep either sees the new generation or is counted and
    // woken.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
    if (sleepers_ != 0) wake_.notify_all();
  }
  drain(0);
  const auto done = [&] { return busy_.load(std::memory_order_acquire) == 0; };
  if (!spin(done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    caller_waits_ = true;
    done_.wait(lock, done);
    caller_waits_ = false;
  }
  fn_ = nullptr;
}

}  // namespace pkv
