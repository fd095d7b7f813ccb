// HostArena: ONE pinned host allocation for every streamed weight (docs/design.md §2, §12). Allocated
// with plain page-aligned memory, its pages touched by many threads, then registered with
// cudaHostRegister as mapped memory, so that copies from it run at PCIe speed and kernels can read it
// through a device address (the expert cache's gather). Never a registered file mapping and never one
// cudaMallocHost per tensor: both are slow or hang at tens of GB. Weights are copied in by Fill, in
// parallel, with a progress callback.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specgen {

// Called with (bytes done, bytes in all), from the thread that called Fill, at most every ~50 ms and
// once at the end.
using CopyProgress = std::function<void(size_t done, size_t total)>;

class HostArena {
 public:
  // `bytes` of pinned, mapped host memory; `threads` <= 0: every hardware thread. ResourceExhausted
  // naming the size when the host cannot give or pin it.
  static absl::StatusOr<std::unique_ptr<HostArena>> Create(size_t bytes, int threads = 0);
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  char* host() const { return host_; }
  // The same memory as a device address (for kernels reading it over PCIe).
  const char* device() const { return device_; }
  size_t size() const { return bytes_; }

  // One piece of the arena's contents: `write` fills [offset, offset + bytes) (it may run on any thread).
  struct Job {
    size_t offset = 0;
    size_t bytes = 0;
    std::function<absl::Status(void* dst)> write;
  };
  // Runs every job on `threads` threads (<= 0: every hardware thread); the first error stops the rest
  // and is returned. A job outside the arena is an InvalidArgument before anything runs.
  absl::Status Fill(std::span<const Job> jobs, const CopyProgress& progress = {}, int threads = 0);

 private:
  HostArena(char* host, const char* device, size_t bytes) : host_(host), device_(device), bytes_(bytes) {}
  char* host_;
  const char* device_;
  size_t bytes_;
};

}  // namespace specgen
