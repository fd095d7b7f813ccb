#include "bench/runner/model_cache.h"

#include "engine/backend/make_backend.h"
#include "engine/core/byte_size.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
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
  backend_key_.reset();
  BackendOptions options;
  options.cpu_threads = key.threads;
  if (!key.budget.empty()) {
    ASSIGN_OR_RETURN(options.vram_bytes, ParseByteSize(key.budget));
  }
  ASSIGN_OR_RETURN(MadeBackend made, MakeDeviceBackend(key.device, options));
  backend_ = std::move(made.backend);
  cuda_ = made.cuda;
  backend_key_ = key;
  return absl::OkStatus();
}

absl::StatusOr<CachedLm*> ModelCache::Get(const BackendKey& key, const std::string& path, int64_t context) {
  RETURN_IF_ERROR(UseBackend(key));
  auto& slot = lms_[{path, context}];
  if (slot) return slot.get();
  auto& weights = weights_[path];
  if (!weights) {
    ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> loaded, LoadModel(path));
    weights = std::move(loaded);
    ++weight_loads_[path];
    ASSIGN_OR_RETURN(tokenizers_[path], LoadTokenizerIfPresent(path));
  }
  auto lm = std::make_unique<CachedLm>();
  TransformerOptions options;
  options.max_context = context;
  ASSIGN_OR_RETURN(lm->lm, Transformer::Create(weights, backend_.get(), options));
  lm->tokenizer = tokenizers_[path].get();
  slot = std::move(lm);
  return slot.get();
}

int ModelCache::weight_loads(const std::string& path) const {
  auto it = weight_loads_.find(path);
  return it == weight_loads_.end() ? 0 : it->second;
}

}  // namespace specgen::bench
