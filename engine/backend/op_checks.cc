#include "engine/backend/op_checks.h"

#include <algorithm>
#include <string>

#include "engine/core/status_macros.h"

namespace specgen {

std::string ShapeOf(const Buffer& b) { return Cat("[", b.rows(), ", ", b.cols(), "]"); }
std::string ShapeOf(const Weight& w) { return Cat("[", w.rows(), ", ", w.cols(), "]"); }

absl::StatusOr<UploadShape> CheckUpload(const TensorView& t, std::string_view name) {
  if (t.ndim < 1 || t.ndim > 2) {
    return InvalidArgument("tensor ", name, ": expected 1 or 2 dimensions, got ", ShapeString(t));
  }
  UploadShape s;
  s.rows = t.ndim == 2 ? t.shape[0] : 1;
  s.cols = t.cols();
  ASSIGN_OR_RETURN(s.bytes, TensorBytes(t.dtype, s.cols, s.rows));
  if (t.data == nullptr || t.bytes < s.bytes) {
    return DataLoss("tensor ", name, ": ", t.bytes, " bytes of ", Name(t.dtype), " for shape ",
                    ShapeString(t), ", which needs ", s.bytes);
  }
  return s;
}

absl::Status CheckFloatBuffer(std::string_view be, std::string_view op, const Buffer& b) {
  if (b.dtype() != DType::kF32) {
    return InvalidArgument(be, " ", op, ": a ", Name(b.dtype()), " KV cache buffer ", ShapeOf(b),
                           " where an fp32 activation is expected");
  }
  return absl::OkStatus();
}

absl::Status CheckSameShape(std::string_view be, std::string_view op, const Buffer& a, const Buffer& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) {
    return InvalidArgument(be, " ", op, ": shape mismatch ", ShapeOf(a), " vs ", ShapeOf(b));
  }
  RETURN_IF_ERROR(CheckFloatBuffer(be, op, a));
  return CheckFloatBuffer(be, op, b);
}

absl::Status CheckWrite(std::string_view be, size_t n_floats, const Buffer& dst) {
  RETURN_IF_ERROR(CheckFloatBuffer(be, "Write", dst));
  if (static_cast<int64_t>(n_floats) != dst.rows() * dst.cols()) {
    return InvalidArgument(be, " Write: ", n_floats, " floats into ", ShapeOf(dst));
  }
  return absl::OkStatus();
}

absl::Status CheckRead(std::string_view be, const Buffer& src, size_t n_floats) {
  RETURN_IF_ERROR(CheckFloatBuffer(be, "Read", src));
  if (static_cast<int64_t>(n_floats) != src.rows() * src.cols()) {
    return InvalidArgument(be, " Read: ", ShapeOf(src), " into ", n_floats, " floats");
  }
  return absl::OkStatus();
}

absl::Status CheckEmbedShape(std::string_view be, const Weight& table, size_t n_tokens, const Buffer& out) {
  if (out.rows() != static_cast<int64_t>(n_tokens) || out.cols() != table.cols()) {
    return InvalidArgument(be, " Embed: ", n_tokens, " tokens of table ", ShapeOf(table), " into ",
                           ShapeOf(out));
  }
  return absl::OkStatus();
}

absl::Status CheckTokenIds(const Weight& table, std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= table.rows()) {
      return InvalidArgument("token id ", tokens[i], " at batch index ", i,
                             " is outside the vocabulary [0, ", table.rows(), ")");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMatMul(std::string_view be, const Buffer& x, const Weight& w, const Buffer& y) {
  if (x.cols() != w.cols() || y.rows() != x.rows() || y.cols() != w.rows()) {
    return InvalidArgument(be, " MatMul: x ", ShapeOf(x), " · W", ShapeOf(w), "^T into ", ShapeOf(y));
  }
  return absl::OkStatus();
}

absl::Status CheckRmsNorm(std::string_view be, const Buffer& x, const Weight& w, int64_t group, const Buffer& y) {
  RETURN_IF_ERROR(CheckSameShape(be, "RmsNorm", x, y));
  if (group <= 0 || x.cols() % group != 0 || w.rows() * w.cols() != group) {
    return InvalidArgument(be, " RmsNorm: row ", x.cols(), " in groups of ", group, " with weight ",
                           ShapeOf(w));
  }
  return absl::OkStatus();
}

absl::Status CheckRope(std::string_view be, size_t n_positions, int64_t head_dim, const Buffer& x) {
  if (static_cast<int64_t>(n_positions) != x.rows() || head_dim <= 0 || head_dim % 2 != 0 ||
      x.cols() % head_dim != 0) {
    return InvalidArgument(be, " Rope: ", n_positions, " positions, head_dim ", head_dim, " on ",
                           ShapeOf(x));
  }
  return absl::OkStatus();
}

absl::Status CheckSwiGlu(std::string_view be, const Buffer& gate, const Buffer& up, const Buffer& out) {
  RETURN_IF_ERROR(CheckSameShape(be, "SwiGlu", gate, up));
  return CheckSameShape(be, "SwiGlu", gate, out);
}

absl::Status CheckCopyRows(std::string_view be, const Buffer& src, int64_t dst_row, const Buffer& dst) {
  if (src.cols() != dst.cols() || dst_row < 0 || dst_row + src.rows() > dst.rows()) {
    return InvalidArgument(be, " CopyRows: ", ShapeOf(src), " at row ", dst_row, " of ", ShapeOf(dst));
  }
  if (!IsCacheType(dst.dtype())) {
    return InvalidArgument(be, " CopyRows: into a buffer of ", Name(dst.dtype()), " (f32, f16 or bf16)");
  }
  return CheckFloatBuffer(be, "CopyRows", src);
}

absl::Status CheckAttention(std::string_view be, const Buffer& q, const Buffer& k_cache,
                            const Buffer& v_cache, const AttentionShape& s, std::span<const uint8_t> mask,
                            const Buffer& out) {
  const int64_t n = q.rows(), d = s.head_dim;
  // A ring holds exactly `ring` rows; otherwise every KV row up to the batch's last.
  const bool rows_ok = s.ring > 0 ? k_cache.rows() == s.ring && v_cache.rows() == s.ring && n <= s.ring
                                  : s.ring == 0 && k_cache.rows() >= s.n_prefix + n && v_cache.rows() >= s.n_prefix + n;
  if (s.n_heads <= 0 || s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads != 0 || d <= 0 ||
      q.cols() != s.n_heads * d || k_cache.cols() != s.n_kv_heads * d ||
      v_cache.cols() != k_cache.cols() || s.n_prefix < 0 || !rows_ok) {
    return InvalidArgument(be, " Attention: q ", ShapeOf(q), ", k ", ShapeOf(k_cache), ", v ",
                           ShapeOf(v_cache), " for H=", s.n_heads, " Hkv=", s.n_kv_heads, " d=", d,
                           " prefix=", s.n_prefix, s.ring > 0 ? Cat(" ring=", s.ring) : std::string());
  }
  RETURN_IF_ERROR(CheckSameShape(be, "Attention", q, out));
  if (k_cache.dtype() != v_cache.dtype() || !IsCacheType(k_cache.dtype())) {
    return InvalidArgument(be, " Attention: a K cache of ", Name(k_cache.dtype()), " and a V cache of ",
                           Name(v_cache.dtype()), " (one of f32, f16, bf16 for both)");
  }
  if (!mask.empty() && static_cast<int64_t>(mask.size()) != n * n) {
    return InvalidArgument(be, " Attention: mask of ", mask.size(), " entries for ", n, " queries");
  }
  if (s.sinks != nullptr && s.sinks->rows() * s.sinks->cols() != s.n_heads) {
    return InvalidArgument(be, " Attention: ", s.sinks->rows() * s.sinks->cols(), " sinks for ", s.n_heads, " heads");
  }
  if (s.window < 0 || (s.window > 0 && static_cast<int64_t>(s.positions.size()) != n)) {
    return InvalidArgument(be, " Attention: a window of ", s.window, " with ", s.positions.size(),
                           " positions for ", n, " queries");
  }
  if (s.ring > 0) {
    if (s.window == 0) return InvalidArgument(be, " Attention: a ring cache of ", s.ring, " rows without a window");
    // The oldest row any query sees must not have been overwritten by the batch or after it.
    const int64_t kept = s.n_prefix + n - s.ring;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t first = std::max<int64_t>(0, s.positions[i] - s.window + 1);
      if (first < std::min(kept, s.n_prefix)) {
        return InvalidArgument(be, " Attention: query ", i, " at position ", s.positions[i], " sees back to row ",
                               first, " but the ring of ", s.ring, " rows holds rows from ", kept, " on");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRoute(std::string_view be, const Buffer& logits, int64_t k) {
  if (k <= 0 || k > logits.cols()) return InvalidArgument(be, " Route: top-", k, " of ", logits.cols(), " experts");
  return absl::OkStatus();
}

absl::Status CheckGatherRows(std::string_view be, const Buffer& src, std::span<const int32_t> rows,
                             const Buffer& dst) {
  if (dst.rows() != static_cast<int64_t>(rows.size()) || dst.cols() != src.cols()) {
    return InvalidArgument(be, " GatherRows: ", rows.size(), " rows of ", ShapeOf(src), " into ", ShapeOf(dst));
  }
  for (int32_t r : rows) {
    if (r < 0 || r >= src.rows()) return InvalidArgument(be, " GatherRows: row ", r, " of ", ShapeOf(src));
  }
  return absl::OkStatus();
}

absl::Status CheckScatterAddScaled(std::string_view be, const Buffer& src, std::span<const int32_t> rows,
                                   std::span<const float> scales, const Buffer& dst) {
  if (src.rows() != static_cast<int64_t>(rows.size()) || scales.size() != rows.size() ||
      dst.cols() != src.cols()) {
    return InvalidArgument(be, " ScatterAddScaled: ", ShapeOf(src), " with ", rows.size(), " rows and ",
                           scales.size(), " scales into ", ShapeOf(dst));
  }
  for (int32_t r : rows) {
    if (r < 0 || r >= dst.rows()) return InvalidArgument(be, " ScatterAddScaled: row ", r, " of ", ShapeOf(dst));
  }
  return absl::OkStatus();
}

}  // namespace specgen
