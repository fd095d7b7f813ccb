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
    case Arch::kGlm4Moe: return "glm4moe";
    case Arch::kGptOss: return "gpt-oss";
  }
  return "unknown";
}

bool IsSigmoidRouter(RouterNorm n) {
  return n == RouterNorm::kSigmoidTopK || n == RouterNorm::kSigmoidTopKRenormalize;
}

std::string_view FeatureName(ModelFeature f) {
  switch (f) {
    case ModelFeature::kAttentionBias: return "attention projection biases";
    case ModelFeature::kAttentionSinks: return "attention sinks";
    case ModelFeature::kSlidingWindow: return "sliding-window attention";
    case ModelFeature::kPartialRope: return "partial RoPE";
    case ModelFeature::kScaledRope: return "YaRN RoPE (attention factor)";
    case ModelFeature::kSharedExperts: return "shared experts";
    case ModelFeature::kSigmoidRouting: return "sigmoid routing (selection bias, expert groups, routed scale)";
    case ModelFeature::kRouterBias: return "router bias";
    case ModelFeature::kExpertBias: return "expert biases";
    case ModelFeature::kClampedSwiGlu: return "clamped SwiGLU (gpt-oss)";
  }
  return "unknown feature";
}

std::vector<ModelFeature> RequiredFeatures(const ModelSpec& s) {
  std::vector<ModelFeature> out;
  auto need = [&](bool cond, ModelFeature f) {
    if (cond) out.push_back(f);
  };
  need(s.attn_qkv_bias || s.attn_out_bias, ModelFeature::kAttentionBias);
  need(s.attn_sinks, ModelFeature::kAttentionSinks);
  bool swa = false;
  for (int64_t l = 0; l < s.n_layers; ++l) swa = swa || s.is_swa(l);
  need(swa, ModelFeature::kSlidingWindow);
  need(s.rotary_dim() != s.head_dim, ModelFeature::kPartialRope);
  need(RopeAttentionFactor(s.rope_scaling) != 1.0f, ModelFeature::kScaledRope);
  need(s.shared_expert_ffn_dim > 0, ModelFeature::kSharedExperts);
  need(IsSigmoidRouter(s.router_norm) || s.n_expert_groups > 1 || s.routed_scale != 1.0f,
       ModelFeature::kSigmoidRouting);
  need(s.router_bias, ModelFeature::kRouterBias);
  need(s.expert_bias, ModelFeature::kExpertBias);
  need(s.expert_act == FfnActivation::kSwiGluClamped, ModelFeature::kClampedSwiGlu);
  return out;
}

// Counts follow ExpectedTensors (engine/io/weight_set.cc) tensor by tensor, norms included, both
// embedding matrices when untied: the convention of the published totals in formats.md §7.
ParamCounts CountParams(const ModelSpec& s) {
  ParamCounts c;
  const int64_t D = s.hidden;
  c.embedding = s.vocab_size * D * (s.tied_embeddings ? 1 : 2);
  c.attention_per_layer = D * s.q_dim() + 2 * D * s.kv_dim() + s.q_dim() * D +
                          (s.attn_qkv_bias ? s.q_dim() + 2 * s.kv_dim() : 0) + (s.attn_out_bias ? D : 0) +
                          (s.attn_sinks ? s.n_heads : 0);
  c.per_expert = 3 * s.expert_ffn_dim * D + (s.expert_bias ? 2 * s.expert_ffn_dim + D : 0);
  // Router (+ its bias, + the selection bias) and the shared expert (+ its gate): every token's.
  const int64_t router = s.n_experts * D + (s.router_bias ? s.n_experts : 0) +
                         (s.expert_selection_bias ? s.n_experts : 0);
  const int64_t shared_expert = 3 * s.shared_expert_ffn_dim * D + (s.shared_expert_gate ? D : 0);
  const int64_t norms_per_layer = 2 * D + (s.qk_norm ? 2 * s.head_dim : 0);
  int64_t total = c.embedding + D;  // + output_norm
  int64_t active = total;
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const bool moe = s.is_moe() && l < static_cast<int64_t>(s.layer_is_moe.size()) && s.layer_is_moe[l];
    const int64_t shared = c.attention_per_layer + norms_per_layer;
    total += shared;
    active += shared;
    if (moe) {
      total += router + shared_expert + s.n_experts * c.per_expert;
      active += router + shared_expert + s.n_experts_used * c.per_expert;
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
  if (s.arch == Arch::kQwen3Moe || s.arch == Arch::kMixtral || s.arch == Arch::kGlm4Moe || s.arch == Arch::kGptOss) {
    if (s.n_experts <= 0) {
      return bad("n_experts", s.n_experts,
                 Cat("but ", ArchName(s.arch), " is a Mixture-of-Experts architecture: it needs at least one expert"));
    }
  }
  if (!(s.rope_theta > 0.0f) || !std::isfinite(s.rope_theta)) {
    return bad("rope_theta", s.rope_theta, "must be a positive finite number");
  }
  if (s.context_length <= 0) return bad("context_length", s.context_length, "must be positive");
  if (s.rope_dim < 0 || s.rope_dim > s.head_dim || s.rope_dim % 2 != 0) {
    return bad("rope_dim", s.rope_dim, Cat("must be even and in [0, head_dim = ", s.head_dim, "]"));
  }
  if (s.sliding_window < 0) return bad("sliding_window", s.sliding_window, "must not be negative");
  if (!s.layer_is_swa.empty() && static_cast<int64_t>(s.layer_is_swa.size()) != s.n_layers) {
    return bad("layer_is_swa.size()", s.layer_is_swa.size(), Cat("differs from n_layers = ", s.n_layers));
  }
  if (s.shared_expert_ffn_dim < 0 || s.shared_expert_ffn_dim > kMaxDim) {
    return bad("shared_expert_ffn_dim", s.shared_expert_ffn_dim, "is out of range");
  }
  if (s.is_moe()) {
    // Group-limited selection (DeepSeek's n_group / topk_group): equal groups, enough experts in the
    // groups kept, and at least two a group (a group's score is the sum of its best two).
    if (s.n_expert_groups <= 0 || s.n_experts % s.n_expert_groups != 0) {
      return bad("n_expert_groups", s.n_expert_groups,
                 Cat("(n_group) must divide n_experts = ", s.n_experts, " into equal groups"));
    }
    if (s.n_groups_used <= 0 || s.n_groups_used > s.n_expert_groups) {
      return bad("n_groups_used", s.n_groups_used, Cat("(topk_group) must be in [1, n_group = ", s.n_expert_groups, "]"));
    }
    const int64_t per_group = s.n_experts / s.n_expert_groups;
    if (s.n_expert_groups > 1 && per_group < 2) {
      return bad("n_expert_groups", s.n_expert_groups, "leaves fewer than 2 experts a group");
    }
    if (s.n_groups_used * per_group < s.n_experts_used) {
      return bad("n_groups_used", s.n_groups_used, Cat("keeps ", s.n_groups_used * per_group, " experts, fewer than top-k = ",
                                                      s.n_experts_used));
    }
    if (s.n_expert_groups > 1 && !IsSigmoidRouter(s.router_norm)) {
      return bad("n_expert_groups", s.n_expert_groups, "needs sigmoid routing (noaux_tc)");
    }
    if (s.expert_selection_bias && !IsSigmoidRouter(s.router_norm)) {
      return bad("expert_selection_bias", "true", "needs sigmoid routing (noaux_tc)");
    }
    if (!(s.routed_scale > 0.0f) || !std::isfinite(s.routed_scale)) {
      return bad("routed_scale", s.routed_scale, "must be a positive finite number");
    }
  }
  if (s.expert_act == FfnActivation::kSwiGluClamped &&
      (!(s.swiglu_limit > 0.0f) || !std::isfinite(s.swiglu_limit) || !std::isfinite(s.swiglu_alpha))) {
    return bad("swiglu_limit", s.swiglu_limit, "must be a positive finite number");
  }
  if (s.n_nextn_layers < 0 || s.n_nextn_layers > 64) return bad("n_nextn_layers", s.n_nextn_layers, "is out of range");
  return ValidateRopeScaling(s.rope_scaling, s.rotary_dim(), source);
}

}  // namespace specgen
