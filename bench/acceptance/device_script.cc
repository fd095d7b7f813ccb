#include "bench/acceptance/device_script.h"

#include <cuda_runtime_api.h>

#include "engine/core/status_macros.h"

namespace specgen::bench {
namespace {

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(Cat("acceptance regime: ", what, ": ", cudaGetErrorString(e)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<DeviceScript>> DeviceScript::Create(const moe::AcceptanceProfile& profile,
                                                                   int64_t capacity) {
  if (profile.by_depth.empty() || capacity < 1) return InvalidArgument("acceptance regime: empty profile or capacity");
  std::shared_ptr<DeviceScript> d(new DeviceScript());
  d->capacity_ = capacity;
  RETURN_IF_ERROR(Check(cudaMalloc(reinterpret_cast<void**>(&d->continuation_), sizeof(int32_t) * capacity),
                        "allocating the continuation"));
  RETURN_IF_ERROR(Check(cudaMalloc(reinterpret_cast<void**>(&d->profile_), sizeof(double) * profile.by_depth.size()),
                        "allocating the profile"));
  RETURN_IF_ERROR(Check(cudaMemcpy(d->profile_, profile.by_depth.data(), sizeof(double) * profile.by_depth.size(),
                                   cudaMemcpyHostToDevice),
                        "copying the profile"));
  d->table_.continuation = d->continuation_;
  d->table_.profile = d->profile_;
  d->table_.profile_len = static_cast<int>(profile.by_depth.size());
  return d;
}

DeviceScript::~DeviceScript() {
  // The loop that launched kernels reading these is destroyed first and has waited for its stream.
  if (continuation_ != nullptr) cudaFree(continuation_);
  if (profile_ != nullptr) cudaFree(profile_);
}

absl::Status DeviceScript::Upload(const AcceptanceScript& script) {
  const std::vector<int32_t>& c = script.continuation();
  if (static_cast<int64_t>(c.size()) > capacity_) {
    return InvalidArgument("acceptance regime: a continuation of ", c.size(), " tokens exceeds the room for ",
                           capacity_);
  }
  // Synchronous: a generation's launches read it, and none is in flight between generations.
  if (!c.empty()) {
    RETURN_IF_ERROR(Check(cudaMemcpy(continuation_, c.data(), sizeof(int32_t) * c.size(), cudaMemcpyHostToDevice),
                          "copying the continuation"));
  }
  table_.first_position = script.prompt_len();
  table_.length = static_cast<int64_t>(c.size());
  table_.seed = script.key_seed();
  table_.vocab = script.vocab();
  return absl::OkStatus();
}

}  // namespace specgen::bench
