// ModelSpec: the architecture and every hyper-parameter of a model, whatever file it came from
// (GGUF metadata, Hugging Face config.json, or a synthetic preset). The forward pass and the planner
// read nothing else about a model's shape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/rope_scaling.h"

namespace specgen {

enum class Arch { kLlama, kQwen3, kQwen3Moe, kMixtral, kGlm4Moe, kGptOss };
std::string_view ArchName(Arch a);  // "llama", "qwen3", "qwen3moe", "mixtral", "glm4moe", "gpt-oss"

// How RoPE pairs dimensions within a head. HF checkpoints and GGUF qwen* use rotate-half (pairs i and
// i + d/2, "neox"); GGUF `llama`/Mixtral files have Q/K rows permuted for interleaved pairs (2i, 2i+1).
enum class RopeStyle { kRotateHalf, kInterleaved };

// How router weights are formed from the router logits of one token (docs/formats.md §8).
enum class RouterNorm {
  kSoftmaxThenTopK,           // qwen3moe, norm_topk_prob = false: top-k of softmax over all experts
  kSoftmaxTopKRenormalize,    // qwen3moe, norm_topk_prob = true: ... then divided by their sum
  kTopKThenSoftmax,           // mixtral, gpt-oss: softmax over the k selected logits
  // DeepSeek-V3 / GLM-4.5 ("noaux_tc"): scores σ(logit); the k experts are selected on score +
  // selection bias (RouterParams), within the best topk_groups of n_groups groups; each weight is
  // the unbiased score, times routed_scale.
  kSigmoidTopK,               // ... not renormalized
  kSigmoidTopKRenormalize,    // ... divided by their sum first (norm_topk_prob)
};
bool IsSigmoidRouter(RouterNorm n);

// The activation between an FFN's gate/up and down products.
enum class FfnActivation {
  kSwiGlu,         // silu(gate) · up
  kSwiGluClamped,  // gpt-oss: gate ≤ limit, up in ±limit, (up + 1) · gate · σ(alpha · gate)
};

// What a model needs from a backend beyond the llama/qwen3/mixtral forward pass (issue 45). A backend
// says which it computes (Backend::Supports); Transformer::Create refuses a model needing one it does
// not, naming the feature, rather than run it wrong.
enum class ModelFeature {
  kAttentionBias,     // q/k/v (GLM, gpt-oss) or output (gpt-oss) projection biases
  kAttentionSinks,    // a per-head logit joining the softmax denominator only (gpt-oss)
  kSlidingWindow,     // layers that see only the last `sliding_window` positions (gpt-oss)
  kPartialRope,       // only the first rope_dim dims of each head rotated (GLM: half)
  kScaledRope,        // YaRN: RoPE with a magnitude factor on the rotated dims
  kSharedExperts,     // a dense SwiGLU beside the routed experts (GLM, Qwen2-MoE; optional σ gate)
  kSigmoidRouting,    // sigmoid scores, selection bias, groups, routed scale (GLM, DeepSeek)
  kRouterBias,        // a bias on the router logits (gpt-oss)
  kExpertBias,        // biases on every expert's gate/up/down (gpt-oss)
  kClampedSwiGlu,     // gpt-oss's expert activation
};
std::string_view FeatureName(ModelFeature f);

struct ModelSpec {
  Arch arch = Arch::kLlama;
  std::string name;                 // general.name or the directory name; informational
  int64_t vocab_size = 0;           // V
  int64_t hidden = 0;               // D
  int64_t n_layers = 0;
  int64_t n_heads = 0;              // H
  int64_t n_kv_heads = 0;           // Hkv (GQA groups = H / Hkv)
  int64_t head_dim = 0;             // d (Qwen3: 128 even where D / H = 64)
  int64_t ffn_dim = 0;              // dense FFN width (dense layers and dense models)
  int64_t n_experts = 0;            // E (0 for dense models)
  int64_t n_experts_used = 0;       // top-k
  int64_t expert_ffn_dim = 0;       // F, per expert
  std::vector<bool> layer_is_moe;   // size n_layers; false for dense layers (mlp_only_layers etc.)
  RouterNorm router_norm = RouterNorm::kSoftmaxThenTopK;
  bool qk_norm = false;             // per-head RMSNorm of q and k before RoPE (qwen3, qwen3moe)
  bool tied_embeddings = false;     // output head reuses token_embd
  float rms_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::kRotateHalf;
  RopeScaling rope_scaling;         // none unless the model's files say (rope_scaling.h)
  int64_t context_length = 4096;    // trained context (max_position_embeddings)

  // --- the features of GLM-4.5 / gpt-oss (issue 45); the defaults are the other architectures' ---
  bool attn_qkv_bias = false;       // q/k/v projections have biases (GLM, gpt-oss)
  bool attn_out_bias = false;       // the output projection has one (gpt-oss)
  bool attn_sinks = false;          // a learned per-head sink logit (gpt-oss)
  int64_t rope_dim = 0;             // dims rotated per head, the first ones; 0: head_dim (GLM: d/2)
  int64_t sliding_window = 0;       // positions a sliding layer sees (itself included); 0: none
  std::vector<bool> layer_is_swa;   // per layer (empty: none); gpt-oss: even layers
  int64_t shared_expert_ffn_dim = 0;  // width of the shared expert (0: none)
  bool shared_expert_gate = false;  // σ(x · g) scales the shared expert (Qwen2-MoE style)
  bool router_bias = false;         // bias on the router logits (gpt-oss)
  bool expert_selection_bias = false;  // kSigmoid*: e_score_correction_bias / exp_probs_b
  int64_t n_expert_groups = 1;      // kSigmoid*: experts in n_expert_groups groups (n_group) ...
  int64_t n_groups_used = 1;        // ... of which the best n_groups_used (topk_group) may be chosen
  float routed_scale = 1.0f;        // routed_scaling_factor: multiplies every routed weight
  bool expert_bias = false;         // biases on every expert's gate/up/down (gpt-oss)
  FfnActivation expert_act = FfnActivation::kSwiGlu;
  float swiglu_alpha = 1.702f;      // kSwiGluClamped
  float swiglu_limit = 7.0f;        // kSwiGluClamped
  int64_t n_nextn_layers = 0;       // GLM's multi-token-prediction layers after the last; unused

  // Tokenizer facts known from the model file (0 / -1 when unknown).
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;

  bool is_moe() const { return n_experts > 0; }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t rotary_dim() const { return rope_dim > 0 ? rope_dim : head_dim; }
  bool is_swa(int64_t layer) const {
    return sliding_window > 0 && layer < static_cast<int64_t>(layer_is_swa.size()) && layer_is_swa[layer];
  }
};

// The features of `spec` beyond the llama/qwen3/mixtral forward pass, in enum order.
std::vector<ModelFeature> RequiredFeatures(const ModelSpec& spec);

// Parameter counts (elements, not bytes): total and active per token (top-k of the experts).
struct ParamCounts {
  int64_t total = 0;
  int64_t active = 0;
  int64_t embedding = 0;       // token_embd (+ output head when not tied)
  int64_t per_expert = 0;      // one expert's gate + up + down
  int64_t attention_per_layer = 0;
};
ParamCounts CountParams(const ModelSpec& spec);

// Checks internal consistency (positive sizes, H divisible by Hkv, top-k ≤ E, ...); the error names
// the offending field and `source` (a file path or preset name).
absl::Status Validate(const ModelSpec& spec, std::string_view source);

}  // namespace specgen
