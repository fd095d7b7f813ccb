// `specgen inspect MODEL [--tensors]`: what a model is (architecture, every hyper-parameter), how big
// it is (parameters total and active per token; bytes per layer, per expert and in all) and, with
// --tensors, every tensor. Synthetic presets are inspected from their spec alone: nothing is generated.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "engine/cli/command.h"
#include "engine/core/byte_size.h"
#include "engine/core/status_macros.h"
#include "engine/io/gguf.h"
#include "engine/io/model_loader.h"
#include "engine/io/quant_mix.h"
#include "engine/io/synth.h"
#include "nlohmann/json.hpp"

namespace specgen::cli {
namespace {

// One tensor as inspect shows it; experts of one layer and role are one row (count = E).
struct Row {
  WeightKey key;
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  size_t bytes = 0;  // of one tensor (one expert)
  int64_t count = 1;
};

bool IsExpert(Role r) { return IsPerExpertRole(r); }

std::string Shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += Cat(i ? ", " : "", s[i]);
  return out + "]";
}

// "30.53B (30,532,122,624)"
std::string Params(int64_t n) {
  std::string digits = std::to_string(n), grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  char buf[32];
  if (n >= 1'000'000'000) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  return Cat(buf, " (", grouped, ")");
}

std::string Bytes(size_t b) { return Cat(FormatBytes(static_cast<double>(b)), " (", b, " B)"); }

void Line(std::string_view label, std::string_view value) {
  std::printf("  %-24s %s\n", std::string(label).c_str(), std::string(value).c_str());
}

std::string_view RouterText(RouterNorm n) {
  switch (n) {
    case RouterNorm::kSoftmaxThenTopK: return "softmax over all experts, top-k (no renormalization)";
    case RouterNorm::kSoftmaxTopKRenormalize: return "softmax over all experts, top-k, renormalized";
    case RouterNorm::kTopKThenSoftmax: return "top-k logits, softmax over the k";
    case RouterNorm::kSigmoidTopK: return "sigmoid scores, top-k on score + selection bias";
    case RouterNorm::kSigmoidTopKRenormalize: return "sigmoid scores, top-k on score + selection bias, renormalized";
  }
  return "?";
}

// Tokenizer kind and vocabulary size, when the model's files say.
std::string TokenizerText(const std::string& path, ModelSourceKind kind) {
  if (kind == ModelSourceKind::kSynth) return "none (synthetic weights)";
  if (kind == ModelSourceKind::kGguf) {
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
    if (!f.ok()) return "unknown";
    const GgufValue* model = (*f)->Find("tokenizer.ggml.model");
    const GgufValue* tokens = (*f)->Find("tokenizer.ggml.tokens");
    if (model == nullptr || model->AsString() == nullptr || *model->AsString() == "none" ||
        *model->AsString() == "no_vocab") {
      return "none in file";
    }
    std::string kind_text = *model->AsString() == "gpt2"    ? "byte-level BPE (gpt2)"
                            : *model->AsString() == "llama" ? "SentencePiece BPE (llama)"
                                                            : *model->AsString();
    if (tokens && tokens->AsArray()) kind_text += Cat(", ", tokens->AsArray()->items.size(), " tokens");
    return kind_text;
  }
  const std::filesystem::path tj = std::filesystem::path(path) / "tokenizer.json";
  std::ifstream in(tj);
  if (!in) return "none (no tokenizer.json)";
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    return "tokenizer.json unreadable";
  }
  const nlohmann::json& m = j["model"];
  std::string type = m.contains("type") && m["type"].is_string() ? m["type"].get<std::string>() : "?";
  size_t vocab = m.contains("vocab") && (m["vocab"].is_object() || m["vocab"].is_array()) ? m["vocab"].size() : 0;
  size_t added = j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"].size() : 0;
  return Cat(type, " (tokenizer.json), ", vocab, " tokens + ", added, " added");
}

absl::Status Inspect(const std::string& path, bool tensors, const std::string& type_text) {
  const ModelSourceKind kind = SourceKind(path);
  ModelSpec spec;
  std::vector<Row> rows;
  std::string dtype_note;
  if (kind == ModelSourceKind::kSynth) {
    ASSIGN_OR_RETURN(spec, LoadModelSpec(path));
    // The type as generate and plan take it: the path's TYPE (synth:PRESET:TYPE), else --type, else
    // the path's default (f32). A dtype (every matrix in it) or a mix (q4_k_m).
    ASSIGN_OR_RETURN(const SynthPath sp, ParseSynthPath(path));
    const bool path_has_type = std::count(path.begin(), path.end(), ':') >= 2;
    ExportType t = sp.type;
    if (!type_text.empty()) {
      if (absl::StatusOr<DType> d = ParseDType(type_text); d.ok()) {
        t = PureExportType(*d);
      } else {
        ASSIGN_OR_RETURN(t, ParseExportType(type_text));
      }
      if (path_has_type && t.name != sp.type.name) {
        return InvalidArgument("--type ", type_text, " and the type in ", path, " disagree; give one of them");
      }
    }
    dtype_note = Cat(" (sizes as ", t.name, path_has_type ? ", from the model path)"
                                                  : type_text.empty() ? ", the default; --type or synth:PRESET:TYPE)"
                                                                      : ", --type)");
    for (const ExpectedTensor& e : ExpectedTensors(spec)) {
      if (IsExpert(e.key.role) && e.key.expert > 0) continue;
      Row r{e.key, KeyString(e.key), SynthTensorType(t, spec, e.key, e.shape.back()), e.shape};
      ASSIGN_OR_RETURN(r.bytes, TensorBytes(r.dtype, e.shape.back(), e.shape.size() == 2 ? e.shape[0] : 1));
      if (IsExpert(e.key.role)) r.count = spec.n_experts;
      rows.push_back(r);
    }
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> model, LoadModel(path));
    spec = model->spec;
    for (const auto& [key, v] : model->weights.tensors()) {
      if (IsExpert(key.role) && key.expert > 0) continue;
      std::string name(model->weights.SourceName(key));
      if (IsExpert(key.role)) name = name.substr(0, name.rfind('['));
      Row r{key, name, v.dtype, std::vector<int64_t>(v.shape.begin(), v.shape.begin() + v.ndim), v.bytes};
      if (IsExpert(key.role)) r.count = spec.n_experts;
      rows.push_back(r);
    }
  }

  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::tie(a.key.layer, a.key.role, a.key.expert) < std::tie(b.key.layer, b.key.role, b.key.expert);
  });
  const ParamCounts pc = CountParams(spec);
  int64_t n_moe = 0;
  for (bool m : spec.layer_is_moe) n_moe += m;
  std::printf("%s\n", path.c_str());
  Line("architecture", ArchName(spec.arch));
  Line("name", spec.name.empty() ? "-" : spec.name);
  Line("vocab_size", Cat(spec.vocab_size));
  Line("hidden (D)", Cat(spec.hidden));
  Line("layers", Cat(spec.n_layers, " (", n_moe, " MoE, ", spec.n_layers - n_moe, " dense)"));
  Line("attention heads", Cat(spec.n_heads, " query, ", spec.n_kv_heads, " key/value (GQA ",
                              spec.n_heads / std::max<int64_t>(1, spec.n_kv_heads), ")"));
  Line("head_dim", Cat(spec.head_dim));
  Line("q/k norm", spec.qk_norm ? "per-head RMSNorm" : "none");
  if (spec.layer_is_moe.size() != static_cast<size_t>(n_moe) || !spec.is_moe()) {
    Line("dense ffn_dim", Cat(spec.ffn_dim));
  }
  if (spec.is_moe()) {
    Line("experts", Cat(spec.n_experts, ", top-", spec.n_experts_used, " per token"));
    Line("expert ffn_dim (F)", Cat(spec.expert_ffn_dim));
    Line("router", RouterText(spec.router_norm));
  }
  // The features of GLM-4.5 / gpt-oss (docs/design.md §5.1), where the model has them.
  if (spec.n_expert_groups > 1) Line("expert groups", Cat(spec.n_groups_used, " of ", spec.n_expert_groups, " kept"));
  if (spec.routed_scale != 1.0f) Line("routed scale", Cat(spec.routed_scale));
  if (spec.shared_expert_ffn_dim > 0) {
    Line("shared expert ffn_dim", Cat(spec.shared_expert_ffn_dim, spec.shared_expert_gate ? " (sigmoid gate)" : ""));
  }
  if (spec.expert_act == FfnActivation::kSwiGluClamped) {
    Line("expert activation", Cat("clamped SwiGLU (limit ", spec.swiglu_limit, ", alpha ", spec.swiglu_alpha, ")"));
  }
  if (spec.attn_qkv_bias || spec.attn_out_bias) {
    Line("attention biases", Cat(spec.attn_qkv_bias ? "q/k/v" : "", spec.attn_qkv_bias && spec.attn_out_bias ? ", " : "",
                                 spec.attn_out_bias ? "output" : ""));
  }
  if (spec.attn_sinks) Line("attention sinks", "yes (one logit a head)");
  if (spec.sliding_window > 0) {
    int64_t sliding = 0;
    for (int64_t l = 0; l < spec.n_layers; ++l) sliding += spec.is_swa(l);
    Line("sliding window", Cat(spec.sliding_window, " positions on ", sliding, " of ", spec.n_layers, " layers"));
  }
  if (spec.rotary_dim() != spec.head_dim) Line("rotated dims", Cat(spec.rotary_dim(), " of ", spec.head_dim));
  Line("tied embeddings", spec.tied_embeddings ? "yes" : "no");
  Line("rms_eps", Cat(spec.rms_eps));
  Line("rope", Cat("theta ", spec.rope_theta, ", ",
                   spec.rope_style == RopeStyle::kRotateHalf ? "rotate-half (neox)" : "interleaved (gpt-j)",
                   spec.rope_scaling.active() ? Cat(", scaling ", Describe(spec.rope_scaling)) : ""));
  Line("context_length", Cat(spec.context_length));
  Line("bos / eos token ids", Cat(spec.bos_token_id, " / ", spec.eos_token_id));
  Line("tokenizer", TokenizerText(path, kind));

  std::printf("parameters\n");
  Line("total", Params(pc.total));
  Line("active per token", Params(pc.active));
  Line("embeddings", Params(pc.embedding));
  if (spec.is_moe()) Line("per expert", Params(pc.per_expert));

  // Bytes by category, from the tensors actually present (or planned, for synth).
  size_t total = 0, global = 0, expert_bytes = 0;
  std::map<int, size_t> layer_bytes, layer_expert_bytes;
  std::map<DType, size_t> dtype_bytes;
  std::map<DType, int> dtype_tensors;
  int first_moe = -1;
  for (const Row& r : rows) {
    const size_t all = r.bytes * static_cast<size_t>(r.count);
    total += all;
    dtype_bytes[r.dtype] += all;
    dtype_tensors[r.dtype] += 1;
    if (r.key.layer < 0) {
      global += all;
      continue;
    }
    layer_bytes[r.key.layer] += all;
    if (IsExpert(r.key.role)) {
      layer_expert_bytes[r.key.layer] += all;
      if (first_moe < 0 || r.key.layer == first_moe) {
        first_moe = r.key.layer;
        expert_bytes += r.bytes;
      }
    }
  }
  std::printf("bytes%s\n", dtype_note.c_str());
  Line("total", Bytes(total));
  Line("embeddings, head, norm", Bytes(global));
  // The mix: a quantized file keeps some tensors in other types (the head, attn_v, ffn_down).
  std::vector<std::pair<size_t, DType>> by_size;
  for (const auto& [t, b] : dtype_bytes) by_size.push_back({b, t});
  std::sort(by_size.rbegin(), by_size.rend());
  std::string mix;
  for (const auto& [b, t] : by_size) {
    mix += Cat(mix.empty() ? "" : ", ", Name(t), " ", FormatBytes(static_cast<double>(b)), " (",
               dtype_tensors[t], " tensor", dtype_tensors[t] == 1 ? "" : "s", ")");
  }
  Line("by dtype", mix);
  if (!layer_bytes.empty()) {
    Line(Cat("per layer (layer ", layer_bytes.begin()->first, ")"), Bytes(layer_bytes.begin()->second));
    if (first_moe >= 0) {
      Line(Cat("  of which experts"), Bytes(layer_expert_bytes[first_moe]));
      Line("per expert", Bytes(expert_bytes));
      // Bytes that cross PCIe for one token whose experts all miss the cache.
      Line("expert bytes per token", Bytes(expert_bytes * spec.n_experts_used * n_moe));
    }
  }

  if (tensors) {
    size_t w = 4;
    for (const Row& r : rows) w = std::max(w, r.name.size() + (r.count > 1 ? 0 : 0));
    std::printf("tensors (experts: one row per layer and role, shape of one expert)\n");
    std::printf("  %-*s %-24s %-6s %-20s %8s %12s\n", static_cast<int>(w), "name", "role", "dtype", "shape",
                "experts", "bytes");
    for (const Row& r : rows) {
      std::printf("  %-*s %-24s %-6s %-20s %8s %12zu\n", static_cast<int>(w), r.name.c_str(),
                  KeyString(r.key).c_str(), std::string(Name(r.dtype)).c_str(), Shape(r.shape).c_str(),
                  r.count > 1 ? std::to_string(r.count).c_str() : "", r.bytes * static_cast<size_t>(r.count));
    }
  }
  return absl::OkStatus();
}

Registrar kInspect{{"inspect", "Show a model's architecture, hyper-parameters, parameter counts and sizes",
                    [](CLI::App& app) {
                      auto model = std::make_shared<std::string>();
                      auto tensors = std::make_shared<bool>(false);
                      auto type = std::make_shared<std::string>();
                      app.add_option("MODEL", *model,
                                     "A GGUF file, a Hugging Face directory (config.json + *.safetensors), or "
                                     "synth:PRESET (inspected from its shape alone; nothing is generated)")
                          ->required();
                      app.add_flag("--tensors", *tensors,
                                   "Also list every tensor: file name, role, dtype, row-major shape, bytes "
                                   "(experts of a layer collapsed into one row)");
                      app.add_option("--type", *type,
                                     Cat("For synth: presets only, the type the byte sizes assume: a dtype, or a "
                                         "mix of convert --type (", kExportTypes, "); default: the model path's "
                                         "TYPE (synth:PRESET:TYPE), else f32 as generate and plan take it; files "
                                         "report their own"));
                      return [=]() { return Inspect(*model, *tensors, *type); };
                    }}};

}  // namespace
}  // namespace specgen::cli
