#include "engine/io/weight_set.h"

#include "engine/core/status_macros.h"

namespace specgen {

bool IsNormRole(Role r) {
  return r == Role::kOutputNorm || r == Role::kAttnNorm || r == Role::kAttnQNorm || r == Role::kAttnKNorm ||
         r == Role::kFfnNorm;
}

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kTokenEmbd: return "token_embd";
    case Role::kOutputNorm: return "output_norm";
    case Role::kOutput: return "output";
    case Role::kAttnNorm: return "attn_norm";
    case Role::kAttnQ: return "attn_q";
    case Role::kAttnK: return "attn_k";
    case Role::kAttnV: return "attn_v";
    case Role::kAttnOut: return "attn_output";
    case Role::kAttnQNorm: return "attn_q_norm";
    case Role::kAttnKNorm: return "attn_k_norm";
    case Role::kFfnNorm: return "ffn_norm";
    case Role::kFfnGate: return "ffn_gate";
    case Role::kFfnUp: return "ffn_up";
    case Role::kFfnDown: return "ffn_down";
    case Role::kRouter: return "ffn_gate_inp";
    case Role::kExpertGate: return "gate";
    case Role::kExpertUp: return "up";
    case Role::kExpertDown: return "down";
    case Role::kAttnQBias: return "attn_q.bias";
    case Role::kAttnKBias: return "attn_k.bias";
    case Role::kAttnVBias: return "attn_v.bias";
    case Role::kAttnOutBias: return "attn_output.bias";
    case Role::kAttnSinks: return "attn_sinks";
    case Role::kRouterBias: return "ffn_gate_inp.bias";
    case Role::kExpertSelBias: return "exp_probs_b.bias";
    case Role::kExpertGateBias: return "gate.bias";
    case Role::kExpertUpBias: return "up.bias";
    case Role::kExpertDownBias: return "down.bias";
    case Role::kSharedGate: return "ffn_gate_shexp";
    case Role::kSharedUp: return "ffn_up_shexp";
    case Role::kSharedDown: return "ffn_down_shexp";
    case Role::kSharedGateInp: return "ffn_gate_inp_shexp";
  }
  return "unknown";
}

bool IsVectorRole(Role r) {
  switch (r) {
    case Role::kAttnQBias:
    case Role::kAttnKBias:
    case Role::kAttnVBias:
    case Role::kAttnOutBias:
    case Role::kAttnSinks:
    case Role::kRouterBias:
    case Role::kExpertSelBias:
    case Role::kExpertGateBias:
    case Role::kExpertUpBias:
    case Role::kExpertDownBias: return true;
    default: return false;
  }
}

bool IsPerExpertRole(Role r) {
  switch (r) {
    case Role::kExpertGate:
    case Role::kExpertUp:
    case Role::kExpertDown:
    case Role::kExpertGateBias:
    case Role::kExpertUpBias:
    case Role::kExpertDownBias: return true;
    default: return false;
  }
}

std::string KeyString(const WeightKey& k) {
  if (k.layer < 0) return std::string(RoleName(k.role));
  if (k.expert >= 0) return Cat("blk.", k.layer, ".expert.", k.expert, ".", RoleName(k.role));
  return Cat("blk.", k.layer, ".", RoleName(k.role));
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelSpec& s) {
  const int64_t D = s.hidden, V = s.vocab_size, d = s.head_dim;
  std::vector<ExpectedTensor> out;
  out.push_back({{Role::kTokenEmbd}, {V, D}});
  out.push_back({{Role::kOutputNorm}, {D}});
  if (!s.tied_embeddings) out.push_back({{Role::kOutput}, {V, D}});
  for (int l = 0; l < static_cast<int>(s.n_layers); ++l) {
    auto add = [&](Role r, std::vector<int64_t> shape) { out.push_back({{r, l}, std::move(shape)}); };
    add(Role::kAttnNorm, {D});
    add(Role::kAttnQ, {s.q_dim(), D});
    add(Role::kAttnK, {s.kv_dim(), D});
    add(Role::kAttnV, {s.kv_dim(), D});
    add(Role::kAttnOut, {D, s.q_dim()});
    if (s.attn_qkv_bias) {
      add(Role::kAttnQBias, {s.q_dim()});
      add(Role::kAttnKBias, {s.kv_dim()});
      add(Role::kAttnVBias, {s.kv_dim()});
    }
    if (s.attn_out_bias) add(Role::kAttnOutBias, {D});
    if (s.attn_sinks) add(Role::kAttnSinks, {s.n_heads});
    if (s.qk_norm) {
      add(Role::kAttnQNorm, {d});
      add(Role::kAttnKNorm, {d});
    }
    add(Role::kFfnNorm, {D});
    const bool moe = s.is_moe() && l < static_cast<int>(s.layer_is_moe.size()) && s.layer_is_moe[l];
    if (moe) {
      add(Role::kRouter, {s.n_experts, D});
      if (s.router_bias) add(Role::kRouterBias, {s.n_experts});
      if (s.expert_selection_bias) add(Role::kExpertSelBias, {s.n_experts});
      const int64_t F = s.expert_ffn_dim;
      for (int e = 0; e < static_cast<int>(s.n_experts); ++e) {
        out.push_back({{Role::kExpertGate, l, e}, {F, D}});
        out.push_back({{Role::kExpertUp, l, e}, {F, D}});
        out.push_back({{Role::kExpertDown, l, e}, {D, F}});
        if (s.expert_bias) {
          out.push_back({{Role::kExpertGateBias, l, e}, {F}});
          out.push_back({{Role::kExpertUpBias, l, e}, {F}});
          out.push_back({{Role::kExpertDownBias, l, e}, {D}});
        }
      }
      if (s.shared_expert_ffn_dim > 0) {
        const int64_t Fs = s.shared_expert_ffn_dim;
        add(Role::kSharedGate, {Fs, D});
        add(Role::kSharedUp, {Fs, D});
        add(Role::kSharedDown, {D, Fs});
        if (s.shared_expert_gate) add(Role::kSharedGateInp, {1, D});
      }
    } else {
      add(Role::kFfnGate, {s.ffn_dim, D});
      add(Role::kFfnUp, {s.ffn_dim, D});
      add(Role::kFfnDown, {D, s.ffn_dim});
    }
  }
  return out;
}

void WeightSet::Add(const WeightKey& key, const TensorView& view, std::string source_name) {
  tensors_[key] = view;
  names_[key] = std::move(source_name);
}

absl::StatusOr<TensorView> WeightSet::Get(const WeightKey& key) const {
  auto it = tensors_.find(key);
  if (it == tensors_.end()) return NotFound("no tensor ", KeyString(key), " in the weight set");
  return it->second;
}

std::string_view WeightSet::SourceName(const WeightKey& key) const {
  auto it = names_.find(key);
  return it == names_.end() ? std::string_view() : std::string_view(it->second);
}

namespace {
std::string ShapeOf(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += Cat(i ? ", " : "", shape[i]);
  return s + "]";
}
}  // namespace

absl::Status WeightSet::Validate(const ModelSpec& spec, std::string_view source) const {
  for (const ExpectedTensor& e : ExpectedTensors(spec)) {
    auto it = tensors_.find(e.key);
    if (it == tensors_.end()) {
      return NotFound(source, ": missing tensor ", KeyString(e.key), " (expected shape ",
                      ShapeOf(e.shape), ")");
    }
    const TensorView& v = it->second;
    std::string_view file_name = SourceName(e.key);
    const std::string name = file_name.empty() ? KeyString(e.key) : std::string(file_name);
    bool same = v.ndim == static_cast<int>(e.shape.size());
    for (int i = 0; same && i < v.ndim; ++i) same = v.shape[i] == e.shape[i];
    if (!same) {
      return InvalidArgument(source, ": tensor ", name, " (", KeyString(e.key), ") has shape ",
                             ShapeString(v), ", expected ", ShapeOf(e.shape));
    }
    absl::StatusOr<size_t> bytes = TensorBytes(v.dtype, v.cols(), v.rows());
    if (!bytes.ok()) {
      return InvalidArgument(source, ": tensor ", name, ": ", bytes.status().message());
    }
    if (*bytes != v.bytes || v.data == nullptr) {
      return InvalidArgument(source, ": tensor ", name, " holds ", v.bytes, " bytes, expected ",
                             *bytes, " for ", Name(v.dtype), " ", ShapeString(v));
    }
  }
  return absl::OkStatus();
}

}  // namespace specgen
