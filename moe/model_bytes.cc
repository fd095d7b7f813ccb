#include "moe/model_bytes.h"

#include <algorithm>
#include <set>

#include "engine/core/status_macros.h"
#include "moe/expert_layout.h"
#include "engine/io/model_loader.h"
#include "engine/io/row_convert.h"
#include "engine/io/synth.h"

namespace specgen::moe {
namespace {

bool IsExpert(Role r) { return IsPerExpertRole(r); }
bool IsShared(Role r) {
  return r == Role::kSharedGate || r == Role::kSharedUp || r == Role::kSharedDown || r == Role::kSharedGateInp;
}

// Row length (the fastest dimension) and row count of a row-major shape of 1 or 2 dimensions.
std::pair<int64_t, int64_t> RowsOf(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {0, 0};
  if (shape.size() == 1) return {shape[0], 1};
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return {shape.back(), rows};
}

}  // namespace

DType DeviceDType(DType stored) {
  switch (stored) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4_0:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kMXFP4:
      return stored;
    default:
      return DType::kBF16;
  }
}

int64_t ModelBytes::n_moe_layers() const {
  return std::count_if(layers.begin(), layers.end(), [](const LayerBytes& l) { return l.moe; });
}

size_t ModelBytes::experts_total() const {
  size_t sum = 0;
  for (const LayerBytes& l : layers) sum += l.expert * static_cast<size_t>(l.moe ? spec.n_experts : 0);
  return sum;
}

size_t ModelBytes::largest_expert() const {
  size_t most = 0;
  for (const LayerBytes& l : layers) most = std::max(most, l.moe ? l.expert : 0);
  return most;
}

size_t ModelBytes::slot_bytes() const {
  size_t most = 0;
  for (const LayerBytes& l : layers) most = std::max(most, l.moe ? l.expert_slot : 0);
  return most;
}

size_t ModelBytes::device_total() const {
  size_t sum = embedding + head + experts_total();
  for (const LayerBytes& l : layers) {
    sum += l.norms + l.attention + l.router + l.dense_ffn + l.shared_experts + l.expert_biases;
  }
  return sum;
}

absl::StatusOr<ModelBytes> SumModelBytes(const ModelSpec& spec, const std::vector<TensorEntry>& tensors,
                                         std::string source) {
  ModelBytes out;
  out.spec = spec;
  out.source = std::move(source);
  out.layers.resize(static_cast<size_t>(spec.n_layers));
  std::set<Role> bias_roles_seen;
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    out.layers[l].moe = spec.is_moe() && l < static_cast<int64_t>(spec.layer_is_moe.size()) &&
                        spec.layer_is_moe[l];
  }
  for (const TensorEntry& t : tensors) {
    const auto [row, rows] = RowsOf(t.shape);
    absl::StatusOr<size_t> stored = TensorBytes(t.stored, row, rows);
    absl::StatusOr<size_t> device = TensorBytes(DeviceDType(t.stored), row, rows);
    if (!stored.ok() || !device.ok()) {
      return InvalidArgument(out.source, ": tensor ", KeyString(t.key), ": ",
                             (stored.ok() ? device : stored).status().message());
    }
    out.stored_total += *stored;
    if (t.key.layer < 0) {
      (t.key.role == Role::kTokenEmbd ? out.embedding : out.head) += *device;
      continue;
    }
    if (t.key.layer >= spec.n_layers) {
      return InvalidArgument(out.source, ": tensor ", KeyString(t.key), " is past the model's ",
                             spec.n_layers, " layers");
    }
    LayerBytes& layer = out.layers[t.key.layer];
    if (IsNormRole(t.key.role)) {
      layer.norms += *device;
    } else if (IsExpert(t.key.role) && IsVectorRole(t.key.role)) {  // an expert's bias: every one counts
      layer.expert_biases += *device;
      bias_roles_seen.insert(t.key.role);
    } else if (IsExpert(t.key.role)) {
      // Every expert of a layer has the same shape and dtype per role: count expert 0 only.
      if (t.key.expert == 0) {
        layer.expert += *device;
        layer.expert_slot += (*device + ExpertLayout::kAlignment - 1) / ExpertLayout::kAlignment * ExpertLayout::kAlignment;
      }
    } else if (t.key.role == Role::kRouter || t.key.role == Role::kRouterBias || t.key.role == Role::kExpertSelBias) {
      layer.router += *device;
    } else if (IsShared(t.key.role)) {
      layer.shared_experts += *device;
    } else if (t.key.role == Role::kFfnGate || t.key.role == Role::kFfnUp || t.key.role == Role::kFfnDown) {
      layer.dense_ffn += *device;
    } else {
      layer.attention += *device;
    }
  }
  out.expert_bias_roles = static_cast<int>(bias_roles_seen.size());
  return out;
}

absl::StatusOr<ModelBytes> ReadModelBytes(const std::string& path) {
  std::vector<TensorEntry> entries;
  ModelSpec spec;
  if (SourceKind(path) == ModelSourceKind::kSynth) {
    ASSIGN_OR_RETURN(const SynthPath sp, ParseSynthPath(path));
    ASSIGN_OR_RETURN(spec, SynthSpec(sp.preset));
    for (const ExpectedTensor& e : ExpectedTensors(spec)) {
      entries.push_back({e.key, SynthTensorType(sp.type, spec, e.key, e.shape.back()), e.shape});
    }
    return SumModelBytes(spec, entries, path);
  }
  // Files are memory-mapped and their headers parsed; no weight byte is read.
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> model, LoadModel(path));
  for (const auto& [key, v] : model->weights.tensors()) {
    entries.push_back({key, v.dtype, std::vector<int64_t>(v.shape.begin(), v.shape.begin() + v.ndim)});
  }
  return SumModelBytes(model->spec, entries, path);
}

}  // namespace specgen::moe
