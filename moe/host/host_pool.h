// HostPool: the host expert path's persistent worker threads, each pinned to its own physical core
// (pthread affinity), so that a layer's products start without thread creation and run where their
// caches stay warm. ParallelFor hands contiguous chunks of rows to the workers; which thread computes a
// row never changes its bits (each row is computed whole by one thread, docs/design.md §12.1).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace specgen::moe_host {

// One CPU of each physical core this process may run on (its sched_getaffinity set; cores told apart
// by sysfs' package and core ids, so SMT siblings count once), ascending.
std::vector<int> OneCpuPerPhysicalCore();

class HostPool {
 public:
  struct Options {
    int threads = 0;   // <= 0: one per physical core (OneCpuPerPhysicalCore)
    bool pin = true;   // pin worker i to the i-th CPU of OneCpuPerPhysicalCore (wrapping)
  };
  explicit HostPool(Options options);
  HostPool() : HostPool(Options{}) {}
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }
  // The CPU worker i is pinned to, or -1 (not pinned, or pinning failed).
  int cpu(int i) const { return cpus_[static_cast<size_t>(i)]; }

  // fn(begin, end, thread) for contiguous chunks covering [0, n), chunk i on worker i; returns when all
  // are done. The caller waits (it is the thread that drives the GPU, not one of the pinned workers).
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

  // Worker `thread`'s scratch, at least `bytes`, 64-byte aligned (kept between calls).
  uint8_t* Scratch(int thread, size_t bytes);

 private:
  void Loop(int index);

  std::vector<std::thread> workers_;
  std::vector<int> cpus_;
  std::vector<std::unique_ptr<uint8_t[]>> scratch_;
  std::vector<size_t> scratch_bytes_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace specgen::moe_host
