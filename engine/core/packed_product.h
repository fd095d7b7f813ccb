// The packed product's one definition (docs/design.md §6.11): y = w · x for a row w kept in a GGUF
// block type (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4) and fp32 activations x, computed to the same bits
// by the CPU (this file) and the GPU (kernels/packed_mma.cuh), for any number of tokens sharing a call.
//
//  1. x is quantized per 32-element block b: d_b = max|x| / 127, q = rint(x · (127 / max|x|)) (each
//     division and product rounded in fp32, ties to even) in [-127, 127], s_b = Σ q. A block with a non-finite element gets d_b = NaN and
//     q = 0, so the product is NaN; an all-zero block gets d_b = 0.
//  2. Each 32-element block of the row contributes c_b, from exact integer dot products of the weight
//     codes with q (any order gives the same integer) and fp32 roundings in the order written in
//     BlockContribution (packed_product.cc). MXFP4 is a Q4_0 whose codes are E2M1 values (doubled to
//     the integers ±{0, 1, 2, 3, 4, 6, 8, 12}) and whose scale is a power of two: c_b = d_b · (d ·
//     float(lo + hi)), with lo, hi the dots of codes 0..15 and 16..31 with q and d = Mxfp4Scale(e).
//  3. y = the pairwise sum of p_0 .. p_15 ((p0 + p1) + (p2 + p3), then those pairs, to one), where
//     p_s sums, from 0 in ascending b, the c_b of slice s: blocks [nb·s/16, nb·(s+1)/16) of the row's
//     nb blocks. Sixteen slices let a GPU run a row's blocks in sixteen warps at once.
// Each token's result depends only on its own x, so the product is batch invariant by definition; the
// quantization of x costs accuracy (measured by `specgen perplexity --kl-base`, bench/RESULTS.md) and
// buys products at tensor-core integer rate on the GPU and at integer SIMD rate on the host.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/dtype.h"

namespace specgen::packed_product {

inline constexpr int kBlock = 32;   // elements of one activation block (and of one weight sub-block)
inline constexpr int kSlices = 16;  // partial sums a row's blocks are split into (step 3)

// The types this definition covers: the GGUF block types the GPU keeps packed, and MXFP4 (which the
// CUDA backend's device form still widens to bf16: engine/backend/device_form.h).
bool Covers(DType t);

// An MXFP4 block's scale 2^(e − 128) from its E8M0 byte e (the doubled codes take the other half),
// exactly and without libm, so a GPU forms the same float from the same bits: e ≥ 2 is the normal
// float with exponent field e − 1, e = 1 and e = 0 the subnormals 2^-127 and 2^-128.
float Mxfp4Scale(uint8_t e);

// First block of slice s (0..kSlices) of a row of nb blocks.
constexpr int64_t SliceBegin(int64_t nb, int s) { return nb * s / kSlices; }

// Step 1 for one row of k activations (k a multiple of kBlock): q [k], d and sum [k / kBlock].
void QuantizeActivations(const float* x, int64_t k, int8_t* q, float* d, int32_t* sum);

// Steps 2 and 3: the product of one packed row (k elements of `t`, Covers(t)) with one quantized
// activation row.
float RowProduct(DType t, const uint8_t* row, int64_t k, const int8_t* q, const float* d, const int32_t* sum);

// A packed row unpacked once for many tokens: the codes as int8 (Q4_K/Q5_K: 0..31; the others signed;
// MXFP4: its doubled E2M1 values) and each 32-block's scales; Product(token) equals RowProduct bit for
// bit.
class UnpackedRow {
 public:
  void Unpack(DType t, const uint8_t* row, int64_t k);
  float Product(const int8_t* q, const float* d, const int32_t* sum) const;

  // One 32-block's scales, as BlockContribution reads them.
  struct Scales {
    float d = 0;      // the block's (Q4_K/Q5_K/Q6_K: super-block's) fp32 scale (MXFP4: Mxfp4Scale)
    float dmin = 0;   // Q4_K/Q5_K: the super-block's min scale
    int32_t s0 = 1;   // multiplier of the first 16 codes' dot (Q4_K/Q5_K: sc; Q6_K: its scale)
    int32_t s1 = 1;   // of the last 16 codes' dot
    int32_t m = 0;    // Q4_K/Q5_K: the sub-block's min
  };

 private:
  DType type_ = DType::kF32;
  std::vector<int8_t> codes_;
  std::vector<Scales> scales_;
};

}  // namespace specgen::packed_product
