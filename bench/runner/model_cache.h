// The models specgen_bench's benchmarks run, loaded once per process: weights once per path (the
// LoadedModel, whatever the device), and one Transformer per (path, context) on the backend of the
// current (device, VRAM budget, threads). A benchmark on another backend releases the current one
// first (a second CUDA arena would hold a second budget's memory), so benchmarks are registered
// grouped by backend and each group loads its models once.
#pragma once

#include <map>
#include <optional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/runner/pairing_config.h"
#include "engine/backend/backend.h"
#include "engine/io/weight_set.h"
#include "engine/model/transformer.h"
#include "moe/run_plan.h"
#include "engine/tokenizer/tokenizer.h"

namespace specgen {
class CudaBackend;
}  // namespace specgen

namespace specgen::bench {

// "auto" resolved to what MakeBackend would pick on this machine: "cuda" or "cpu".
std::string ResolveDevice(const std::string& device);

struct BackendKey {
  std::string device;  // resolved: cpu or cuda
  std::string budget;  // VRAM budget text; empty: the default
  int threads = 0;
  auto operator<=>(const BackendKey&) const = default;
};

struct CachedLm {
  std::unique_ptr<Transformer> lm;
  const Tokenizer* tokenizer = nullptr;  // null: the model has none
};

// A Transformer of the cache: its path, context and offload placement (expert-cache slots, prefill chunk).
struct LmKey {
  std::string path;
  int64_t context = 0;
  int64_t expert_cache_slots = -1;
  int64_t prefill_chunk = 0;
  auto operator<=>(const LmKey&) const = default;
};

class ModelCache {
 public:
  // The model at `path` with room for `context` positions on `key`'s backend, placed as `placement`
  // says (the offload plan's; the default: every expert resident).
  absl::StatusOr<CachedLm*> Get(const BackendKey& key, const std::string& path, int64_t context,
                                const moe::RunPlan& placement = {});
  // Drops every Transformer but `keep` from the current backend: an offload plan counts only its run's
  // models, so the device memory of others must be free before its models load.
  void KeepOnly(const std::vector<LmKey>& keep);
  // The models on the current backend.
  size_t loaded() const { return lms_.size(); }
  // The CUDA arena's size (what the offload planner may place); 0 on the CPU or before any backend.
  size_t vram_budget() const { return vram_budget_; }
  Backend* backend() const { return backend_.get(); }
  // The current backend when it is the CUDA backend (what MakeSpeculativeLoop takes), else null.
  CudaBackend* cuda() const { return cuda_; }
  // Loads counted per path, for the tests that check nothing loads twice.
  int weight_loads(const std::string& path) const;
  // Makes `key`'s backend the current one (releasing another and its models).
  absl::Status UseBackend(const BackendKey& key);

 private:

  std::map<std::string, std::shared_ptr<const LoadedModel>> weights_;
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers_;
  std::map<std::string, int> weight_loads_;
  std::optional<BackendKey> backend_key_;
  std::unique_ptr<Backend> backend_;  // declared before lms_: the models go first
  CudaBackend* cuda_ = nullptr;
  size_t vram_budget_ = 0;
  std::map<LmKey, std::unique_ptr<CachedLm>> lms_;
};

}  // namespace specgen::bench
