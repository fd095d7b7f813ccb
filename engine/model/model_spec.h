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

enum class Arch { kLlama, kQwen3, kQwen3Moe, kMixtral };
std::string_view ArchName(Arch a);  // "llama", "qwen3", "qwen3moe", "mixtral"

// How RoPE pairs dimensions within a head. HF checkpoints and GGUF qwen* use rotate-half (pairs i and
// i + d/2, "neox"); GGUF `llama`/Mixtral files have Q/K rows permuted for interleaved pairs (2i, 2i+1).
enum class RopeStyle { kRotateHalf, kInterleaved };

// How router weights are formed from the router logits of one token (docs/formats.md §8).
enum class RouterNorm {
  kSoftmaxThenTopK,           // qwen3moe, norm_topk_prob = false: top-k of softmax over all experts
  kSoftmaxTopKRenormalize,    // qwen3moe, norm_topk_prob = true: ... then divided by their sum
  kTopKThenSoftmax,           // mixtral: softmax over the k selected logits (same as renormalize)
};

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

  // Tokenizer facts known from the model file (0 / -1 when unknown).
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;

  bool is_moe() const { return n_experts > 0; }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

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
