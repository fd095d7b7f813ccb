#include "engine/model/model_spec.h"

#include <cmath>

#include "engine/core/status_macros.h"

namespace specgen {

std::string_view ArchName(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen3: return "qwen3";
    case Arch::kQwen3Moe: return "qwen3moe";
    case Arch::kMixtral: return "mixtral";
  }
  return "unknown";
}

// Counts follow ExpectedTensors (engine/io/weight_set.cc) tensor by tensor, norms included, both
// embedding matrices when untied: the convention of the published totals in formats.md §7.
ParamCounts CountParams(const ModelSpec& s) {
  ParamCounts c;
  const int64_t D = s.hidden;
  c.embedding = s.vocab_size * D * (s.tied_embeddings ? 1 : 2);
  c.attention_per_layer = D * s.q_dim() + 2 * D * s.kv_dim() + s.q_dim() * D;
  c.per_expert = 3 * s.expert_ffn_dim * D;
  const int64_t norms_per_layer = 2 * D + (s.qk_norm ? 2 * s.head_dim : 0);
  int64_t total = c.embedding + D;  // + output_norm
  int64_t active = total;
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const bool moe = s.is_moe() && l < static_cast<int64_t>(s.layer_is_moe.size()) && s.layer_is_moe[l];
    const int64_t shared = c.attention_per_layer + norms_per_layer;
    total += shared;
    active += shared;
    if (moe) {
      total += s.n_experts * D + s.n_experts * c.per_expert;
      active += s.n_experts * D + s.n_experts_used * c.per_expert;
    } else {
      total += 3 * s.ffn_dim * D;
      active += 3 * s.ffn_dim * D;
    }
  }
  c.total = total;
  c.active = active;
  return c;
}

absl::Status Validate(const ModelSpec& s, std::string_view source) {
  auto bad = [&](std::string_view field, auto value, std::string_view why) {
    return InvalidArgument(source, ": model field ", field, " = ", value, " ", why);
  };
  // Upper bounds keep every product below 2^63 (and catch garbage metadata early).
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  struct Field {
    std::string_view name;
    int64_t value;
  };
  for (const Field& f : {Field{"vocab_size", s.vocab_size}, Field{"hidden", s.hidden},
                         Field{"n_layers", s.n_layers}, Field{"n_heads", s.n_heads},
                         Field{"n_kv_heads", s.n_kv_heads}, Field{"head_dim", s.head_dim}}) {
    if (f.value <= 0) return bad(f.name, f.value, "must be positive");
    if (f.value > kMaxDim) return bad(f.name, f.value, "is implausibly large");
  }
  if (s.n_layers > 4096) return bad("n_layers", s.n_layers, "is implausibly large");
  if (s.n_heads % s.n_kv_heads != 0) {
    return bad("n_heads", s.n_heads, Cat("is not a multiple of n_kv_heads = ", s.n_kv_heads));
  }
  if (s.head_dim % 2 != 0) return bad("head_dim", s.head_dim, "must be even (RoPE rotates pairs)");
  if (static_cast<int64_t>(s.layer_is_moe.size()) != s.n_layers) {
    return bad("layer_is_moe.size()", s.layer_is_moe.size(), Cat("differs from n_layers = ", s.n_layers));
  }
  bool any_dense = false, any_moe = false;
  for (bool m : s.layer_is_moe) (m ? any_moe : any_dense) = true;
  if (any_moe && !s.is_moe()) return bad("n_experts", s.n_experts, "but some layers are MoE");
  if (s.n_experts < 0 || s.n_experts > 65536) return bad("n_experts", s.n_experts, "is out of range");
  if (s.is_moe()) {
    if (s.n_experts_used <= 0 || s.n_experts_used > s.n_experts) {
      return bad("n_experts_used", s.n_experts_used, Cat("must be in [1, n_experts = ", s.n_experts, "]"));
    }
    if (any_moe && (s.expert_ffn_dim <= 0 || s.expert_ffn_dim > kMaxDim)) {
      return bad("expert_ffn_dim", s.expert_ffn_dim, "must be positive");
    }
  }
  if (any_dense && (s.ffn_dim <= 0 || s.ffn_dim > kMaxDim)) {
    return bad("ffn_dim", s.ffn_dim, "must be positive (the model has dense FFN layers)");
  }
  if (!(s.rms_eps > 0.0f) || !(s.rms_eps < 1.0f)) return bad("rms_eps", s.rms_eps, "must be in (0, 1)");
  if (s.arch == Arch::kQwen3Moe || s.arch == Arch::kMixtral) {
    if (s.n_experts <= 0) {
      return bad("n_experts", s.n_experts,
                 Cat("but ", ArchName(s.arch), " is a Mixture-of-Experts architecture: it needs at least one expert"));
    }
  }
  if (!(s.rope_theta > 0.0f) || !std::isfinite(s.rope_theta)) {
    return bad("rope_theta", s.rope_theta, "must be a positive finite number");
  }
  if (s.context_length <= 0) return bad("context_length", s.context_length, "must be positive");
  return ValidateRopeScaling(s.rope_scaling, s.head_dim, source);
}

}  // namespace specgen
