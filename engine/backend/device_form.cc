#include "engine/backend/device_form.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/backend/op_checks.h"
#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "engine/core/status_macros.h"

namespace specgen {

std::optional<kernels::ElemType> PackedDeviceType(DType t) {
  switch (t) {
    case DType::kQ8_0: return kernels::ElemType::kQ8_0;
    case DType::kQ4_0: return kernels::ElemType::kQ4_0;
    case DType::kQ4_K: return kernels::ElemType::kQ4_K;
    case DType::kQ5_K: return kernels::ElemType::kQ5_K;
    case DType::kQ6_K: return kernels::ElemType::kQ6_K;
    case DType::kMXFP4: return kernels::ElemType::kMXFP4;
    default: return std::nullopt;
  }
}

absl::StatusOr<DeviceForm> DeviceFormOf(const TensorView& t, std::string_view name) {
  if (t.location == Location::kDevice) return InvalidArgument("tensor ", name, ": a device-resident view");
  ASSIGN_OR_RETURN(const UploadShape shape, CheckUpload(t, name));
  DeviceForm f;
  f.rows = shape.rows;
  f.cols = shape.cols;
  const std::optional<kernels::ElemType> packed = t.ndim == 2 ? PackedDeviceType(t.dtype) : std::nullopt;
  if (packed) {
    f.type = *packed;
    f.bytes = shape.bytes;
    return f;
  }
  f.type = t.dtype == DType::kF32   ? kernels::ElemType::kF32
           : t.dtype == DType::kF16 ? kernels::ElemType::kF16
                                    : kernels::ElemType::kBF16;
  f.bytes = static_cast<size_t>(f.rows * f.cols) * kernels::ElemBytes(f.type);
  return f;
}

absl::Status WriteDeviceForm(const TensorView& t, std::string_view name, void* dst) {
  ASSIGN_OR_RETURN(const DeviceForm f, DeviceFormOf(t, name));
  const DTypeInfo& info = Info(t.dtype);
  if (kernels::IsPacked(f.type) || (!info.quantized && info.to_f32 != nullptr)) {  // the bytes as stored
    std::memcpy(dst, t.data, f.bytes);
    return absl::OkStatus();
  }
  // Quantized: dequantized to bf16 a few rows at a time (DequantizeRows names an unknown type).
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, f.cols));
  ASSIGN_OR_RETURN(const size_t row_bytes, TensorBytes(t.dtype, f.cols, 1));
  std::vector<float> f32(static_cast<size_t>(chunk * f.cols));
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t r0 = 0; r0 < f.rows; r0 += chunk) {
    const int64_t m = std::min(chunk, f.rows - r0);
    const absl::Status s = DequantizeRows(t.dtype, static_cast<const char*>(t.data) + r0 * row_bytes, m, f.cols,
                                          f32.data());
    if (!s.ok()) return DataLoss("tensor ", name, ": ", s.message());
    uint16_t* o = out + r0 * f.cols;
    for (int64_t i = 0; i < m * f.cols; ++i) o[i] = F32ToBf16(f32[i]);
  }
  return absl::OkStatus();
}

}  // namespace specgen
