// The K-quant quantizers that llama-quantize uses when it has no importance matrix (ggml-quants.c
// quantize_row_q{4,5,6}_K_ref), reimplemented step for step so that a file specgen writes holds the
// bytes llama.cpp would write for the same f32 weights. Internal to engine/core: the DType table
// (dtype.cc) points at them; everything else reaches them through QuantizeRow (quant.h).
#pragma once

#include <cstdint>

namespace specgen::quant_rows {

// src: n floats (n a whole number of 256-element blocks) → dst: n elements of the type.
void QuantizeQ4_K(const float* src, int64_t n, uint8_t* dst);
void QuantizeQ5_K(const float* src, int64_t n, uint8_t* dst);
void QuantizeQ6_K(const float* src, int64_t n, uint8_t* dst);

// Round to nearest, ties to even, for |x| < 2^22: ggml's nearest_int (the float magic-number trick),
// which the K-quant searches use for every level they try. Exposed for tests.
int NearestInt(float x);

}  // namespace specgen::quant_rows
