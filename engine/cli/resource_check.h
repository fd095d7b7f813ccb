// The one place that checks the sizes a user chooses before anything is allocated: thread counts
// against the machine, and the context against the model's trained length and the memory its KV
// caches would take (host RAM on the CPU backend, the VRAM arena on the GPU). A size that cannot work
// is a clear error naming the flag and what would fit, never a std::bad_alloc or an OOM kill.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/core/host_memory.h"  // HostMemoryAvailable, for the checks here and their callers
#include "engine/backend/backend.h"
#include "engine/model/model_spec.h"

namespace specgen::cli {

// `requested` threads for `flag` (-t, --threads): 0 means every hardware thread and is returned as
// 0 (the backends read it so); negative counts are refused, and so is anything above
// kMaxThreadsPerHardwareThread times the hardware threads (each is a real OS thread).
inline constexpr int kMaxThreadsPerHardwareThread = 4;
absl::StatusOr<int> CheckThreads(int requested, std::string_view flag);

// The context a run gets from -c (`requested`; 0: min(trained length, 4096), as Transformer
// chooses), after these checks: -c must be >= 0; above the target's trained length a warning goes to
// stderr (positions past it were never trained); the KV caches of the target and (if any) the draft
// at that context, stored in `kv_type`, must fit the memory `backend` allocates them from. `draft` may
// be null.
absl::StatusOr<int64_t> CheckContext(int64_t requested, const ModelSpec& target, const ModelSpec* draft,
                                     Backend& backend, DType kv_type);

// Bytes of the K and V caches of `spec` at `context` positions in `kv_type` (a double: no overflow).
// The CPU keeps a 16-bit cache's rounded values in fp32 storage, so there it costs fp32's bytes.
double KvCacheBytes(const ModelSpec& spec, int64_t context, DType kv_type, const Backend& backend);


}  // namespace specgen::cli
