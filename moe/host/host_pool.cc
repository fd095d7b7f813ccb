#include "moe/host/host_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace specgen::moe_host {
namespace {

int ReadInt(const std::string& path, int fallback) {
  std::ifstream f(path);
  int v;
  return (f >> v) ? v : fallback;
}

// Chunk c of n split into `chunks` near-equal contiguous ranges.
std::pair<int64_t, int64_t> Chunk(int64_t n, int chunks, int c) {
  const int64_t base = n / chunks, extra = n % chunks;
  const int64_t begin = c * base + std::min<int64_t>(c, extra);
  return {begin, begin + base + (c < extra ? 1 : 0)};
}

}  // namespace

std::vector<int> OneCpuPerPhysicalCore() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return {0};
  std::set<std::pair<int, int>> seen;  // (package, core)
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string topo = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    // Without sysfs every CPU counts as its own core.
    const int package = ReadInt(topo + "physical_package_id", 0), core = ReadInt(topo + "core_id", cpu);
    if (seen.insert({package, core}).second) out.push_back(cpu);
  }
  if (out.empty()) out.push_back(0);
  return out;
}

HostPool::HostPool(Options options) {
  const std::vector<int> cores = OneCpuPerPhysicalCore();
  const int n = options.threads > 0 ? options.threads : static_cast<int>(cores.size());
  cpus_.assign(static_cast<size_t>(n), -1);
  scratch_.resize(static_cast<size_t>(n));
  scratch_bytes_.assign(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    workers_.emplace_back([this, i] { Loop(i); });
    if (!options.pin) continue;
    const int cpu = cores[static_cast<size_t>(i) % cores.size()];
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    // A failure (a container forbidding it) leaves the thread unpinned: slower, never wrong.
    if (pthread_setaffinity_np(workers_.back().native_handle(), sizeof one, &one) == 0) cpus_[i] = cpu;
  }
}

HostPool::~HostPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

uint8_t* HostPool::Scratch(int thread, size_t bytes) {
  const size_t t = static_cast<size_t>(thread);
  if (scratch_bytes_[t] < bytes) {
    scratch_[t] = std::make_unique<uint8_t[]>(bytes + 64);
    scratch_bytes_[t] = bytes;
  }
  uint8_t* p = scratch_[t].get();
  return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
}

void HostPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  job_n_ = n;
  job_chunks_ = static_cast<int>(std::min<int64_t>(threads(), n));
  pending_ = job_chunks_;
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void HostPool::Loop(int index) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int64_t, int64_t, int)>* job;
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
    if (index >= chunks) continue;
    const auto [begin, end] = Chunk(n, chunks, index);
    (*job)(begin, end, index);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace specgen::moe_host
