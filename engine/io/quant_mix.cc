#include "engine/io/quant_mix.h"

#include "absl/strings/ascii.h"
#include "engine/core/quant.h"
#include "engine/core/status_macros.h"

namespace specgen {
namespace {

// llama_ftype values (llama.h).
constexpr int kFtypeF32 = 0, kFtypeF16 = 1, kFtypeQ4_0 = 2, kFtypeQ8_0 = 7, kFtypeQ4_K_M = 15,
              kFtypeQ5_K_M = 17, kFtypeQ6_K = 18, kFtypeBF16 = 32;

const ExportType kTypes[] = {
    {"f32", DType::kF32, QuantMix::kPure, kFtypeF32},
    {"f16", DType::kF16, QuantMix::kPure, kFtypeF16},
    {"bf16", DType::kBF16, QuantMix::kPure, kFtypeBF16},
    {"q8_0", DType::kQ8_0, QuantMix::kQ8_0, kFtypeQ8_0},
    {"q6_k", DType::kQ6_K, QuantMix::kQ6_K, kFtypeQ6_K},
    {"q5_k_m", DType::kQ5_K, QuantMix::kQ5_K_M, kFtypeQ5_K_M},
    {"q4_k_m", DType::kQ4_K, QuantMix::kQ4_K_M, kFtypeQ4_K_M},
    // Every matrix in the one type: no llama.cpp file type is this (its Q4_0 puts the head in Q6_K).
    {"q4_k", DType::kQ4_K, QuantMix::kPure, -1},
    {"q4_0", DType::kQ4_0, QuantMix::kPure, -1},
};

bool Divides(DType t, int64_t row_len) { return row_len % Info(t).block_elems == 0; }

// tensor_type_fallback: the 32-element type of the same family, else f16.
DType Fallback(DType t, int64_t row_len) {
  if (Divides(t, row_len)) return t;
  DType f = DType::kF16;
  switch (t) {
    case DType::kQ4_K: f = DType::kQ5_0; break;
    case DType::kQ5_K: f = DType::kQ5_1; break;
    case DType::kQ6_K: f = DType::kQ8_0; break;
    default: break;
  }
  return Divides(f, row_len) ? f : DType::kF16;
}

// llama_tensor_get_type_impl for the mixes above (no importance matrix, no overrides).
DType MixRule(const ExportType& type, const ModelSpec& spec, const WeightKey& key, int64_t row_len) {
  const DType base = type.base;
  const bool tied_head = key.role == Role::kTokenEmbd && spec.tied_embeddings;
  if (key.role == Role::kOutput || tied_head) {
    if (!Divides(base, row_len)) return DType::kQ8_0;
    return base == DType::kQ8_0 ? DType::kQ8_0 : DType::kQ6_K;
  }
  const bool m_mix = type.mix == QuantMix::kQ4_K_M || type.mix == QuantMix::kQ5_K_M;
  const bool eight_experts = spec.n_experts == 8;
  switch (key.role) {
    case Role::kAttnV: {
      DType t = base;
      if (m_mix && UseMoreBits(key.layer, spec.n_layers)) t = DType::kQ6_K;
      if (eight_experts) t = DType::kQ8_0;
      return t;
    }
    case Role::kAttnK:
      return eight_experts ? DType::kQ8_0 : base;
    case Role::kFfnDown:
    case Role::kExpertDown:
      return m_mix && UseMoreBits(key.layer, spec.n_layers) ? DType::kQ6_K : base;
    case Role::kAttnOut:
      return eight_experts && type.mix == QuantMix::kQ4_K_M ? DType::kQ5_K : base;
    default:
      return base;
  }
}

}  // namespace

absl::StatusOr<ExportType> ParseExportType(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(AsAbsl(name));
  for (const ExportType& t : kTypes) {
    if (t.name == lower) return t;
  }
  return InvalidArgument("--type ", name, ": not a type specgen writes (use ", kExportTypes, ")");
}

absl::StatusOr<ExportType> ExportTypeOf(DType dtype) {
  for (const ExportType& t : kTypes) {
    if (t.base == dtype && (t.mix == QuantMix::kPure || t.name == Name(dtype))) return t;
  }
  if (!CanQuantize(dtype)) {
    return InvalidArgument("--type ", Name(dtype), ": cannot write this type (use ", kExportTypes, ")");
  }
  return ExportType{std::string(Name(dtype)), dtype, QuantMix::kPure, -1};
}

bool UseMoreBits(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

TensorTypeChoice ChooseTensorType(const ExportType& type, const ModelSpec& spec, const WeightKey& key,
                                  int64_t row_len) {
  if (IsNormRole(key.role) || IsVectorRole(key.role) || key.role == Role::kRouter ||
      key.role == Role::kSharedGateInp) {
    return {DType::kF32, false, DType::kF32};
  }
  if (type.mix == QuantMix::kPure) {  // one type throughout; rows it cannot hold in f16
    const DType t = Divides(type.base, row_len) ? type.base : DType::kF16;
    return {t, t != type.base, type.base};
  }
  const DType wanted = MixRule(type, spec, key, row_len);
  const DType t = Fallback(wanted, row_len);
  return {t, t != wanted, wanted};
}

}  // namespace specgen
