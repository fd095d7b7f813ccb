#include "engine/backend/cuda/device_arena.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "engine/core/status_macros.h"
#include "kernels/cuda_check.h"

namespace specgen {

absl::StatusOr<DeviceArena*> DeviceArena::Create(size_t budget_bytes) {
  if (budget_bytes == 0) return InvalidArgument("device arena: a budget of 0 bytes");
  void* p = nullptr;
  const absl::Status s = SPECGEN_CUDA_STATUS(cudaMalloc(&p, budget_bytes));
  if (!s.ok()) {
    return absl::ResourceExhaustedError(
        Cat("device arena: cannot reserve ", budget_bytes, " bytes of VRAM: ", s.message()));
  }
  return new DeviceArena(static_cast<char*>(p), budget_bytes);
}

DeviceArena::~DeviceArena() { cudaFree(base_); }

absl::StatusOr<void*> DeviceArena::Allocate(size_t bytes, std::string_view what) {
  const size_t size = std::max<size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  size_t offset;
  auto it = free_by_size_.lower_bound(size);
  if (it != free_by_size_.end() && it->first <= 2 * size) {  // reuse without wasting over half
    offset = it->second;
    const size_t block = it->first;
    free_by_size_.erase(it);
    live_[offset] = block;
    used_ += block;
  } else {
    if (size > capacity_ - top_) {
      return absl::ResourceExhaustedError(
          Cat("VRAM budget exceeded: ", what, " needs ", bytes, " bytes; ", used_, " of the ",
              capacity_, "-byte budget are in use (", capacity_ - top_,
              " contiguous left); raise --vram-budget"));
    }
    offset = top_;
    top_ += size;
    live_[offset] = size;
    used_ += size;
  }
  peak_ = std::max(peak_, used_);
  return static_cast<void*>(base_ + offset);
}

void DeviceArena::Free(void* p) {
  if (p == nullptr) return;
  const size_t offset = static_cast<size_t>(static_cast<char*>(p) - base_);
  auto it = live_.find(offset);
  if (it == live_.end()) return;
  const size_t size = it->second;
  live_.erase(it);
  used_ -= size;
  if (offset + size == top_) {
    top_ = offset;
    // Pull the bump pointer down over freed blocks that now end at the top.
    bool moved = true;
    while (moved) {
      moved = false;
      for (auto f = free_by_size_.begin(); f != free_by_size_.end(); ++f) {
        if (f->second + f->first == top_) {
          top_ = f->second;
          free_by_size_.erase(f);
          moved = true;
          break;
        }
      }
    }
  } else {
    free_by_size_.emplace(size, offset);
  }
}

void DeviceArena::Reset() {
  live_.clear();
  free_by_size_.clear();
  top_ = 0;
  used_ = 0;
}

}  // namespace specgen
