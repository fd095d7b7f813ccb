#include "engine/io/hf_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

using Json = nlohmann::json;

// Typed access to config keys; every error names the file and the key.
class Config {
 public:
  Config(const Json& j, std::string_view source) : j_(j), source_(source) {}

  const Json* Find(std::string_view key) const {
    auto it = j_.find(std::string(key));
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  absl::StatusOr<int64_t> Int(std::string_view key) const {
    const Json* v = Find(key);
    if (v == nullptr) return InvalidArgument(source_, ": missing required key \"", key, "\"");
    return AsInt(*v, key);
  }
  absl::StatusOr<int64_t> IntOr(std::string_view key, int64_t fallback) const {
    const Json* v = Find(key);
    return v == nullptr ? absl::StatusOr<int64_t>(fallback) : AsInt(*v, key);
  }
  absl::StatusOr<double> FloatOr(std::string_view key, double fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return InvalidArgument(source_, ": key \"", key, "\" must be a number");
    return v->get<double>();
  }
  absl::StatusOr<bool> BoolOr(std::string_view key, bool fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return InvalidArgument(source_, ": key \"", key, "\" must be true or false");
    return v->get<bool>();
  }
  // A token id that may be an integer or a list of them (eos in newer configs): the first; -1 if absent.
  absl::StatusOr<int64_t> TokenId(std::string_view key) const {
    const Json* v = Find(key);
    if (v == nullptr) return int64_t{-1};
    if (v->is_array()) {
      if (v->empty()) return int64_t{-1};
      return AsInt((*v)[0], key);
    }
    return AsInt(*v, key);
  }
  absl::StatusOr<int64_t> AsInt(const Json& v, std::string_view key) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {  // some configs write 4096.0
      const double d = v.get<double>();
      if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
    }
    return InvalidArgument(source_, ": key \"", key, "\" must be an integer, got ", v.dump());
  }
  std::string_view source() const { return source_; }

 private:
  const Json& j_;
  std::string_view source_;
};

// rope_scaling (4.x) or rope_parameters (5.x, which also carries rope_theta): its rope_type (or the
// older "type") says how the frequencies are scaled. default: none; linear: factor; llama3: factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings. Any other type is refused
// naming the file and the key, never run unscaled.
absl::StatusOr<RopeScaling> RopeScalingFromConfig(const Config& c, std::string_view source) {
  RopeScaling out;
  const char* key = c.Find("rope_scaling") != nullptr ? "rope_scaling" : "rope_parameters";
  const Json* p = c.Find(key);
  if (p == nullptr) return out;
  if (!p->is_object()) return InvalidArgument(source, ": key \"", key, "\" must be an object");
  Config rp(*p, source);
  const char* type_key = rp.Find("rope_type") != nullptr ? "rope_type" : "type";
  const Json* t = rp.Find(type_key);
  if (t == nullptr) return out;  // rope_parameters with rope_theta alone
  if (!t->is_string()) return InvalidArgument(source, ": key \"", key, ".", type_key, "\" must be a string");
  const std::string type = t->get<std::string>();
  if (type == "default") return out;
  auto factor = [&]() -> absl::StatusOr<float> {
    if (rp.Find("factor") == nullptr) {
      return InvalidArgument(source, ": key \"", key, "\" of rope_type \"", type, "\" has no \"factor\"");
    }
    ASSIGN_OR_RETURN(double f, rp.FloatOr("factor", 1.0));
    return static_cast<float>(f);
  };
  if (type == "linear") {
    out.kind = RopeScalingKind::kLinear;
    ASSIGN_OR_RETURN(out.factor, factor());
  } else if (type == "llama3") {
    out.kind = RopeScalingKind::kLlama3;
    ASSIGN_OR_RETURN(out.factor, factor());
    ASSIGN_OR_RETURN(double low, rp.FloatOr("low_freq_factor", 1.0));
    ASSIGN_OR_RETURN(double high, rp.FloatOr("high_freq_factor", 4.0));
    out.low_freq_factor = static_cast<float>(low);
    out.high_freq_factor = static_cast<float>(high);
    ASSIGN_OR_RETURN(out.original_context_length, rp.IntOr("original_max_position_embeddings", 8192));
  } else if (type == "yarn") {
    // transformers' _compute_yarn_parameters: the original context defaults to max_position_embeddings;
    // the attention factor is given, or DeepSeek's mscale ratio, or 0.1·ln(factor) + 1.
    out.kind = RopeScalingKind::kYarn;
    ASSIGN_OR_RETURN(out.factor, factor());
    ASSIGN_OR_RETURN(int64_t max_pos, c.IntOr("max_position_embeddings", 4096));
    ASSIGN_OR_RETURN(out.original_context_length, rp.IntOr("original_max_position_embeddings", max_pos));
    ASSIGN_OR_RETURN(double beta_fast, rp.FloatOr("beta_fast", 32.0));
    ASSIGN_OR_RETURN(double beta_slow, rp.FloatOr("beta_slow", 1.0));
    out.beta_fast = static_cast<float>(beta_fast);
    out.beta_slow = static_cast<float>(beta_slow);
    ASSIGN_OR_RETURN(out.truncate, rp.BoolOr("truncate", true));
    ASSIGN_OR_RETURN(double attention_factor, rp.FloatOr("attention_factor", 0.0));
    ASSIGN_OR_RETURN(double mscale, rp.FloatOr("mscale", 0.0));
    ASSIGN_OR_RETURN(double mscale_all_dim, rp.FloatOr("mscale_all_dim", 0.0));
    if (attention_factor == 0.0 && mscale != 0.0 && mscale_all_dim != 0.0 && out.factor > 1.0f) {
      const double ln = std::log(static_cast<double>(out.factor));
      attention_factor = (0.1 * mscale * ln + 1.0) / (0.1 * mscale_all_dim * ln + 1.0);
    }
    if (attention_factor < 0.0) {
      return InvalidArgument(source, ": key \"", key, ".attention_factor\" = ", attention_factor, " must be positive");
    }
    out.attention_factor = static_cast<float>(attention_factor);
  } else {
    return Unimplemented(source, ": key \"", key, ".", type_key, "\" = \"", type,
                         "\": this RoPE scaling is not supported (default, linear, llama3 and yarn are)");
  }
  return out;
}

// Glm4MoeForCausalLM (GLM-4.5, 4.5-Air, 4.6, 4.7): leading dense layers, then MoE layers of sigmoid-
// routed experts with a selection bias (e_score_correction_bias), groups and a routed scale, plus
// shared experts; q/k/v biases, optional qk norm, partial RoPE.
absl::Status ReadGlm4Moe(const Config& c, ModelSpec& s) {
  const std::string_view source = c.source();
  ASSIGN_OR_RETURN(s.attn_qkv_bias, c.BoolOr("attention_bias", false));
  ASSIGN_OR_RETURN(s.qk_norm, c.BoolOr("use_qk_norm", false));
  const char* experts_key = c.Find("n_routed_experts") != nullptr ? "n_routed_experts" : "num_experts";
  ASSIGN_OR_RETURN(s.n_experts, c.Int(experts_key));
  ASSIGN_OR_RETURN(s.n_experts_used, c.Int("num_experts_per_tok"));
  ASSIGN_OR_RETURN(s.expert_ffn_dim, c.Int("moe_intermediate_size"));
  ASSIGN_OR_RETURN(int64_t n_shared, c.IntOr("n_shared_experts", 1));
  if (n_shared < 0) return InvalidArgument(source, ": key \"n_shared_experts\" must not be negative");
  s.shared_expert_ffn_dim = n_shared * s.expert_ffn_dim;
  ASSIGN_OR_RETURN(int64_t first_dense, c.IntOr("first_k_dense_replace", 1));
  if (first_dense < 0) return InvalidArgument(source, ": key \"first_k_dense_replace\" must not be negative");
  ASSIGN_OR_RETURN(bool norm_topk, c.BoolOr("norm_topk_prob", true));
  s.router_norm = norm_topk ? RouterNorm::kSigmoidTopKRenormalize : RouterNorm::kSigmoidTopK;
  s.expert_selection_bias = true;
  ASSIGN_OR_RETURN(double scale, c.FloatOr("routed_scaling_factor", 1.0));
  s.routed_scale = static_cast<float>(scale);
  ASSIGN_OR_RETURN(s.n_expert_groups, c.IntOr("n_group", 1));
  ASSIGN_OR_RETURN(s.n_groups_used, c.IntOr("topk_group", 1));
  ASSIGN_OR_RETURN(s.n_nextn_layers, c.IntOr("num_nextn_predict_layers", 0));
  for (size_t l = 0; l < s.layer_is_moe.size(); ++l) s.layer_is_moe[l] = static_cast<int64_t>(l) >= first_dense;
  return absl::OkStatus();
}

// GptOssForCausalLM (gpt-oss-20b, -120b): every layer MoE (router with a bias, top-k then softmax,
// biased experts with a clamped SwiGLU), biases on q/k/v/o, attention sinks, sliding layers.
absl::Status ReadGptOss(const Config& c, ModelSpec& s) {
  const std::string_view source = c.source();
  ASSIGN_OR_RETURN(bool bias, c.BoolOr("attention_bias", true));
  s.attn_qkv_bias = s.attn_out_bias = bias;
  s.attn_sinks = true;
  const char* experts_key = c.Find("num_local_experts") != nullptr ? "num_local_experts" : "num_experts";
  ASSIGN_OR_RETURN(s.n_experts, c.Int(experts_key));
  ASSIGN_OR_RETURN(s.n_experts_used, c.Int("num_experts_per_tok"));
  s.expert_ffn_dim = s.ffn_dim;
  s.router_norm = RouterNorm::kTopKThenSoftmax;
  s.router_bias = s.expert_bias = true;
  s.expert_act = FfnActivation::kSwiGluClamped;
  ASSIGN_OR_RETURN(double limit, c.FloatOr("swiglu_limit", 7.0));
  ASSIGN_OR_RETURN(double alpha, c.FloatOr("swiglu_alpha", 1.702));
  s.swiglu_limit = static_cast<float>(limit);
  s.swiglu_alpha = static_cast<float>(alpha);
  for (size_t l = 0; l < s.layer_is_moe.size(); ++l) s.layer_is_moe[l] = true;
  ASSIGN_OR_RETURN(s.sliding_window, c.IntOr("sliding_window", 0));
  s.layer_is_swa.assign(s.layer_is_moe.size(), false);
  if (const Json* t = c.Find("layer_types"); t != nullptr) {
    if (!t->is_array() || t->size() != s.layer_is_swa.size()) {
      return InvalidArgument(source, ": key \"layer_types\" must list one type per layer (", s.layer_is_swa.size(), ")");
    }
    for (size_t l = 0; l < t->size(); ++l) {
      const Json& v = (*t)[l];
      if (!v.is_string() || (v != "sliding_attention" && v != "full_attention")) {
        return InvalidArgument(source, ": key \"layer_types\"[", l, "] must be \"sliding_attention\" or \"full_attention\"");
      }
      s.layer_is_swa[l] = v == "sliding_attention";
    }
  } else {  // GptOssConfig's default: even layers slide
    for (size_t l = 0; l < s.layer_is_swa.size(); ++l) s.layer_is_swa[l] = l % 2 == 0;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelSpec> ModelSpecFromHfConfigText(std::string_view json_text, std::string_view source) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(source, ": not valid JSON");
  if (!j.is_object()) return InvalidArgument(source, ": expected a JSON object at the top level");
  Config c(j, source);

  // Architecture from "architectures"[0], else model_type.
  std::string arch_name;
  if (const Json* a = c.Find("architectures"); a != nullptr) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string()) {
      return InvalidArgument(source, ": key \"architectures\" must be a non-empty list of strings");
    }
    arch_name = (*a)[0].get<std::string>();
  } else if (const Json* m = c.Find("model_type"); m != nullptr && m->is_string()) {
    const std::string mt = m->get<std::string>();
    if (mt == "llama") arch_name = "LlamaForCausalLM";
    else if (mt == "qwen3") arch_name = "Qwen3ForCausalLM";
    else if (mt == "qwen3_moe") arch_name = "Qwen3MoeForCausalLM";
    else if (mt == "mixtral") arch_name = "MixtralForCausalLM";
    else if (mt == "glm4_moe") arch_name = "Glm4MoeForCausalLM";
    else if (mt == "gpt_oss") arch_name = "GptOssForCausalLM";
    else arch_name = mt;
  } else {
    return InvalidArgument(source, ": missing required key \"architectures\" (or \"model_type\")");
  }

  ModelSpec s;
  if (arch_name == "LlamaForCausalLM") s.arch = Arch::kLlama;
  else if (arch_name == "Qwen3ForCausalLM") s.arch = Arch::kQwen3;
  else if (arch_name == "Qwen3MoeForCausalLM") s.arch = Arch::kQwen3Moe;
  else if (arch_name == "MixtralForCausalLM") s.arch = Arch::kMixtral;
  else if (arch_name == "Glm4MoeForCausalLM") s.arch = Arch::kGlm4Moe;
  else if (arch_name == "GptOssForCausalLM") s.arch = Arch::kGptOss;
  else {
    return Unimplemented(source, ": unsupported architecture \"", arch_name,
                         "\" (supported: LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                         "MixtralForCausalLM, Glm4MoeForCausalLM, GptOssForCausalLM)");
  }
  const bool qwen = s.arch == Arch::kQwen3 || s.arch == Arch::kQwen3Moe;

  ASSIGN_OR_RETURN(s.vocab_size, c.Int("vocab_size"));
  ASSIGN_OR_RETURN(s.hidden, c.Int("hidden_size"));
  ASSIGN_OR_RETURN(s.n_layers, c.Int("num_hidden_layers"));
  ASSIGN_OR_RETURN(s.n_heads, c.Int("num_attention_heads"));
  ASSIGN_OR_RETURN(s.n_kv_heads, c.IntOr("num_key_value_heads", s.n_heads));
  if (s.n_heads <= 0) return InvalidArgument(source, ": key \"num_attention_heads\" must be positive");
  ASSIGN_OR_RETURN(s.head_dim, c.IntOr("head_dim", s.hidden / s.n_heads));  // absent or null
  ASSIGN_OR_RETURN(s.ffn_dim, c.Int("intermediate_size"));
  ASSIGN_OR_RETURN(double eps, c.FloatOr("rms_norm_eps", 1e-6));
  s.rms_eps = static_cast<float>(eps);
  ASSIGN_OR_RETURN(s.context_length, c.IntOr("max_position_embeddings", 4096));
  ASSIGN_OR_RETURN(s.tied_embeddings, c.BoolOr("tie_word_embeddings", false));

  // rope_theta (4.x) or rope_parameters.rope_theta (5.x).
  double theta = s.arch == Arch::kMixtral ? 1e6 : 10000.0;
  if (const Json* p = c.Find("rope_parameters"); p != nullptr) {
    if (!p->is_object()) return InvalidArgument(source, ": key \"rope_parameters\" must be an object");
    Config rp(*p, source);
    ASSIGN_OR_RETURN(theta, rp.FloatOr("rope_theta", theta));
  }
  ASSIGN_OR_RETURN(theta, c.FloatOr("rope_theta", theta));
  s.rope_theta = static_cast<float>(theta);
  ASSIGN_OR_RETURN(s.rope_scaling, RopeScalingFromConfig(c, source));
  // partial_rotary_factor: top level (4.x) or in rope_parameters (5.x); the first rope_dim dims rotate.
  double partial = 1.0;
  if (const Json* p = c.Find("rope_parameters"); p != nullptr && p->is_object()) {
    ASSIGN_OR_RETURN(partial, Config(*p, source).FloatOr("partial_rotary_factor", partial));
  }
  ASSIGN_OR_RETURN(partial, c.FloatOr("partial_rotary_factor", partial));
  if (!(partial > 0.0 && partial <= 1.0)) {
    return InvalidArgument(source, ": key \"partial_rotary_factor\" = ", partial, " must be in (0, 1]");
  }
  if (partial != 1.0) s.rope_dim = static_cast<int64_t>(static_cast<double>(s.head_dim) * partial);
  s.rope_style = RopeStyle::kRotateHalf;  // HF weights are unpermuted for every architecture here
  s.qk_norm = qwen;

  s.layer_is_moe.assign(s.n_layers > 0 && s.n_layers <= 4096 ? s.n_layers : 0, false);
  if (s.arch == Arch::kQwen3Moe || s.arch == Arch::kMixtral) {
    const char* experts_key = c.Find("num_experts") != nullptr ? "num_experts" : "num_local_experts";
    ASSIGN_OR_RETURN(s.n_experts, c.Int(experts_key));
    if (s.n_experts <= 0) {
      return InvalidArgument(source, ": key \"", experts_key, "\" = ", s.n_experts, ": a ", arch_name,
                             " needs at least one expert");
    }
    ASSIGN_OR_RETURN(s.n_experts_used, c.Int("num_experts_per_tok"));
    if (s.arch == Arch::kMixtral) {
      s.expert_ffn_dim = s.ffn_dim;
      s.router_norm = RouterNorm::kTopKThenSoftmax;
      for (size_t l = 0; l < s.layer_is_moe.size(); ++l) s.layer_is_moe[l] = s.n_experts > 0;
    } else {
      ASSIGN_OR_RETURN(s.expert_ffn_dim, c.Int("moe_intermediate_size"));
      ASSIGN_OR_RETURN(bool norm_topk, c.BoolOr("norm_topk_prob", false));  // class default False
      s.router_norm = norm_topk ? RouterNorm::kSoftmaxTopKRenormalize : RouterNorm::kSoftmaxThenTopK;
      ASSIGN_OR_RETURN(int64_t step, c.IntOr("decoder_sparse_step", 1));
      if (step <= 0) return InvalidArgument(source, ": key \"decoder_sparse_step\" must be positive");
      std::set<int64_t> mlp_only;
      if (const Json* m = c.Find("mlp_only_layers"); m != nullptr) {
        if (!m->is_array()) return InvalidArgument(source, ": key \"mlp_only_layers\" must be a list");
        for (const Json& x : *m) {
          ASSIGN_OR_RETURN(int64_t i, c.AsInt(x, "mlp_only_layers"));
          mlp_only.insert(i);
        }
      }
      // Qwen3MoeDecoderLayer: MoE iff not in mlp_only_layers, E > 0 and (i+1) % step == 0.
      for (size_t l = 0; l < s.layer_is_moe.size(); ++l) {
        const int64_t i = static_cast<int64_t>(l);
        s.layer_is_moe[l] = mlp_only.count(i) == 0 && s.n_experts > 0 && (i + 1) % step == 0;
      }
    }
  }
  if (s.arch == Arch::kGlm4Moe) RETURN_IF_ERROR(ReadGlm4Moe(c, s));
  if (s.arch == Arch::kGptOss) RETURN_IF_ERROR(ReadGptOss(c, s));
  ASSIGN_OR_RETURN(s.bos_token_id, c.TokenId("bos_token_id"));
  ASSIGN_OR_RETURN(s.eos_token_id, c.TokenId("eos_token_id"));
  RETURN_IF_ERROR(Validate(s, source));
  return s;
}

absl::StatusOr<ModelSpec> ModelSpecFromHfConfig(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec)) file = (std::filesystem::path(path) / "config.json").string();
  std::ifstream in(file, std::ios::binary);
  if (!in) return NotFound(file, ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return DataLoss(file, ": read error");
  ASSIGN_OR_RETURN(ModelSpec spec, ModelSpecFromHfConfigText(text.str(), file));
  if (spec.name.empty()) spec.name = std::filesystem::path(file).parent_path().filename().string();
  return spec;
}

}  // namespace specgen
