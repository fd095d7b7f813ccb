#include "engine/backend/cpu/thread_pool.h"

#include <algorithm>

namespace specgen {
namespace {

// Chunk c of n split into `chunks` near-equal contiguous ranges.
std::pair<int64_t, int64_t> ChunkRange(int64_t n, int chunks, int c) {
  const int64_t base = n / chunks, extra = n % chunks;
  const int64_t begin = c * base + std::min<int64_t>(c, extra);
  return {begin, begin + base + (c < extra ? 1 : 0)};
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_parallel,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int chunks = static_cast<int>(std::min<int64_t>(n_threads(), n));
  if (chunks <= 1 || n < min_parallel) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    pending_ = chunks - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  const auto [begin, end] = ChunkRange(n, chunks, 0);
  fn(begin, end);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    int chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    if (index < chunks) {
      const auto [begin, end] = ChunkRange(n, chunks, index);
      (*job)(begin, end);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace specgen
