// WeightSet: every tensor of a model by role, layer and expert, whatever the file's naming. Loaders
// (GGUF, safetensors, synthetic presets) translate names and layouts into this one shape:
//   - matrices are row-major [out, in] (GGUF ne = [in, out]; HF Linear.weight is already [out, in]),
//     so y = W x reads W's rows; quantized blocks run along `in`;
//   - experts are addressed one at a time, each [out, in], whether the file stacks them or not;
//   - Q/K rows are as the file has them; ModelSpec::rope_style says how RoPE pairs them.
// A WeightSet keeps what backs its views (file mappings, generated buffers) alive.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/tensor_view.h"
#include "engine/model/model_spec.h"

namespace specgen {

enum class Role {
  kTokenEmbd,    // [V, D]
  kOutputNorm,   // [D]
  kOutput,       // [V, D]; absent when tied (use kTokenEmbd)
  kAttnNorm,     // [D]
  kAttnQ,        // [H*d, D]
  kAttnK,        // [Hkv*d, D]
  kAttnV,        // [Hkv*d, D]
  kAttnOut,      // [D, H*d]
  kAttnQNorm,    // [d]      (qk_norm only)
  kAttnKNorm,    // [d]      (qk_norm only)
  kFfnNorm,      // [D]
  kFfnGate,      // [Fd, D]  dense layers
  kFfnUp,        // [Fd, D]
  kFfnDown,      // [D, Fd]
  kRouter,       // [E, D]   MoE layers
  kExpertGate,   // [F, D]   per expert
  kExpertUp,     // [F, D]   per expert
  kExpertDown,   // [D, F]   per expert
  // issue 45 (GLM-4.5, gpt-oss): biases, sinks, shared experts. Vectors are 1-D.
  kAttnQBias,        // [H*d]     attn_qkv_bias
  kAttnKBias,        // [Hkv*d]
  kAttnVBias,        // [Hkv*d]
  kAttnOutBias,      // [D]       attn_out_bias
  kAttnSinks,        // [H]       attn_sinks
  kRouterBias,       // [E]       router_bias (added to the logits)
  kExpertSelBias,    // [E]       expert_selection_bias (selection only: exp_probs_b)
  kExpertGateBias,   // [F]       per expert, expert_bias
  kExpertUpBias,     // [F]       per expert
  kExpertDownBias,   // [D]       per expert
  kSharedGate,       // [Fs, D]   shared expert (shared_expert_ffn_dim)
  kSharedUp,         // [Fs, D]
  kSharedDown,       // [D, Fs]
  kSharedGateInp,    // [1, D]    its sigmoid gate (shared_expert_gate)
};
std::string_view RoleName(Role r);
// Tensors held once per expert (matrices and biases), addressed by WeightKey::expert.
bool IsPerExpertRole(Role r);
// The 1-D tensors beside the norms: biases, sinks, the selection bias. Kept f32 wherever written.
bool IsVectorRole(Role r);
// The RMSNorm gain vectors (output, attention, q/k, FFN norms).
bool IsNormRole(Role r);

struct WeightKey {
  Role role;
  int layer = -1;   // -1 for global tensors
  int expert = -1;  // -1 unless an expert tensor
  auto operator<=>(const WeightKey&) const = default;
};
std::string KeyString(const WeightKey& k);  // "blk.3.expert.17.gate", "token_embd"

// What the model's ModelSpec requires: every key with its row-major shape. Used to validate loaded
// files and, without loading anything, to compute sizes (inspect, plan).
struct ExpectedTensor {
  WeightKey key;
  std::vector<int64_t> shape;
};
std::vector<ExpectedTensor> ExpectedTensors(const ModelSpec& spec);

class WeightSet {
 public:
  // Registers a tensor; `source_name` is the name in the file (for messages and --tensors).
  void Add(const WeightKey& key, const TensorView& view, std::string source_name);
  // Keeps `owner` alive as long as this WeightSet (a mapping, a buffer).
  void KeepAlive(std::shared_ptr<const void> owner) { owners_.push_back(std::move(owner)); }

  // The tensor for a key, or NotFound naming it.
  absl::StatusOr<TensorView> Get(const WeightKey& key) const;
  bool Has(const WeightKey& key) const { return tensors_.count(key) != 0; }
  // Source name of a key ("" if absent).
  std::string_view SourceName(const WeightKey& key) const;

  // Checks that every tensor `spec` needs is present with the right shape; the error names the first
  // missing or mis-shaped tensor (by its file name when known) and `source`.
  absl::Status Validate(const ModelSpec& spec, std::string_view source) const;

  const std::map<WeightKey, TensorView>& tensors() const { return tensors_; }

 private:
  std::map<WeightKey, TensorView> tensors_;
  std::map<WeightKey, std::string> names_;
  std::vector<std::shared_ptr<const void>> owners_;
};

// A loaded model: its spec, its weights, and where it came from.
struct LoadedModel {
  ModelSpec spec;
  WeightSet weights;
  std::string source;  // path or "synth:NAME"
};

}  // namespace specgen
