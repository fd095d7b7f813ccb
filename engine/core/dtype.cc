#include "engine/core/dtype.h"

#include <array>
#include <limits>

#include "absl/strings/ascii.h"
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
constexpr std::array<Entry, 8> kTable = {{
    {DType::kF32, {"f32", 1, 4, false, q::DequantizeF32, q::QuantizeF32}},
    {DType::kF16, {"f16", 1, 2, false, q::DequantizeF16, q::QuantizeF16}},
    {DType::kBF16, {"bf16", 1, 2, false, q::DequantizeBf16, q::QuantizeBf16}},
    {DType::kQ8_0, {"q8_0", q::kQk, q::kQ8_0Bytes, true, q::DequantizeQ8_0, q::QuantizeQ8_0}},
    {DType::kQ4_0, {"q4_0", q::kQk, q::kQ4_0Bytes, true, q::DequantizeQ4_0, q::QuantizeQ4_0}},
    {DType::kQ4_K, {"q4_k", q::kQkK, q::kQ4_KBytes, true, q::DequantizeQ4_K, q::QuantizeQ4_K}},
    {DType::kQ5_K, {"q5_k", q::kQkK, q::kQ5_KBytes, true, q::DequantizeQ5_K, nullptr}},
    {DType::kQ6_K, {"q6_k", q::kQkK, q::kQ6_KBytes, true, q::DequantizeQ6_K, nullptr}},
}};

constexpr std::array<DType, kTable.size()> AllOf() {
  std::array<DType, kTable.size()> all{};
  for (size_t i = 0; i < kTable.size(); ++i) all[i] = kTable[i].type;
  return all;
}
constexpr std::array<DType, kTable.size()> kAll = AllOf();

}  // namespace

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
