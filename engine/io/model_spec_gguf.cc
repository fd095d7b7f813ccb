#include "engine/io/model_spec_gguf.h"

#include <optional>

#include "engine/core/quant.h"
#include "engine/core/status_macros.h"

namespace specgen {
namespace {

class Reader {
 public:
  Reader(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  // `{arch}.suffix` as an integer: required ones error naming the key and the file.
  absl::StatusOr<int64_t> Int(std::string_view suffix) const {
    const std::string key = Cat(arch_, ".", suffix);
    const GgufValue* v = f_.Find(key);
    if (v == nullptr) return InvalidArgument(f_.path(), ": missing metadata key ", key);
    std::optional<int64_t> i = v->AsInt();
    if (!i) return InvalidArgument(f_.path(), ": metadata key ", key, " is not an integer");
    return *i;
  }
  absl::StatusOr<int64_t> IntOr(std::string_view suffix, int64_t fallback) const {
    if (f_.Find(Cat(arch_, ".", suffix)) == nullptr) return fallback;
    return Int(suffix);
  }
  absl::StatusOr<double> FloatOr(std::string_view suffix, double fallback) const {
    const std::string key = Cat(arch_, ".", suffix);
    const GgufValue* v = f_.Find(key);
    if (v == nullptr) return fallback;
    std::optional<double> d = v->AsFloat();
    if (!d) return InvalidArgument(f_.path(), ": metadata key ", key, " is not a number");
    return *d;
  }
  absl::StatusOr<std::optional<bool>> Bool(std::string_view suffix) const {
    const std::string key = Cat(arch_, ".", suffix);
    const GgufValue* v = f_.Find(key);
    if (v == nullptr) return std::optional<bool>();
    std::optional<bool> b = v->AsBool();
    if (!b) return InvalidArgument(f_.path(), ": metadata key ", key, " is not a bool");
    return b;
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

int64_t TokenId(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return -1;
  std::optional<int64_t> i = v->AsInt();
  return i ? *i : -1;
}

// {arch}.rope.scaling.type / .factor (and the older rope.scale_linear) and the rope_freqs.weight
// tensor, read as llama.cpp reads them: an absent type means linear, so a factor alone scales; "none"
// means no scaling whatever the factor; a factor of 0 or 1 is no scaling.
absl::StatusOr<RopeScaling> RopeScalingFromGguf(const GgufFile& f, const std::string& arch, const Reader& r) {
  RopeScaling out;
  const std::string type_key = Cat(arch, ".rope.scaling.type");
  std::string type = "linear";
  if (const GgufValue* t = f.Find(type_key); t != nullptr) {
    if (t->AsString() == nullptr) return InvalidArgument(f.path(), ": metadata key ", type_key, " is not a string");
    type = *t->AsString();
  }
  if (type != "none" && type != "linear" && type != "yarn") {
    return Unimplemented(f.path(), ": metadata key ", type_key, " = '", type,
                         "': this RoPE scaling is not supported (linear, yarn and rope_freqs.weight are)");
  }
  ASSIGN_OR_RETURN(double factor, r.FloatOr("rope.scaling.factor", 0.0));
  if (type == "yarn") {
    // llama.cpp's keys; the band's ends are rounded (truncate) except for gpt-oss, whose transformers
    // config says not to; `specgen convert` writes rope.scaling.yarn_truncate where it differs.
    out.kind = RopeScalingKind::kYarn;
    out.factor = static_cast<float>(factor);
    ASSIGN_OR_RETURN(out.original_context_length, r.IntOr("rope.scaling.original_context_length", 0));
    if (out.original_context_length <= 0) {
      return InvalidArgument(f.path(), ": yarn RoPE scaling needs metadata key ", arch,
                             ".rope.scaling.original_context_length");
    }
    ASSIGN_OR_RETURN(double beta_fast, r.FloatOr("rope.scaling.yarn_beta_fast", 32.0));
    ASSIGN_OR_RETURN(double beta_slow, r.FloatOr("rope.scaling.yarn_beta_slow", 1.0));
    ASSIGN_OR_RETURN(double attn_factor, r.FloatOr("rope.scaling.attn_factor", 0.0));
    out.beta_fast = static_cast<float>(beta_fast);
    out.beta_slow = static_cast<float>(beta_slow);
    out.attention_factor = static_cast<float>(attn_factor);
    ASSIGN_OR_RETURN(std::optional<bool> truncate, r.Bool("rope.scaling.yarn_truncate"));
    out.truncate = truncate.value_or(arch != "gpt-oss");
    return out;
  }
  if (factor == 0.0) {
    ASSIGN_OR_RETURN(factor, r.FloatOr("rope.scale_linear", 0.0));
  }
  if (type == "linear" && factor != 0.0 && factor != 1.0) {
    out.kind = RopeScalingKind::kLinear;
    out.factor = static_cast<float>(factor);
  }
  if (const GgufTensorInfo* t = f.FindTensor("rope_freqs.weight"); t != nullptr) {
    if (t->ne.size() != 1) {
      return InvalidArgument(f.path(), ": tensor rope_freqs.weight has ", t->ne.size(),
                             " dimensions, expected 1 (one factor per rotated pair)");
    }
    out.freq_factors.resize(static_cast<size_t>(t->ne[0]));
    absl::Status st = DequantizeRow(t->dtype, f.TensorData(*t), t->ne[0], out.freq_factors.data());
    if (!st.ok()) return InvalidArgument(f.path(), ": tensor rope_freqs.weight: ", st.message());
  }
  return out;
}

bool HasTensor(const GgufFile& f, const std::string& name) { return f.FindTensor(name) != nullptr; }

// glm4moe and gpt-oss as llama.cpp's converter writes them (llama-arch.cpp's keys and tensor names).
// The per-model facts that live in tensors (biases, qk norm, the selection bias) are read from which
// tensors the file holds.
absl::Status ReadGlmOrGptOss(const GgufFile& f, const std::string& arch, const Reader& r, ModelSpec& s) {
  if (s.n_experts <= 0) {
    return InvalidArgument(f.path(), ": ", arch, ".expert_count = ", s.n_experts,
                           f.Find(Cat(arch, ".expert_count")) == nullptr ? " (missing)" : "",
                           ": a ", arch, " model needs at least one expert");
  }
  ASSIGN_OR_RETURN(s.expert_ffn_dim, r.Int("expert_feed_forward_length"));
  ASSIGN_OR_RETURN(int64_t rope_dim, r.IntOr("rope.dimension_count", s.head_dim));
  s.rope_dim = rope_dim == s.head_dim ? 0 : rope_dim;
  s.attn_qkv_bias = HasTensor(f, "blk.0.attn_q.bias");
  s.attn_out_bias = HasTensor(f, "blk.0.attn_output.bias");
  if (s.arch == Arch::kGptOss) {
    s.attn_qkv_bias = s.attn_out_bias = true;  // always (llama.cpp requires them): a missing one is named
    s.attn_sinks = true;
    s.router_norm = RouterNorm::kTopKThenSoftmax;
    s.router_bias = s.expert_bias = true;
    s.expert_act = FfnActivation::kSwiGluClamped;
    ASSIGN_OR_RETURN(double limit, r.FloatOr("swiglu_limit", 7.0));  // llama.cpp: 7, no key; ours if not
    s.swiglu_limit = static_cast<float>(limit);
    ASSIGN_OR_RETURN(s.sliding_window, r.IntOr("attention.sliding_window", 0));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(int64_t gating, r.IntOr("expert_gating_func", 2));
  if (gating != 2) {
    return Unimplemented(f.path(), ": ", arch, ".expert_gating_func = ", gating,
                         ": only sigmoid gating (2) is supported for glm4moe");
  }
  ASSIGN_OR_RETURN(std::optional<bool> norm, r.Bool("expert_weights_norm"));
  s.router_norm = norm.value_or(true) ? RouterNorm::kSigmoidTopKRenormalize : RouterNorm::kSigmoidTopK;
  ASSIGN_OR_RETURN(double scale, r.FloatOr("expert_weights_scale", 1.0));
  s.routed_scale = static_cast<float>(scale);
  ASSIGN_OR_RETURN(s.n_expert_groups, r.IntOr("expert_group_count", 1));
  ASSIGN_OR_RETURN(s.n_groups_used, r.IntOr("expert_group_used_count", 1));
  if (s.n_expert_groups == 0) s.n_expert_groups = 1;  // llama.cpp writes 0 for "no groups" too
  if (s.n_groups_used == 0) s.n_groups_used = 1;
  ASSIGN_OR_RETURN(int64_t n_shared, r.IntOr("expert_shared_count", 0));
  s.shared_expert_ffn_dim = n_shared * s.expert_ffn_dim;
  ASSIGN_OR_RETURN(s.n_nextn_layers, r.IntOr("nextn_predict_layers", 0));
  s.qk_norm = HasTensor(f, "blk.0.attn_q_norm.weight");
  return absl::OkStatus();
}

// Which layers are MoE (glm4moe: after leading_dense_block_count) and slide (gpt-oss: even layers, as
// llama.cpp's swa pattern of 2); block_count counts GLM's trailing next-token layers, which are not run.
absl::Status LayoutGlmOrGptOss(const GgufFile& f, const std::string& arch, const Reader& r, ModelSpec& s) {
  s.n_layers -= s.n_nextn_layers;
  if (s.n_layers <= 0) {
    return InvalidArgument(f.path(), ": ", arch, ".block_count leaves no layers after ", s.n_nextn_layers,
                           " next-token prediction layers");
  }
  s.layer_is_moe.assign(s.n_layers, true);
  if (s.arch == Arch::kGlm4Moe) {
    ASSIGN_OR_RETURN(int64_t dense, r.IntOr("leading_dense_block_count", 0));
    for (int64_t l = 0; l < s.n_layers; ++l) s.layer_is_moe[l] = l >= dense;
    int64_t first_moe = dense;
    s.expert_selection_bias = first_moe < s.n_layers && HasTensor(f, Cat("blk.", first_moe, ".exp_probs_b.bias"));
  } else {
    s.layer_is_swa.assign(s.n_layers, false);
    for (int64_t l = 0; l < s.n_layers; ++l) s.layer_is_swa[l] = l % 2 == 0;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelSpec> ModelSpecFromGguf(const GgufFile& f) {
  const GgufValue* arch_value = f.Find("general.architecture");
  if (arch_value == nullptr || arch_value->AsString() == nullptr) {
    return InvalidArgument(f.path(), ": missing string metadata key general.architecture");
  }
  const std::string arch = *arch_value->AsString();
  Reader r(f, arch);
  ModelSpec s;
  if (arch == "llama") {
    s.arch = Arch::kLlama;
  } else if (arch == "qwen3") {
    s.arch = Arch::kQwen3;
  } else if (arch == "qwen3moe") {
    s.arch = Arch::kQwen3Moe;
  } else if (arch == "glm4moe") {
    s.arch = Arch::kGlm4Moe;
  } else if (arch == "gpt-oss") {
    s.arch = Arch::kGptOss;
  } else {
    return Unimplemented(f.path(), ": unsupported architecture '", arch,
                         "' (supported: llama, qwen3, qwen3moe, glm4moe, gpt-oss; mixtral is llama with experts)");
  }
  if (const GgufValue* n = f.Find("general.name"); n != nullptr && n->AsString() != nullptr) {
    s.name = *n->AsString();
  }
  ASSIGN_OR_RETURN(s.hidden, r.Int("embedding_length"));
  ASSIGN_OR_RETURN(s.n_layers, r.Int("block_count"));
  ASSIGN_OR_RETURN(s.n_heads, r.Int("attention.head_count"));
  ASSIGN_OR_RETURN(s.n_kv_heads, r.IntOr("attention.head_count_kv", s.n_heads));
  ASSIGN_OR_RETURN(int64_t ff, r.Int("feed_forward_length"));
  s.ffn_dim = ff;
  ASSIGN_OR_RETURN(s.n_experts, r.IntOr("expert_count", 0));
  ASSIGN_OR_RETURN(s.n_experts_used, r.IntOr("expert_used_count", 0));
  if (s.n_heads <= 0) return InvalidArgument(f.path(), ": ", arch, ".attention.head_count must be positive");
  ASSIGN_OR_RETURN(s.head_dim, r.IntOr("attention.key_length", s.hidden / s.n_heads));
  ASSIGN_OR_RETURN(int64_t value_length, r.IntOr("attention.value_length", s.head_dim));
  if (value_length != s.head_dim) {
    return Unimplemented(f.path(), ": ", arch, ".attention.value_length ", value_length,
                         " differs from key_length ", s.head_dim);
  }
  ASSIGN_OR_RETURN(s.context_length, r.IntOr("context_length", 4096));
  ASSIGN_OR_RETURN(double eps, r.FloatOr("attention.layer_norm_rms_epsilon", 1e-6));
  s.rms_eps = static_cast<float>(eps);
  ASSIGN_OR_RETURN(double theta, r.FloatOr("rope.freq_base", 10000.0));
  s.rope_theta = static_cast<float>(theta);
  ASSIGN_OR_RETURN(s.rope_scaling, RopeScalingFromGguf(f, arch, r));

  // Vocabulary: {arch}.vocab_size when written, else the token list, else the embedding's rows.
  ASSIGN_OR_RETURN(s.vocab_size, r.IntOr("vocab_size", 0));
  if (s.vocab_size == 0) {
    if (const GgufValue* t = f.Find("tokenizer.ggml.tokens"); t != nullptr && t->AsArray() != nullptr) {
      s.vocab_size = static_cast<int64_t>(t->AsArray()->items.size());
    } else if (const GgufTensorInfo* e = f.FindTensor("token_embd.weight"); e && e->ne.size() == 2) {
      s.vocab_size = e->ne[1];
    }
  }

  if (s.arch == Arch::kLlama && s.n_experts > 0) {
    // Mixtral: feed_forward_length is the per-expert width; the router always renormalizes.
    s.arch = Arch::kMixtral;
    s.expert_ffn_dim = ff;
    s.router_norm = RouterNorm::kTopKThenSoftmax;
  } else if (s.arch == Arch::kQwen3Moe) {
    if (s.n_experts <= 0) {
      return InvalidArgument(f.path(), ": qwen3moe.expert_count = ", s.n_experts,
                             f.Find("qwen3moe.expert_count") == nullptr ? " (missing)" : "",
                             ": a qwen3moe model needs at least one expert");
    }
    ASSIGN_OR_RETURN(s.expert_ffn_dim, r.IntOr("expert_feed_forward_length",
                                               s.n_experts_used > 0 ? ff / s.n_experts_used : 0));
    // llama.cpp hard-codes renormalized top-k for qwen3moe (it reads no key); files that say
    // otherwise (OLMoE-shaped exports from `specgen convert`/`synth`) carry expert_weights_norm.
    ASSIGN_OR_RETURN(std::optional<bool> norm, r.Bool("expert_weights_norm"));
    s.router_norm = norm.value_or(true) ? RouterNorm::kSoftmaxTopKRenormalize
                                        : RouterNorm::kSoftmaxThenTopK;
  } else if (s.arch == Arch::kGlm4Moe || s.arch == Arch::kGptOss) {
    RETURN_IF_ERROR(ReadGlmOrGptOss(f, arch, r, s));
  } else if (s.n_experts > 0) {
    return InvalidArgument(f.path(), ": architecture ", arch, " with ", arch, ".expert_count = ",
                           s.n_experts, " is not supported");
  }
  if (s.arch != Arch::kGlm4Moe) s.qk_norm = s.arch == Arch::kQwen3 || s.arch == Arch::kQwen3Moe;
  // GGUF llama files hold Q/K rows permuted for interleaved pairs; qwen* are converted unpermuted.
  s.rope_style = arch == "llama" ? RopeStyle::kInterleaved : RopeStyle::kRotateHalf;
  s.tied_embeddings = f.FindTensor("output.weight") == nullptr;

  if (s.n_layers < 0 || s.n_layers > 4096) {
    return InvalidArgument(f.path(), ": ", arch, ".block_count = ", s.n_layers, " is out of range");
  }
  if (s.arch == Arch::kGlm4Moe || s.arch == Arch::kGptOss) {
    RETURN_IF_ERROR(LayoutGlmOrGptOss(f, arch, r, s));
  } else {
    s.layer_is_moe.assign(s.n_layers, s.n_experts > 0);
  }
  if (s.n_experts > 0 && s.arch != Arch::kGlm4Moe && s.arch != Arch::kGptOss) {
    for (int64_t l = 0; l < s.n_layers; ++l) {
      // A layer with a dense FFN and no router is dense (mlp_only_layers exported by specgen).
      if (f.FindTensor(Cat("blk.", l, ".ffn_gate_inp.weight")) == nullptr &&
          f.FindTensor(Cat("blk.", l, ".ffn_gate.weight")) != nullptr) {
        s.layer_is_moe[l] = false;
      }
    }
  }
  s.bos_token_id = TokenId(f, "tokenizer.ggml.bos_token_id");
  s.eos_token_id = TokenId(f, "tokenizer.ggml.eos_token_id");
  RETURN_IF_ERROR(Validate(s, f.path()));
  return s;
}

}  // namespace specgen
