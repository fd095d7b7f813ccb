// The per-DType row converters that engine/core's DType table (dtype.cc) points at, and the block
// geometry both files share. Internal to engine/core: everything else reaches them through Info(t)
// (dtype.h) or DequantizeRow / QuantizeRow (quant.h), which check the row first.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specgen::quant_rows {

// Block geometry of the GGUF block types (ggml-common.h).
inline constexpr int kQk = 32;    // Q8_0, Q4_0
inline constexpr int kQkK = 256;  // K-quants
inline constexpr size_t kQ8_0Bytes = 34, kQ4_0Bytes = 18, kQ4_KBytes = 144, kQ5_KBytes = 176,
                        kQ6_KBytes = 210;

// src: n elements of the type (n a whole number of its blocks) → dst: n floats.
void DequantizeF32(const uint8_t* src, int64_t n, float* dst);
void DequantizeF16(const uint8_t* src, int64_t n, float* dst);
void DequantizeBf16(const uint8_t* src, int64_t n, float* dst);
void DequantizeQ8_0(const uint8_t* src, int64_t n, float* dst);
void DequantizeQ4_0(const uint8_t* src, int64_t n, float* dst);
void DequantizeQ4_K(const uint8_t* src, int64_t n, float* dst);
void DequantizeQ5_K(const uint8_t* src, int64_t n, float* dst);
void DequantizeQ6_K(const uint8_t* src, int64_t n, float* dst);

// src: n floats → dst: n elements of the type (see quant.cc; the K-quants are in quant_k_ref.h).
void QuantizeF32(const float* src, int64_t n, uint8_t* dst);
void QuantizeF16(const float* src, int64_t n, uint8_t* dst);
void QuantizeBf16(const float* src, int64_t n, uint8_t* dst);
void QuantizeQ8_0(const float* src, int64_t n, uint8_t* dst);
void QuantizeQ4_0(const float* src, int64_t n, uint8_t* dst);

}  // namespace specgen::quant_rows
