#include "bench/runner/model_cache.h"

#include <algorithm>

#include "engine/backend/make_backend.h"
#include "engine/core/byte_size.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "engine/io/tensor_check.h"
#include "engine/tokenizer/tokenizer_loader.h"

namespace specgen::bench {

std::string ResolveDevice(const std::string& device) {
  if (device != "auto") return device;
#if defined(SPECGEN_WITH_CUDA)
  if (CudaBackend::DeviceAvailable()) return "cuda";
#endif
  return "cpu";
}

absl::Status ModelCache::UseBackend(const BackendKey& key) {
  if (backend_key_ == key) return absl::OkStatus();
  lms_.clear();
  backend_.reset();
  cuda_ = nullptr;
  vram_budget_ = 0;
  backend_key_.reset();
  BackendOptions options;
  options.cpu_threads = key.threads;
  if (!key.budget.empty()) {
    ASSIGN_OR_RETURN(options.vram_bytes, ParseByteSize(key.budget));
  }
  ASSIGN_OR_RETURN(MadeBackend made, MakeDeviceBackend(key.device, options));
  backend_ = std::move(made.backend);
  cuda_ = made.cuda;
  vram_budget_ = made.vram_budget;
  backend_key_ = key;
  return absl::OkStatus();
}

void ModelCache::KeepOnly(const std::vector<LmKey>& keep) {
  for (auto it = lms_.begin(); it != lms_.end();) {
    if (std::find(keep.begin(), keep.end(), it->first) == keep.end()) {
      it = lms_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<CachedLm*> ModelCache::Get(const BackendKey& key, const std::string& path, int64_t context,
                                          const moe::RunPlan& placement) {
  RETURN_IF_ERROR(UseBackend(key));
  auto& slot = lms_[LmKey{path, context, placement.expert_cache_slots, placement.prefill_chunk}];
  if (slot) return slot.get();
  auto& weights = weights_[path];
  if (!weights) {
    ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> loaded, LoadModel(path));
    // As the CLI does (docs/design.md §7): a NaN weight would time a run of NaN logits.
    if (SourceKind(path) != ModelSourceKind::kSynth) RETURN_IF_ERROR(CheckTensorsFinite(loaded->weights, path));
    weights = std::move(loaded);
    ++weight_loads_[path];
    ASSIGN_OR_RETURN(tokenizers_[path], LoadTokenizerIfPresent(path));
  }
  auto lm = std::make_unique<CachedLm>();
  TransformerOptions options;
  options.max_context = context;
  options.expert_cache_slots = placement.expert_cache_slots;
  options.prefill_chunk = placement.prefill_chunk;
  absl::StatusOr<std::unique_ptr<Transformer>> made = Transformer::Create(weights, backend_.get(), options);
  if (!made.ok()) {
    lms_.erase(LmKey{path, context, placement.expert_cache_slots, placement.prefill_chunk});
    return made.status();
  }
  lm->lm = *std::move(made);
  lm->tokenizer = tokenizers_[path].get();
  slot = std::move(lm);
  return slot.get();
}

int ModelCache::weight_loads(const std::string& path) const {
  auto it = weight_loads_.find(path);
  return it == weight_loads_.end() ? 0 : it->second;
}

}  // namespace specgen::bench
