// Checks a model's weights for NaN and infinity when it loads. A non-finite block scale in a packed
// tensor (or a non-finite f32/f16/bf16 value) makes every logit it reaches NaN, and a NaN logit row
// is not an error anywhere downstream: greedy takes the end token and stops normally, sampling fails
// far from the cause. So the loaded file is checked up front, and the error names the tensor, the
// block and the field (llama.cpp's --check-tensors does the same, opt-in; here it is on by default
// and `--no-check-tensors` skips it).
//
// What is read: every value of f32, f16 and bf16 tensors (a bit test on the exponent, no conversion),
// and of packed tensors only their f16 scales (d, and dmin or m where the type has one; the 4-8-bit
// quants and 6-bit sub-scales are integers and cannot be non-finite). Tensors are cut into chunks
// checked on several threads; a file's pages are read once, as the upload reads them anyway.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor_view.h"
#include "engine/io/weight_set.h"

namespace specgen {

// The first non-finite value of a tensor: the block (for f32/f16/bf16 the element) and the field
// ("value", "d", "dmin" or "m") that holds it, and the value.
struct NonFiniteValue {
  int64_t block = 0;
  std::string_view field;
  float value = 0;
};

// Scans blocks [first, first + count) of `data`, a tensor of `dtype`; nullopt when all are finite.
std::optional<NonFiniteValue> FindNonFinite(DType dtype, const uint8_t* data, int64_t first, int64_t count);

struct TensorCheckOptions {
  int threads = 0;  // 0: every hardware thread
  size_t chunk_bytes = size_t{4} << 20;  // the unit of parallel work and of progress
  // (done, total) in bytes of tensor data checked; may be called from several threads at once.
  std::function<void(size_t done, size_t total)> progress;
};

// Every tensor of `weights` (host memory). The error (FailedPrecondition) names `source`, the tensor
// (its name in the file and its role), the block, the row it lies in, the field and the value, and
// how to skip the check.
absl::Status CheckTensorsFinite(const WeightSet& weights, std::string_view source,
                                const TensorCheckOptions& options = {});

}  // namespace specgen
