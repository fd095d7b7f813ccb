// Element types of weights and activations: the plain floats and the GGUF block-quantized types, with
// their block geometry so that the byte size of any tensor is exact (docs/design.md §5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace specgen {

// Values are the ggml_type ids written in GGUF tensor infos.
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
  kMXFP4 = 39,
};

// Everything code needs to know about one DType, in one table (dtype.cc): a new type is one row there
// (and its converters in quant.cc), not a case in every switch.
struct DTypeInfo {
  std::string_view name;     // "f32", "q4_k", … (lower case, as on the command line)
  int64_t block_elems;       // elements per block (1 for plain floats)
  int64_t block_bytes;       // bytes per block
  bool quantized;
  // A row of n elements (a whole number of blocks; checked by DequantizeRow / QuantizeRow, quant.h):
  // src → n floats, and n floats → dst. to_f32 is set for every supported type; from_f32 is null
  // for the types nothing quantizes to.
  void (*to_f32)(const uint8_t* src, int64_t n, float* dst);
  void (*from_f32)(const float* src, int64_t n, uint8_t* dst);
};

// The table row of a supported dtype (block_bytes 0 and no converters for any other value).
const DTypeInfo& Info(DType t);
// Every supported dtype, in the table's order.
std::span<const DType> AllDTypes();
inline std::string_view Name(DType t) { return Info(t).name; }

// The DType of a GGUF ggml_type id, or nullopt for ids we do not support.
std::optional<DType> DTypeFromGgmlId(uint32_t id);
// ggml's own name of any ggml_type id, supported or not ("Q4_K", "IQ4_XS", "MXFP4"), or "" for an id
// ggml does not define: error messages name the type a file holds rather than its number.
std::string_view GgmlTypeName(uint32_t id);
// The supported types by their ggml names, comma-separated ("F32, F16, …"), for error messages.
std::string SupportedGgmlTypeNames();
// Parses "f32", "F16", "bf16", "q8_0", "Q4_K", … (case-insensitive).
absl::StatusOr<DType> ParseDType(std::string_view s);

// Bytes of a row of n elements; error if n is not a multiple of the block size or overflows.
absl::StatusOr<size_t> RowBytes(DType t, int64_t n);
// Bytes of a tensor whose fastest dimension is `row` and that has `rows` rows (both >= 0), checked for
// block divisibility and overflow.
absl::StatusOr<size_t> TensorBytes(DType t, int64_t row, int64_t rows);

}  // namespace specgen
