// The acceptance regime's script on the device (CUDA builds): the profile and the current prompt's
// continuation in device memory, as the table kernels/scripted_draft.cuh reads. Benchmarks only. Its
// memory comes from cudaMalloc, outside the VRAM budget's arena: a few KiB the planner does not count,
// so that a regime never changes the placement the run would have without it.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "bench/acceptance/acceptance_script.h"
#include "kernels/scripted_draft.cuh"
#include "moe/acceptance_profile.h"

namespace specgen::bench {

class DeviceScript {
 public:
  // Room for continuations of up to `capacity` tokens.
  static absl::StatusOr<std::shared_ptr<DeviceScript>> Create(const moe::AcceptanceProfile& profile, int64_t capacity);
  ~DeviceScript();
  DeviceScript(const DeviceScript&) = delete;
  DeviceScript& operator=(const DeviceScript&) = delete;

  // Copies the script's current prompt (its first position, continuation and key seed); waits for the
  // copy, between generations.
  absl::Status Upload(const AcceptanceScript& script);
  // What DeviceDraftHooks::script points at; its fields change with each Upload.
  const kernels::ScriptedDraftTable* table() const { return &table_; }

 private:
  DeviceScript() = default;

  kernels::ScriptedDraftTable table_;
  int32_t* continuation_ = nullptr;
  double* profile_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace specgen::bench
