// Element types the kernels read, as a small enum of their own so that kernels/ needs nothing from
// engine/core (the CUDA backend maps specgen::DType onto it). Plain C++: included by host code too.
#pragma once

#include <cstdint>

namespace specgen::kernels {

enum class ElemType : uint8_t {
  kF32 = 0,
  kF16 = 1,   // IEEE binary16
  kBF16 = 2,  // bfloat16
  // GGUF block types kept packed in their file layout (docs/formats.md §2): rows of whole blocks,
  // read by the packed kernels (kernels/packed_blocks.cuh) only.
  kQ8_0 = 3,
  kQ4_0 = 4,
  kQ4_K = 5,
  kQ5_K = 6,
  kQ6_K = 7,
  kMXFP4 = 8,  // GGUF type 39: an E8M0 scale byte, then 32 E2M1 codes (engine/core/quant_mxfp4.cc)
};

// The packed types, listed once: X(name) for each (kernels/type_dispatch.cuh dispatches over them).
#define SPECGEN_PACKED_TYPES(X) X(kQ8_0) X(kQ4_0) X(kQ4_K) X(kQ5_K) X(kQ6_K) X(kMXFP4)

inline constexpr bool IsPacked(ElemType t) {
#define SPECGEN_IS(name) t == ElemType::name ||
  return SPECGEN_PACKED_TYPES(SPECGEN_IS) false;
#undef SPECGEN_IS
}
// Bytes of one element of a plain type (0 for the packed types: use PackedRowBytes).
inline constexpr int ElemBytes(ElemType t) {
  return t == ElemType::kF32 ? 4 : (t == ElemType::kF16 || t == ElemType::kBF16) ? 2 : 0;
}
// A packed type's block: elements and bytes (ggml-common.h); 1 and ElemBytes for the plain types.
inline constexpr int BlockElems(ElemType t) {
  return t == ElemType::kQ8_0 || t == ElemType::kQ4_0 || t == ElemType::kMXFP4 ? 32 : IsPacked(t) ? 256 : 1;
}
inline constexpr int BlockBytes(ElemType t) {
  switch (t) {
    case ElemType::kQ8_0: return 34;
    case ElemType::kQ4_0: return 18;
    case ElemType::kQ4_K: return 144;
    case ElemType::kQ5_K: return 176;
    case ElemType::kQ6_K: return 210;
    case ElemType::kMXFP4: return 17;
    default: return ElemBytes(t);
  }
}
// Bytes of a row of `in` elements (`in` a whole number of blocks), any type.
inline constexpr int64_t PackedRowBytes(ElemType t, int64_t in) { return in / BlockElems(t) * BlockBytes(t); }
inline constexpr const char* ElemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kF32: return "f32";
    case ElemType::kF16: return "f16";
    case ElemType::kBF16: return "bf16";
    case ElemType::kQ8_0: return "q8_0";
    case ElemType::kQ4_0: return "q4_0";
    case ElemType::kQ4_K: return "q4_k";
    case ElemType::kQ5_K: return "q5_k";
    case ElemType::kQ6_K: return "q6_k";
    case ElemType::kMXFP4: return "mxfp4";
  }
  return "?";
}

// How the small-batch products (kernels/gemv.cuh, and the routed experts that must equal them) reduce a
// row. A backend-wide choice (CudaBackendOptions::gemv_order): the bits of an output depend on it, so
// the target's single-token and verify passes take the same one, and greedy speculative output stays
// token-identical to target-only greedy under either.
// How a packed product lays out its work: a half-warp a row with dp4a (kernels/packed_rows.cuh) or
// 16-row tiles on tensor cores (kernels/packed_mma.cuh). Both compute the packed product's one
// definition to the same bits, so the layout is a matter of speed only; kAuto picks by token count.
enum class PackedLayout : uint8_t { kAuto = 0, kRows = 1, kTiles = 2 };
inline constexpr const char* PackedLayoutName(PackedLayout l) {
  return l == PackedLayout::kRows ? "rows" : l == PackedLayout::kTiles ? "tiles" : "auto";
}

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
