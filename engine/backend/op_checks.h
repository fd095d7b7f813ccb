// Argument checks shared by every Backend: each op's shapes, ranges and ids, so that the CPU
// reference and the CUDA backend reject exactly the same calls with the same messages ("cpu MatMul:
// x [2, 64] · W[32, 48]^T into [2, 32]"). `be` is the backend's name, the messages' prefix.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/tensor_view.h"
#include "engine/backend/backend.h"

namespace specgen {

std::string ShapeOf(const Buffer& b);  // "[rows, cols]"
std::string ShapeOf(const Weight& w);

// A weight view a backend can upload: 1 or 2 dimensions ([cols] is one row) and at least the bytes
// its dtype and shape need; the error names the tensor.
struct UploadShape {
  int64_t rows = 0, cols = 0;
  size_t bytes = 0;  // of the source data in its own dtype
};
absl::StatusOr<UploadShape> CheckUpload(const TensorView& t, std::string_view name);

// An fp32 activation, not a 16-bit KV cache buffer; the error names the op.
absl::Status CheckFloatBuffer(std::string_view be, std::string_view op, const Buffer& b);
absl::Status CheckSameShape(std::string_view be, std::string_view op, const Buffer& a, const Buffer& b);
absl::Status CheckWrite(std::string_view be, size_t n_floats, const Buffer& dst);
absl::Status CheckRead(std::string_view be, const Buffer& src, size_t n_floats);
absl::Status CheckEmbedShape(std::string_view be, const Weight& table, size_t n_tokens, const Buffer& out);
// Every id in [0, vocabulary); the error names the id and its batch index.
absl::Status CheckTokenIds(const Weight& table, std::span<const int32_t> tokens);
absl::Status CheckMatMul(std::string_view be, const Buffer& x, const Weight& w, const Buffer& y);
absl::Status CheckRmsNorm(std::string_view be, const Buffer& x, const Weight& w, int64_t group, const Buffer& y);
absl::Status CheckRope(std::string_view be, size_t n_positions, int64_t head_dim, const Buffer& x);
absl::Status CheckSwiGlu(std::string_view be, const Buffer& gate, const Buffer& up, const Buffer& out);
absl::Status CheckCopyRows(std::string_view be, const Buffer& src, int64_t dst_row, const Buffer& dst);
absl::Status CheckAttention(std::string_view be, const Buffer& q, const Buffer& k_cache,
                            const Buffer& v_cache, const AttentionShape& s, std::span<const uint8_t> mask,
                            const Buffer& out);
absl::Status CheckRoute(std::string_view be, const Buffer& logits, int64_t k);
absl::Status CheckGatherRows(std::string_view be, const Buffer& src, std::span<const int32_t> rows,
                             const Buffer& dst);
absl::Status CheckScatterAddScaled(std::string_view be, const Buffer& src, std::span<const int32_t> rows,
                                   std::span<const float> scales, const Buffer& dst);

}  // namespace specgen
