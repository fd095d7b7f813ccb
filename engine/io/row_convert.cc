#include "engine/io/row_convert.h"

#include <cstring>

#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "engine/core/status_macros.h"

namespace specgen {

absl::Status RowToF32(DType src_type, const void* src, int64_t n, float* dst) {
  switch (src_type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return absl::OkStatus();
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(h[i]);
      return absl::OkStatus();
    }
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(h[i]);
      return absl::OkStatus();
    }
    default:
      return DequantizeRow(src_type, src, n, dst);
  }
}

absl::Status RowFromF32(DType dst_type, const float* src, int64_t n, void* dst) {
  switch (dst_type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return absl::OkStatus();
    case DType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = F32ToF16(src[i]);
      return absl::OkStatus();
    }
    case DType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = F32ToBf16(src[i]);
      return absl::OkStatus();
    }
    default:
      return QuantizeRow(dst_type, src, n, dst);
  }
}

DType StorageDType(Role role, int64_t row_len, DType requested, bool* fell_back) {
  if (fell_back) *fell_back = false;
  if (IsNormRole(role) || role == Role::kRouter) return DType::kF32;
  if (row_len % Info(requested).block_elems != 0) {
    if (fell_back) *fell_back = true;
    return DType::kF16;
  }
  return requested;
}

}  // namespace specgen
