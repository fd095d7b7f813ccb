#include "engine/io/row_convert.h"

#include "engine/core/quant.h"
#include "engine/core/status_macros.h"

namespace specgen {

absl::Status RowToF32(DType src_type, const void* src, int64_t n, float* dst) {
  return DequantizeRow(src_type, src, n, dst);
}

absl::Status RowFromF32(DType dst_type, const float* src, int64_t n, void* dst) {
  return QuantizeRow(dst_type, src, n, dst);
}

DType StorageDType(Role role, int64_t row_len, DType requested, bool* fell_back) {
  if (fell_back) *fell_back = false;
  if (IsNormRole(role) || IsVectorRole(role) || role == Role::kRouter) return DType::kF32;
  if (row_len % Info(requested).block_elems != 0) {
    if (fell_back) *fell_back = true;
    return DType::kF16;
  }
  return requested;
}

}  // namespace specgen
