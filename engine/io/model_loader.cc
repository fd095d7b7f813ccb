#include "engine/io/model_loader.h"

#include <filesystem>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
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

bool IsExpertRole(Role r) {
  return r == Role::kExpertGate || r == Role::kExpertUp || r == Role::kExpertDown;
}

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
    const std::string name = GgufTensorName(e.key);
    const GgufTensorInfo* t = file->FindTensor(name);
    if (t == nullptr) {
      return NotFound(path, ": missing tensor ", name, " (", KeyString(e.key), ")");
    }
    std::vector<int64_t> shape(t->ne.rbegin(), t->ne.rend());  // ne[0] fastest ⇒ last row-major dim
    if (!IsExpertRole(e.key.role)) {
      model->weights.Add(e.key, MakeView(t->dtype, shape, file->TensorData(*t), t->bytes), name);
      continue;
    }
    // Stacked experts: ne = [in, out, E]; expert e is the contiguous slab e of nb[2] bytes.
    if (shape.size() != 3 || shape[0] != spec.n_experts) {
      return InvalidArgument(path, ": tensor ", name, " has ne ", ShapeText(t->ne), ", expected ",
                             spec.n_experts, " stacked experts as ne[2]");
    }
    const size_t per_expert = t->bytes / static_cast<size_t>(spec.n_experts);
    const uint8_t* base = file->TensorData(*t) + per_expert * static_cast<size_t>(e.key.expert);
    model->weights.Add(e.key, MakeView(t->dtype, {shape[1], shape[2]}, base, per_expert),
                       Cat(name, "[", e.key.expert, "]"));
  }
  RETURN_IF_ERROR(model->weights.Validate(spec, path));
  std::vector<std::string> names;
  for (const GgufTensorInfo& t : file->tensors()) names.push_back(t.name);
  RETURN_IF_ERROR(CheckNoLayersBeyond(names, "blk.", spec, path,
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
    case Role::kRouter: return p + moe + "gate.weight";
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

absl::StatusOr<std::unique_ptr<LoadedModel>> LoadHfDir(const std::string& dir) {
  ASSIGN_OR_RETURN(ModelSpec spec, ModelSpecFromHfConfig(dir));
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsSet> set, SafetensorsSet::Open(dir));
  auto model = std::make_unique<LoadedModel>();
  model->spec = spec;
  model->source = dir;
  for (const ExpectedTensor& e : ExpectedTensors(spec)) {
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
  RETURN_IF_ERROR(CheckNoLayersBeyond(names, "model.layers.", spec, dir,
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
    default: return Cat("blk.", k.layer, ".", RoleName(k.role), ".weight");
  }
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
