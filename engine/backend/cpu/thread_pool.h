// ThreadPool: a fixed set of worker threads for the CPU backend's data-parallel loops. ParallelFor
// splits [0, n) into contiguous chunks, one per thread (the caller runs one), and returns when all are
// done. Which thread computes an element never changes its value: each output is computed whole by one
// thread, so results do not depend on the thread count.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace specgen {

class ThreadPool {
 public:
  // n_threads <= 0: std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) over chunks covering [0, n). Runs inline when n < min_parallel or one thread.
  void ParallelFor(int64_t n, int64_t min_parallel, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace specgen
