// DeviceArena: all VRAM the CUDA backend uses comes from ONE cudaMalloc made up front from a byte
// budget (docs/design.md §6.8): allocation is a bump pointer with first-fit reuse of freed blocks, so
// running out of the budget is a Status naming what was being allocated, never a CUDA OOM mid-run,
// and allocating during CUDA graph capture is host-only bookkeeping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specgen {

class DeviceArena {
 public:
  static constexpr size_t kAlignment = 256;

  // Reserves `budget_bytes` of device memory on the current device.
  static absl::StatusOr<DeviceArena*> Create(size_t budget_bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // `bytes` (rounded up to kAlignment) of the budget; `what` names the allocation in the error.
  absl::StatusOr<void*> Allocate(size_t bytes, std::string_view what);
  // Returns a block obtained from Allocate (nullptr is ignored).
  void Free(void* p);
  // Forgets every allocation (callers must hold no block any more).
  void Reset();

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  // Live allocations: each pads its size up to kAlignment, so used() exceeds the bytes asked for by
  // less than kAlignment times this.
  size_t blocks() const { return live_.size(); }

 private:
  DeviceArena(char* base, size_t capacity) : base_(base), capacity_(capacity) {}

  char* base_;
  size_t capacity_;
  size_t top_ = 0;   // bump pointer (offset)
  size_t used_ = 0;  // bytes in live blocks
  size_t peak_ = 0;
  std::map<size_t, size_t> live_;  // offset → size
  std::multimap<size_t, size_t> free_by_size_;  // size → offset, blocks below top_ that were freed
};

}  // namespace specgen
