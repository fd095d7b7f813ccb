// One place turns a runtime ElemType into a template argument (as flashinfer's DISPATCH_* macros do):
// each launcher hands its typed launch to one of these instead of writing its own switch, so the set of
// types each family takes is written once (kernel_types.h lists the packed ones, SPECGEN_PACKED_TYPES).
// f(std::integral_constant<ElemType, T>{}) for T the runtime type; cudaErrorInvalidValue for a type
// outside the family. Host code of kernels/ (.cu files) only.
#pragma once

#include <cuda_runtime_api.h>

#include <type_traits>

#include "kernels/kernel_types.h"

namespace specgen::kernels::detail {

template <ElemType T>
using TypeTag = std::integral_constant<ElemType, T>;

// The GGUF block types kept packed in VRAM.
template <typename F>
cudaError_t WithPackedType(ElemType t, F f) {
  switch (t) {
#define SPECGEN_PACKED_CASE(name) \
  case ElemType::name:            \
    return f(TypeTag<ElemType::name>{});
    SPECGEN_PACKED_TYPES(SPECGEN_PACKED_CASE)
#undef SPECGEN_PACKED_CASE
    default: return cudaErrorInvalidValue;
  }
}

// The 16-bit float types (the GEMV's 16-byte loads of 8).
template <typename F>
cudaError_t WithHalfType(ElemType t, F f) {
  switch (t) {
    case ElemType::kBF16: return f(TypeTag<ElemType::kBF16>{});
    case ElemType::kF16: return f(TypeTag<ElemType::kF16>{});
    default: return cudaErrorInvalidValue;
  }
}

// The plain float types (f32 and the 16-bit ones).
template <typename F>
cudaError_t WithPlainType(ElemType t, F f) {
  if (t == ElemType::kF32) return f(TypeTag<ElemType::kF32>{});
  return WithHalfType(t, f);
}

}  // namespace specgen::kernels::detail
