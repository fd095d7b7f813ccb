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

}  // namespace specgen::kernels
