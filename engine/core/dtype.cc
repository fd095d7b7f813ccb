#include "engine/core/dtype.h"

#include <array>
#include <limits>

#include "absl/strings/ascii.h"
#include "engine/core/quant_extra_rows.h"
#include "engine/core/quant_k_ref.h"
#include "engine/core/quant_rows.h"
#include "engine/core/str_cat.h"

namespace specgen {
namespace {

struct Entry {
  DType type;
  DTypeInfo info;
};

namespace q = quant_rows;

// Block sizes and bytes from ggml-common.h (docs/formats.md §2).
constexpr std::array<Entry, 14> kTable = {{
    {DType::kF32, {"f32", 1, 4, false, q::DequantizeF32, q::QuantizeF32}},
    {DType::kF16, {"f16", 1, 2, false, q::DequantizeF16, q::QuantizeF16}},
    {DType::kBF16, {"bf16", 1, 2, false, q::DequantizeBf16, q::QuantizeBf16}},
    {DType::kQ8_0, {"q8_0", q::kQk, q::kQ8_0Bytes, true, q::DequantizeQ8_0, q::QuantizeQ8_0}},
    {DType::kQ4_0, {"q4_0", q::kQk, q::kQ4_0Bytes, true, q::DequantizeQ4_0, q::QuantizeQ4_0}},
    {DType::kQ4_1, {"q4_1", q::kQk, q::kQ4_1Bytes, true, q::DequantizeQ4_1, nullptr}},
    {DType::kQ5_0, {"q5_0", q::kQk, q::kQ5_0Bytes, true, q::DequantizeQ5_0, q::QuantizeQ5_0}},
    {DType::kQ5_1, {"q5_1", q::kQk, q::kQ5_1Bytes, true, q::DequantizeQ5_1, q::QuantizeQ5_1}},
    {DType::kQ2_K, {"q2_k", q::kQkK, q::kQ2_KBytes, true, q::DequantizeQ2_K, nullptr}},
    {DType::kQ3_K, {"q3_k", q::kQkK, q::kQ3_KBytes, true, q::DequantizeQ3_K, nullptr}},
    {DType::kQ4_K, {"q4_k", q::kQkK, q::kQ4_KBytes, true, q::DequantizeQ4_K, q::QuantizeQ4_K}},
    {DType::kQ5_K, {"q5_k", q::kQkK, q::kQ5_KBytes, true, q::DequantizeQ5_K, q::QuantizeQ5_K}},
    {DType::kQ6_K, {"q6_k", q::kQkK, q::kQ6_KBytes, true, q::DequantizeQ6_K, q::QuantizeQ6_K}},
    {DType::kMXFP4, {"mxfp4", q::kQk, q::kMxfp4Bytes, true, q::DequantizeMxfp4, q::QuantizeMxfp4}},
}};

constexpr std::array<DType, kTable.size()> AllOf() {
  std::array<DType, kTable.size()> all{};
  for (size_t i = 0; i < kTable.size(); ++i) all[i] = kTable[i].type;
  return all;
}
constexpr std::array<DType, kTable.size()> kAll = AllOf();

// ggml_type names by id (ggml.h `enum ggml_type`, ggml.c type_traits): the ids no longer produced keep
// the names ggml gave them.
constexpr std::array<std::string_view, 43> kGgmlNames = {
    "F32",      "F16",      "Q4_0",     "Q4_1",    "Q4_2",     "Q4_3",       "Q5_0",       "Q5_1",
    "Q8_0",     "Q8_1",     "Q2_K",     "Q3_K",    "Q4_K",     "Q5_K",       "Q6_K",       "Q8_K",
    "IQ2_XXS",  "IQ2_XS",   "IQ3_XXS",  "IQ1_S",   "IQ4_NL",   "IQ3_S",      "IQ2_S",      "IQ4_XS",
    "I8",       "I16",      "I32",      "I64",     "F64",      "IQ1_M",      "BF16",       "Q4_0_4_4",
    "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",    "TQ2_0",   "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",
    "NVFP4",    "Q1_0",     "Q2_0",
};

}  // namespace

std::string_view GgmlTypeName(uint32_t id) { return id < kGgmlNames.size() ? kGgmlNames[id] : ""; }

std::string SupportedGgmlTypeNames() {
  std::string names;
  for (const Entry& e : kTable) {
    names += Cat(names.empty() ? "" : ", ", GgmlTypeName(static_cast<uint32_t>(e.type)));
  }
  return names;
}

const DTypeInfo& Info(DType t) {
  for (const Entry& e : kTable) {
    if (e.type == t) return e.info;
  }
  static const DTypeInfo kUnknown{"unknown", 1, 0, false, nullptr, nullptr};
  return kUnknown;  // unreachable for values made by DTypeFromGgmlId / ParseDType
}

std::span<const DType> AllDTypes() { return kAll; }

std::optional<DType> DTypeFromGgmlId(uint32_t id) {
  for (const Entry& e : kTable) {
    if (static_cast<uint32_t>(e.type) == id) return e.type;
  }
  return std::nullopt;
}

absl::StatusOr<DType> ParseDType(std::string_view s) {
  const std::string lower = absl::AsciiStrToLower(AsAbsl(s));
  for (const Entry& e : kTable) {
    if (e.info.name == lower) return e.type;
  }
  std::string names;
  for (const Entry& e : kTable) names += Cat(names.empty() ? "" : ", ", e.info.name);
  return absl::InvalidArgumentError(Cat("unknown dtype '", s, "' (expected one of ", names, ")"));
}

absl::StatusOr<size_t> RowBytes(DType t, int64_t n) {
  const DTypeInfo& info = Info(t);
  if (n < 0) return absl::InvalidArgumentError(Cat("negative row length ", n));
  if (n % info.block_elems != 0) {
    return absl::InvalidArgumentError(Cat("row of ", n, " elements is not a multiple of the ",
                                                   info.name, " block size ", info.block_elems));
  }
  const uint64_t blocks = static_cast<uint64_t>(n / info.block_elems);
  if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(info.block_bytes)) {
    return absl::InvalidArgumentError(Cat("row of ", n, " elements overflows size_t"));
  }
  return static_cast<size_t>(blocks * info.block_bytes);
}

absl::StatusOr<size_t> TensorBytes(DType t, int64_t row, int64_t rows) {
  absl::StatusOr<size_t> rb = RowBytes(t, row);
  if (!rb.ok()) return rb.status();
  if (rows < 0) return absl::InvalidArgumentError(Cat("negative row count ", rows));
  if (rows != 0 && *rb > std::numeric_limits<size_t>::max() / static_cast<uint64_t>(rows)) {
    return absl::InvalidArgumentError(Cat("tensor of ", rows, " rows of ", row,
                                                   " elements overflows size_t"));
  }
  return *rb * static_cast<size_t>(rows);
}

}  // namespace specgen
