// Row dequantizers of the GGUF block types that llama-quantize writes beside the common ones: the
// legacy Q4_1, Q5_0 and Q5_1 (its fallback wherever a row is not a multiple of 256, so K-quant files of
// small models hold them) and the low-bit K-quants Q2_K and Q3_K. Each is bit-exact to ggml's
// dequantize_row_* (ggml-quants.c; layouts in docs/formats.md §2). Internal to engine/core: the DType
// table (dtype.cc) points at them, and everything else reaches them through DequantizeRow (quant.h),
// which checks the row first.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specgen::quant_rows {

// Block bytes (ggml-common.h); Q4_1/Q5_0/Q5_1 blocks hold 32 elements, Q2_K/Q3_K blocks 256.
inline constexpr size_t kQ4_1Bytes = 20, kQ5_0Bytes = 22, kQ5_1Bytes = 24, kQ2_KBytes = 84,
                        kQ3_KBytes = 110;

// src: n elements of the type (n a whole number of its blocks) → dst: n floats.
void DequantizeQ4_1(const uint8_t* src, int64_t n, float* dst);
void DequantizeQ5_0(const uint8_t* src, int64_t n, float* dst);
void DequantizeQ5_1(const uint8_t* src, int64_t n, float* dst);
void DequantizeQ2_K(const uint8_t* src, int64_t n, float* dst);
void DequantizeQ3_K(const uint8_t* src, int64_t n, float* dst);

// src: n floats → dst: n elements, as llama-quantize's fallbacks write them (quant_legacy.cc).
void QuantizeQ5_0(const float* src, int64_t n, uint8_t* dst);
void QuantizeQ5_1(const float* src, int64_t n, uint8_t* dst);

// MXFP4 (gpt-oss's experts; quant_mxfp4.cc): 32 elements a block, an E8M0 scale then 16 bytes of E2M1.
inline constexpr size_t kMxfp4Bytes = 17;
void DequantizeMxfp4(const uint8_t* src, int64_t n, float* dst);
void QuantizeMxfp4(const float* src, int64_t n, uint8_t* dst);

}  // namespace specgen::quant_rows
