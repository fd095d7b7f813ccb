#include "bench/e2e_gpu/bench_models.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "engine/core/status_macros.h"
#include "engine/io/synth.h"

namespace specgen::e2e {

std::filesystem::path SourceDir() {
  if (const char* env = std::getenv("SPECGEN_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  if (std::filesystem::exists("models")) return std::filesystem::current_path();
  return SPECGEN_SOURCE_DIR;
}

absl::StatusOr<std::unique_ptr<QwenDraft>> MakeQwenDraft(bool narrow, const std::string& name) {
  auto d = std::make_unique<QwenDraft>();
  ASSIGN_OR_RETURN(d->spec, SynthSpec(name));
  if (narrow) {
    d->spec.n_heads = 2;
    d->spec.n_kv_heads = 1;
    d->spec.ffn_dim = 256;
    d->spec.vocab_size = 4096;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> weights, SynthWeights(d->spec, DType::kBF16, 1));
  ASSIGN_OR_RETURN(const size_t weight_bytes, SynthBytes(d->spec, DType::kBF16));
  CudaBackendOptions o;
  o.arena_bytes = std::max(size_t{4} << 30, weight_bytes + (size_t{2} << 30));
  o.gemv_order = kernels::GemvOrder::kFma;  // the order this benchmark's recorded rows measure
  ASSIGN_OR_RETURN(d->backend, CudaBackend::Create(o));
  TransformerOptions topt;
  topt.max_context = 2048;
  ASSIGN_OR_RETURN(d->lm, Transformer::Create(std::shared_ptr<const LoadedModel>(std::move(weights)),
                                              d->backend.get(), topt));
  return d;
}

std::unique_ptr<QwenDraft> QwenDraftOrSkip(benchmark::State& state, bool narrow, const std::string& name) {
  if (!CudaBackend::DeviceAvailable()) {
    state.SkipWithError("no CUDA device");
    return nullptr;
  }
  auto d = MakeQwenDraft(narrow, name);
  if (!d.ok()) {
    state.SkipWithError(std::string(d.status().message()).c_str());
    return nullptr;
  }
  return std::move(d).value();
}

}  // namespace specgen::e2e
