// Element types the kernels read, as a small enum of their own so that kernels/ needs nothing from
// engine/core (the CUDA backend maps specgen::DType onto it). Plain C++: included by host code too.
#pragma once

#include <cstdint>

namespace specgen::kernels {

enum class ElemType : uint8_t {
  kF32 = 0,
  kF16 = 1,   // IEEE binary16
  kBF16 = 2,  // bfloat16
};

inline constexpr int ElemBytes(ElemType t) { return t == ElemType::kF32 ? 4 : 2; }

// How the small-batch products (kernels/gemv.cuh, and the routed experts that must equal them) reduce a
// row. A backend-wide choice (CudaBackendOptions::gemv_order): the bits of an output depend on it, so
// the target's single-token and verify passes take the same one, and greedy speculative output stays
// token-identical to target-only greedy under either.
enum class GemvOrder : uint8_t {
  kFma = 0,          // CUDA-core fmaf chains, a butterfly across the lanes
  kTensorCores = 1,  // bf16 mma over 16-row tiles, x split into bf16 hi + lo (kernels/mma_tile.cuh); only
                     // bf16 weights with inputs a multiple of 32 take it, everything else stays kFma
};
// The order a CUDA backend takes unless told otherwise (CudaBackendOptions, MakeBackend, the CLI's
// --gemv-order auto): the faster one for the verify pass's widths (bench/RESULTS.md).
inline constexpr GemvOrder kDefaultGemvOrder = GemvOrder::kTensorCores;
inline constexpr GemvOrder kGemvOrders[] = {GemvOrder::kFma, GemvOrder::kTensorCores};
// The order's name as --gemv-order spells it.
inline constexpr const char* GemvOrderName(GemvOrder order) {
  return order == GemvOrder::kTensorCores ? "tensor" : "fma";
}

}  // namespace specgen::kernels
