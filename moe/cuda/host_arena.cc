#include "moe/cuda/host_arena.h"

#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/core/status_macros.h"
#include "kernels/cuda_check.h"

namespace specgen {
namespace {

constexpr size_t kPageAlignment = size_t{2} << 20;  // a huge page: fewer entries for the driver to pin

int Threads(int threads) {
  if (threads > 0) return threads;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// f(i) for i in [0, n) on `threads` threads, each taking the next index.
template <typename F>
void ParallelFor(size_t n, int threads, F f) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  const int used = static_cast<int>(std::min<size_t>(n, static_cast<size_t>(threads)));
  for (int i = 0; i < used; ++i) {
    pool.emplace_back([&] {
      for (size_t k = next++; k < n; k = next++) f(k);
    });
  }
  for (auto& t : pool) t.join();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostArena>> HostArena::Create(size_t bytes, int threads) {
  if (bytes == 0) return InvalidArgument("host arena: a size of 0 bytes");
  const size_t size = (bytes + kPageAlignment - 1) / kPageAlignment * kPageAlignment;
  void* p = std::aligned_alloc(kPageAlignment, size);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(Cat("host arena: cannot allocate ", size, " bytes of host memory"));
  }
  (void)madvise(p, size, MADV_HUGEPAGE);  // a hint; fine to be refused
  // The first touch maps the pages: on many threads here, rather than one page at a time in the driver.
  constexpr size_t kTouch = size_t{64} << 20;
  ParallelFor((size + kTouch - 1) / kTouch, Threads(threads), [&](size_t i) {
    std::memset(static_cast<char*>(p) + i * kTouch, 0, std::min(kTouch, size - i * kTouch));
  });
  const cudaError_t reg = cudaHostRegister(p, size, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (reg != cudaSuccess) {
    std::free(p);
    (void)cudaGetLastError();
    return absl::ResourceExhaustedError(Cat("host arena: cannot pin ", size, " bytes of host memory (",
                                            cudaGetErrorString(reg), ")"));
  }
  void* device = nullptr;
  const cudaError_t mapped = cudaHostGetDevicePointer(&device, p, 0);
  if (mapped != cudaSuccess) {
    cudaHostUnregister(p);
    std::free(p);
    (void)cudaGetLastError();
    return absl::InternalError(Cat("host arena: no device address for pinned memory (", cudaGetErrorString(mapped),
                                   ")"));
  }
  return std::unique_ptr<HostArena>(new HostArena(static_cast<char*>(p), static_cast<const char*>(device), size));
}

HostArena::~HostArena() {
  cudaHostUnregister(host_);
  std::free(host_);
}

absl::Status HostArena::Fill(std::span<const Job> jobs, const CopyProgress& progress, int threads) {
  size_t total = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].offset > bytes_ || jobs[i].bytes > bytes_ - jobs[i].offset || !jobs[i].write) {
      return InvalidArgument("host arena: piece ", i, " of ", jobs[i].bytes, " bytes at ", jobs[i].offset,
                             " does not fit the ", bytes_, "-byte arena");
    }
    total += jobs[i].bytes;
  }
  std::atomic<size_t> done{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  absl::Status error;
  std::mutex finished_mu;
  std::condition_variable finished_cv;
  bool finished = false;
  std::thread worker([&] {
    ParallelFor(jobs.size(), Threads(threads), [&](size_t i) {
      if (failed.load()) return;
      const absl::Status s = jobs[i].write(host_ + jobs[i].offset);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (error.ok()) error = s;
        failed = true;
      }
      done += jobs[i].bytes;
    });
    std::lock_guard<std::mutex> lock(finished_mu);
    finished = true;
    finished_cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(finished_mu);
    while (!finished_cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return finished; })) {
      if (progress) progress(done.load(), total);
    }
  }
  worker.join();
  if (progress) progress(done.load(), total);
  return error;
}

}  // namespace specgen
