#include "engine/io/model_loader.h"

#include <filesystem>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/core/quant.h"
#include "engine/core/status_macros.h"
#include "engine/io/gguf.h"
#include "engine/io/gguf_export.h"
#include "engine/io/hf_config.h"
#include "engine/io/model_spec_gguf.h"
#include "engine/io/safetensors.h"
#include "engine/io/synth.h"

namespace specgen {
namespace {

constexpr std::string_view kSynthPrefix = "synth:";

TensorView MakeView(DType dtype, const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  TensorView v;
  v.dtype = dtype;
  v.ndim = static_cast<int>(shape.size());
  for (int i = 0; i < v.ndim && i < 4; ++i) v.shape[i] = shape[i];
  v.location = Location::kHost;
  v.data = data;
  v.bytes = bytes;
  return v;
}

bool IsExpertRole(Role r) { return IsPerExpertRole(r); }

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += Cat(i ? ", " : "", s[i]);
  return out + "]";
}

// A checkpoint whose file holds layers past the count its metadata declares would otherwise run
// truncated without a word: the first tensor of such a layer is an error naming both numbers.
// `prefix` is what precedes the layer number ("blk." in GGUF, "model.layers." in Hugging Face).
template <typename Names>
absl::Status CheckNoLayersBeyond(const Names& names, std::string_view prefix, const ModelSpec& spec,
                                 std::string_view path, std::string_view count_key) {
  for (const std::string& name : names) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t dot = name.find('.', prefix.size());
    int64_t layer = 0;
    if (dot == std::string::npos ||
        !absl::SimpleAtoi(name.substr(prefix.size(), dot - prefix.size()), &layer)) {
      continue;
    }
    if (layer >= spec.n_layers) {
      return InvalidArgument(path, ": tensor ", name, " belongs to layer ", layer, ", but ", count_key,
                             " declares ", spec.n_layers, " layers; the checkpoint holds more layers "
                             "than its metadata says (fix ", count_key, ")");
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------- GGUF

absl::StatusOr<std::unique_ptr<LoadedModel>> LoadGguf(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  ASSIGN_OR_RETURN(ModelSpec spec, ModelSpecFromGguf(*file));
  if (spec.name.empty()) spec.name = std::filesystem::path(path).stem().string();
  auto model = std::make_unique<LoadedModel>();
  model->spec = spec;
  model->source = path;
  for (const ExpectedTensor& e : ExpectedTensors(spec)) {
    const std::string name = GgufTensorName(spec, e.key);
    const GgufTensorInfo* t = file->FindTensor(name);
    if (t == nullptr) {
      return NotFound(path, ": missing tensor ", name, " (", KeyString(e.key), ")");
    }
    std::vector<int64_t> shape(t->ne.rbegin(), t->ne.rend());  // ne[0] fastest ⇒ last row-major dim
    if (!IsExpertRole(e.key.role)) {
      model->weights.Add(e.key, MakeView(t->dtype, shape, file->TensorData(*t), t->bytes), name);
      continue;
    }
    // Stacked experts: ne = [in, out, E] (matrices) or [n, E] (biases); expert e is the contiguous
    // slab e of the last dimension.
    if (shape.size() != e.shape.size() + 1 || shape[0] != spec.n_experts) {
      return InvalidArgument(path, ": tensor ", name, " has ne ", ShapeText(t->ne), ", expected ",
                             spec.n_experts, " stacked experts as ne[", e.shape.size(), "]");
    }
    const size_t per_expert = t->bytes / static_cast<size_t>(spec.n_experts);
    const uint8_t* base = file->TensorData(*t) + per_expert * static_cast<size_t>(e.key.expert);
    model->weights.Add(e.key, MakeView(t->dtype, std::vector<int64_t>(shape.begin() + 1, shape.end()), base,
                                       per_expert),
                       Cat(name, "[", e.key.expert, "]"));
  }
  RETURN_IF_ERROR(model->weights.Validate(spec, path));
  std::vector<std::string> names;
  for (const GgufTensorInfo& t : file->tensors()) names.push_back(t.name);
  ModelSpec with_nextn = spec;  // GLM's multi-token-prediction layers follow the last one, unused
  with_nextn.n_layers += spec.n_nextn_layers;
  RETURN_IF_ERROR(CheckNoLayersBeyond(names, "blk.", with_nextn, path,
                                      Cat(GgufArchName(spec.arch), ".block_count")));
  model->weights.KeepAlive(std::shared_ptr<const GgufFile>(std::move(file)));
  return model;
}

// ---------------------------------------------------------------------------------- Hugging Face

std::string HfLayerName(const ModelSpec& spec, const WeightKey& k) {
  const std::string p = Cat("model.layers.", k.layer, ".");
  const std::string moe = spec.arch == Arch::kMixtral ? "block_sparse_moe." : "mlp.";
  switch (k.role) {
    case Role::kAttnNorm: return p + "input_layernorm.weight";
    case Role::kAttnQ: return p + "self_attn.q_proj.weight";
    case Role::kAttnK: return p + "self_attn.k_proj.weight";
    case Role::kAttnV: return p + "self_attn.v_proj.weight";
    case Role::kAttnOut: return p + "self_attn.o_proj.weight";
    case Role::kAttnQNorm: return p + "self_attn.q_norm.weight";
    case Role::kAttnKNorm: return p + "self_attn.k_norm.weight";
    case Role::kFfnNorm: return p + "post_attention_layernorm.weight";
    case Role::kFfnGate: return p + "mlp.gate_proj.weight";
    case Role::kFfnUp: return p + "mlp.up_proj.weight";
    case Role::kFfnDown: return p + "mlp.down_proj.weight";
    case Role::kRouter: return p + moe + (spec.arch == Arch::kGptOss ? "router.weight" : "gate.weight");
    case Role::kAttnQBias: return p + "self_attn.q_proj.bias";
    case Role::kAttnKBias: return p + "self_attn.k_proj.bias";
    case Role::kAttnVBias: return p + "self_attn.v_proj.bias";
    case Role::kAttnOutBias: return p + "self_attn.o_proj.bias";
    case Role::kAttnSinks: return p + "self_attn.sinks";
    case Role::kRouterBias: return p + "mlp.router.bias";
    case Role::kExpertSelBias: return p + "mlp.gate.e_score_correction_bias";
    case Role::kSharedGate: return p + "mlp.shared_experts.gate_proj.weight";
    case Role::kSharedUp: return p + "mlp.shared_experts.up_proj.weight";
    case Role::kSharedDown: return p + "mlp.shared_experts.down_proj.weight";
    case Role::kSharedGateInp: return p + "mlp.shared_expert_gate.weight";
    case Role::kExpertGateBias:
    case Role::kExpertUpBias:
    case Role::kExpertDownBias: return Cat(p, "mlp.experts.", k.expert, ".", RoleName(k.role));
    case Role::kExpertGate:
    case Role::kExpertUp:
    case Role::kExpertDown: {
      const std::string e = Cat(p, moe, "experts.", k.expert, ".");
      if (spec.arch == Arch::kMixtral) {
        return e + (k.role == Role::kExpertGate ? "w1" : k.role == Role::kExpertUp ? "w3" : "w2") +
               ".weight";
      }
      return e + (k.role == Role::kExpertGate ? "gate_proj" : k.role == Role::kExpertUp ? "up_proj"
                                                                                         : "down_proj") +
             ".weight";
    }
    default: return "";
  }
}

const SafetensorsTensor* FindAny(const SafetensorsSet& set, std::initializer_list<std::string> names) {
  for (const std::string& n : names) {
    if (const SafetensorsTensor* t = set.Find(n)) return t;
  }
  return nullptr;
}

// transformers 5 fused experts: `experts.gate_up_proj` [E, 2F, D] (gate rows first, then up, per
// expert) and `experts.down_proj` [E, D, F]; with or without a `.weight` suffix, under `mlp.` or
// (Mixtral) `block_sparse_moe.`.
absl::Status AddFusedExpert(const std::string& dir, const ModelSpec& spec, const SafetensorsSet& set,
                            const WeightKey& k, WeightSet& ws) {
  const std::string p = Cat("model.layers.", k.layer, ".");
  const bool down = k.role == Role::kExpertDown;
  const std::string leaf = down ? "experts.down_proj" : "experts.gate_up_proj";
  const SafetensorsTensor* t = FindAny(set, {p + "mlp." + leaf, p + "mlp." + leaf + ".weight",
                                             p + "block_sparse_moe." + leaf,
                                             p + "block_sparse_moe." + leaf + ".weight"});
  if (t == nullptr) {
    return NotFound(dir, ": missing tensor ", HfTensorName(spec, k), " (", KeyString(k),
                    "; no fused ", p, "mlp.", leaf, " either)");
  }
  const int64_t E = spec.n_experts, F = spec.expert_ffn_dim, D = spec.hidden;
  const std::vector<int64_t> want = down ? std::vector<int64_t>{E, D, F} : std::vector<int64_t>{E, 2 * F, D};
  if (t->shape != want) {
    return InvalidArgument(dir, ": tensor ", t->name, " has shape ", ShapeText(t->shape), ", expected ",
                           ShapeText(want));
  }
  const size_t expert_bytes = t->bytes / static_cast<size_t>(E);
  const uint8_t* base = t->data + expert_bytes * static_cast<size_t>(k.expert);
  if (down) {
    ws.Add(k, MakeView(t->dtype, {D, F}, base, expert_bytes), Cat(t->name, "[", k.expert, "]"));
  } else {
    const size_t half = expert_bytes / 2;
    const bool up = k.role == Role::kExpertUp;
    ws.Add(k, MakeView(t->dtype, {F, D}, base + (up ? half : 0), half),
           Cat(t->name, "[", k.expert, "]", up ? ".up" : ".gate"));
  }
  return absl::OkStatus();
}

// gpt-oss's experts as transformers holds them: `experts.gate_up_proj` [E, D, 2F] ([in, out], gate and
// up interleaved: column 2i is gate row i, 2i + 1 up row i), `gate_up_proj_bias` [E, 2F] (the same
// interleave), `down_proj` [E, F, D] ([in, out]) and `down_proj_bias` [E, D]. Each expert's matrices
// are transposed and de-interleaved into f32 [out, in] copies the WeightSet keeps alive.
absl::Status AddGptOssExperts(const std::string& dir, const ModelSpec& spec, const SafetensorsSet& set, int layer,
                              WeightSet& ws) {
  const std::string p = Cat("model.layers.", layer, ".mlp.experts.");
  if (set.Find(p + "gate_up_proj_blocks") != nullptr) {
    return Unimplemented(dir, ": tensor ", p, "gate_up_proj_blocks: MXFP4 experts in safetensors are not read "
                         "yet; use a GGUF of the model (llama.cpp's converter keeps them MXFP4) or a "
                         "dequantized (bf16) checkpoint");
  }
  const int64_t E = spec.n_experts, F = spec.expert_ffn_dim, D = spec.hidden;
  struct Want {
    const char* leaf;
    std::vector<int64_t> shape;
  };
  const Want wants[4] = {{"gate_up_proj", {E, D, 2 * F}}, {"gate_up_proj_bias", {E, 2 * F}},
                         {"down_proj", {E, F, D}}, {"down_proj_bias", {E, D}}};
  std::vector<std::vector<float>> f32(4);
  for (int i = 0; i < 4; ++i) {
    const SafetensorsTensor* t = set.Find(p + wants[i].leaf);
    if (t == nullptr) return NotFound(dir, ": missing tensor ", p, wants[i].leaf, " (gpt-oss experts of layer ", layer, ")");
    if (t->shape != wants[i].shape) {
      return InvalidArgument(dir, ": tensor ", t->name, " has shape ", ShapeText(t->shape), ", expected ",
                             ShapeText(wants[i].shape));
    }
    const int64_t cols = wants[i].shape.back();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < wants[i].shape.size(); ++d) rows *= wants[i].shape[d];
    f32[i].resize(static_cast<size_t>(rows * cols));
    absl::Status st = DequantizeRows(t->dtype, t->data, rows, cols, f32[i].data());
    if (!st.ok()) return InvalidArgument(dir, ": tensor ", t->name, ": ", st.message());
  }
  // One owned buffer: per expert gate [F, D], up [F, D], down [D, F], then the biases.
  const size_t per_expert = static_cast<size_t>(2 * F * D + D * F + 2 * F + D);
  auto owned = std::make_shared<std::vector<float>>(per_expert * static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    float* base = owned->data() + per_expert * static_cast<size_t>(e);
    float *gate = base, *up = gate + F * D, *down = up + F * D, *gb = down + D * F, *ub = gb + F, *db = ub + F;
    const float* gu = f32[0].data() + e * D * 2 * F;  // [D][2F]
    for (int64_t i = 0; i < F; ++i) {
      for (int64_t d = 0; d < D; ++d) {
        gate[i * D + d] = gu[d * 2 * F + 2 * i];
        up[i * D + d] = gu[d * 2 * F + 2 * i + 1];
      }
      gb[i] = f32[1][e * 2 * F + 2 * i];
      ub[i] = f32[1][e * 2 * F + 2 * i + 1];
    }
    const float* dn = f32[2].data() + e * F * D;  // [F][D]
    for (int64_t o = 0; o < D; ++o) {
      for (int64_t i = 0; i < F; ++i) down[o * F + i] = dn[i * D + o];
      db[o] = f32[3][e * D + o];
    }
    auto add = [&](Role r, const float* data, std::vector<int64_t> shape, const char* leaf) {
      size_t n = 1;
      for (int64_t x : shape) n *= static_cast<size_t>(x);
      ws.Add({r, layer, static_cast<int>(e)}, MakeView(DType::kF32, shape, data, n * sizeof(float)),
             Cat(p, leaf, "[", e, "]"));
    };
    add(Role::kExpertGate, gate, {F, D}, "gate_up_proj.gate");
    add(Role::kExpertUp, up, {F, D}, "gate_up_proj.up");
    add(Role::kExpertDown, down, {D, F}, "down_proj");
    add(Role::kExpertGateBias, gb, {F}, "gate_up_proj_bias.gate");
    add(Role::kExpertUpBias, ub, {F}, "gate_up_proj_bias.up");
    add(Role::kExpertDownBias, db, {D}, "down_proj_bias");
  }
  ws.KeepAlive(std::shared_ptr<const void>(owned, owned.get()));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LoadedModel>> LoadHfDir(const std::string& dir) {
  ASSIGN_OR_RETURN(ModelSpec spec, ModelSpecFromHfConfig(dir));
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsSet> set, SafetensorsSet::Open(dir));
  auto model = std::make_unique<LoadedModel>();
  model->spec = spec;
  model->source = dir;
  if (spec.arch == Arch::kGptOss) {
    for (int l = 0; l < spec.n_layers; ++l) {
      if (spec.layer_is_moe[l]) RETURN_IF_ERROR(AddGptOssExperts(dir, spec, *set, l, model->weights));
    }
  }
  for (const ExpectedTensor& e : ExpectedTensors(spec)) {
    if (model->weights.Has(e.key)) continue;  // gpt-oss experts, added above
    const std::string name = HfTensorName(spec, e.key);
    const SafetensorsTensor* t = set->Find(name);
    if (t == nullptr && IsExpertRole(e.key.role)) {
      RETURN_IF_ERROR(AddFusedExpert(dir, spec, *set, e.key, model->weights));
      continue;
    }
    if (t == nullptr) return NotFound(dir, ": missing tensor ", name, " (", KeyString(e.key), ")");
    model->weights.Add(e.key, MakeView(t->dtype, t->shape, t->data, t->bytes), name);
  }
  RETURN_IF_ERROR(model->weights.Validate(spec, dir));
  std::vector<std::string> names;
  for (const auto& [name, t] : set->tensors()) names.push_back(name);
  ModelSpec with_nextn = spec;  // GLM's multi-token-prediction layers follow the last one, unused
  with_nextn.n_layers += spec.n_nextn_layers;
  RETURN_IF_ERROR(CheckNoLayersBeyond(names, "model.layers.", with_nextn, dir,
                                      "config.json num_hidden_layers"));
  model->weights.KeepAlive(std::shared_ptr<const SafetensorsSet>(std::move(set)));
  return model;
}

// ------------------------------------------------------------------------------------------ synth

}  // namespace

absl::StatusOr<SynthPath> ParseSynthPath(std::string_view path) {
  if (path.substr(0, kSynthPrefix.size()) != kSynthPrefix) {
    return InvalidArgument("model path '", path, "': expected synth:PRESET[:TYPE[:SEED]]");
  }
  std::vector<std::string> parts = absl::StrSplit(AsAbsl(path.substr(kSynthPrefix.size())), ':');
  SynthPath out;
  if (parts.empty() || parts[0].empty() || parts.size() > 3) {
    return InvalidArgument("model path '", path, "': expected synth:PRESET[:TYPE[:SEED]]");
  }
  out.preset = parts[0];
  if (parts.size() >= 2) {
    // A dtype (every matrix in it), else a mix named only as a --type (q4_k_m: llama.cpp's).
    absl::StatusOr<DType> t = ParseDType(parts[1]);
    absl::StatusOr<ExportType> mix = ParseExportType(parts[1]);
    if (t.ok()) {
      out.type = PureExportType(*t);
    } else if (mix.ok()) {
      out.type = *mix;
    } else {
      return InvalidArgument("model path '", path, "': ", t.status().message(), ", or a mix: q5_k_m, q4_k_m");
    }
  }
  if (parts.size() == 3 && !absl::SimpleAtoi(parts[2], &out.seed)) {
    return InvalidArgument("model path '", path, "': seed '", parts[2], "' is not a non-negative integer");
  }
  return out;
}

std::string GgufTensorName(const WeightKey& k) {
  if (k.layer < 0) return Cat(RoleName(k.role), ".weight");
  switch (k.role) {
    case Role::kExpertGate: return Cat("blk.", k.layer, ".ffn_gate_exps.weight");
    case Role::kExpertUp: return Cat("blk.", k.layer, ".ffn_up_exps.weight");
    case Role::kExpertDown: return Cat("blk.", k.layer, ".ffn_down_exps.weight");
    case Role::kExpertGateBias: return Cat("blk.", k.layer, ".ffn_gate_exps.bias");
    case Role::kExpertUpBias: return Cat("blk.", k.layer, ".ffn_up_exps.bias");
    case Role::kExpertDownBias: return Cat("blk.", k.layer, ".ffn_down_exps.bias");
    default: {
      const std::string_view role = RoleName(k.role);  // biases carry their own ".bias" suffix
      const bool bias = role.size() > 5 && role.substr(role.size() - 5) == ".bias";
      return Cat("blk.", k.layer, ".", role, bias ? "" : ".weight");
    }
  }
}

std::string GgufTensorName(const ModelSpec& spec, const WeightKey& k) {
  // llama.cpp's glm4moe and gpt-oss name the FFN's norm after the attention "post_attention_norm".
  if (k.role == Role::kFfnNorm && (spec.arch == Arch::kGlm4Moe || spec.arch == Arch::kGptOss)) {
    return Cat("blk.", k.layer, ".post_attention_norm.weight");
  }
  return GgufTensorName(k);
}

std::string HfTensorName(const ModelSpec& spec, const WeightKey& k) {
  switch (k.role) {
    case Role::kTokenEmbd: return "model.embed_tokens.weight";
    case Role::kOutputNorm: return "model.norm.weight";
    case Role::kOutput: return "lm_head.weight";
    default: return HfLayerName(spec, k);
  }
}

ModelSourceKind SourceKind(const std::string& path) {
  if (std::string_view(path).substr(0, kSynthPrefix.size()) == kSynthPrefix) return ModelSourceKind::kSynth;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return ModelSourceKind::kHfDir;
  return ModelSourceKind::kGguf;
}

absl::StatusOr<std::unique_ptr<LoadedModel>> LoadModel(const std::string& path,
                                                       const std::function<void(size_t, size_t)>& progress) {
  switch (SourceKind(path)) {
    case ModelSourceKind::kSynth: {
      ASSIGN_OR_RETURN(SynthPath sp, ParseSynthPath(path));
      ASSIGN_OR_RETURN(ModelSpec spec, SynthSpec(sp.preset));
      absl::StatusOr<std::unique_ptr<LoadedModel>> model = SynthWeights(spec, sp.type, sp.seed, 0, progress);
      if (absl::IsResourceExhausted(model.status())) {  // the weight type is part of the model path
        return absl::ResourceExhaustedError(
            Cat(model.status().message(),
                "; pick a smaller preset or a smaller weight type in the model path, e.g. synth:", sp.preset,
                ":q4_0"));
      }
      if (!model.ok()) return model.status();
      (*model)->source = path;
      return model;
    }
    case ModelSourceKind::kHfDir:
      return LoadHfDir(path);
    case ModelSourceKind::kGguf:
      return LoadGguf(path);
  }
  return InvalidArgument("model path '", path, "': unrecognised");
}

absl::StatusOr<ModelSpec> LoadModelSpec(const std::string& path) {
  switch (SourceKind(path)) {
    case ModelSourceKind::kSynth: {
      ASSIGN_OR_RETURN(SynthPath sp, ParseSynthPath(path));
      return SynthSpec(sp.preset);
    }
    case ModelSourceKind::kHfDir:
      return ModelSpecFromHfConfig(path);
    case ModelSourceKind::kGguf: {
      ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
      ASSIGN_OR_RETURN(ModelSpec spec, ModelSpecFromGguf(*file));
      if (spec.name.empty()) spec.name = std::filesystem::path(path).stem().string();
      return spec;
    }
  }
  return InvalidArgument("model path '", path, "': unrecognised");
}

}  // namespace specgen
