// TensorView: a non-owning view of a tensor (dtype, row-major shape, where it lives, pointer).
// Arenas, mapped files and buffers own memory; views are passed around freely.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "engine/core/dtype.h"

namespace specgen {

enum class Location { kHost, kPinnedHost, kDevice };

struct TensorView {
  DType dtype = DType::kF32;
  int ndim = 0;
  std::array<int64_t, 4> shape{};  // row-major: shape[ndim-1] is contiguous (GGUF ne[0])
  Location location = Location::kHost;
  const void* data = nullptr;
  size_t bytes = 0;  // exact byte size of the data

  int64_t dim(int i) const { return shape[i]; }
  int64_t rows() const {  // product of all but the last dimension
    int64_t r = 1;
    for (int i = 0; i + 1 < ndim; ++i) r *= shape[i];
    return r;
  }
  int64_t cols() const { return ndim == 0 ? 1 : shape[ndim - 1]; }
  int64_t numel() const { return rows() * cols(); }
};

// "[2048, 151936]"
std::string ShapeString(const TensorView& t);

}  // namespace specgen
