#include "engine/cli/resource_check.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "engine/core/byte_size.h"
#include "engine/core/host_memory.h"
#include "engine/core/status_macros.h"
#include "engine/model/kv_cache.h"
#if defined(SPECGEN_WITH_CUDA)
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace specgen::cli {
namespace {

// The default context when -c is 0, as Transformer::Create picks it.
int64_t DefaultContext(const ModelSpec& spec) { return std::min<int64_t>(spec.context_length, 4096); }

}  // namespace

absl::StatusOr<int> CheckThreads(int requested, std::string_view flag) {
  if (requested < 0) {
    return InvalidArgument(flag, " ", requested,
                           ": the thread count must be >= 1 (0 = every hardware thread)");
  }
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int most = kMaxThreadsPerHardwareThread * hardware;
  if (requested > most) {
    return InvalidArgument(flag, " ", requested, ": this machine has ", hardware,
                           " hardware threads; more than ", most,
                           " threads would only slow the run down (0 = every hardware thread)");
  }
  return requested;
}

double KvCacheBytes(const ModelSpec& spec, int64_t context, DType kv_type, const Backend& backend) {
  const DType stored = backend.name() == "cpu" ? DType::kF32 : kv_type;
  return KvCache::Bytes(spec.n_layers, context, spec.kv_dim(), stored);
}


absl::StatusOr<int64_t> CheckContext(int64_t requested, const ModelSpec& target, const ModelSpec* draft,
                                     Backend& backend, DType kv_type) {
  if (requested < 0) return InvalidArgument("-c ", requested, ": the context must be >= 1 (0 = the default)");
  const int64_t context = requested > 0 ? requested : DefaultContext(target);
  double kv = KvCacheBytes(target, context, kv_type, backend);
  if (draft != nullptr) kv += KvCacheBytes(*draft, context, kv_type, backend);
  const double per_position = kv / static_cast<double>(context);

  std::string pool = "host memory available";
  double room = 0;
#if defined(SPECGEN_WITH_CUDA)
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend)) {
    room = static_cast<double>(cuda->arena().capacity());
    pool = "GPU memory budget (--vram-budget)";
  } else {
    room = HostMemoryAvailable();
  }
#else
  (void)backend;
  room = HostMemoryAvailable();
#endif
  if (room > 0 && kv > room) {
    const int64_t fits = static_cast<int64_t>(room / per_position);
    return absl::ResourceExhaustedError(
        Cat("-c ", context, ": the KV cache",
            draft != nullptr ? "s of the target and the draft need " : " needs ", FormatBytes(kv),
            ", more than the ", FormatBytes(room), " of ", pool, "; at most -c ", fits,
            " fits (the model was trained on ", target.context_length, ")"));
  }
  if (requested > target.context_length) {
    std::fprintf(stderr,
                 "warning: -c %lld exceeds the context length the model was trained on (%lld); "
                 "positions past it may give degraded output\n",
                 static_cast<long long>(requested), static_cast<long long>(target.context_length));
  }
  return context;
}

}  // namespace specgen::cli
