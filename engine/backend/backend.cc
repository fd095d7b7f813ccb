#include "engine/backend/backend.h"

#include "engine/core/status_macros.h"

namespace specgen {

absl::Status Backend::MatMulMany(const Buffer& x, std::span<const Weight* const> ws,
                                 std::span<Buffer* const> ys) {
  if (ws.size() != ys.size() || ws.empty() || ws.size() > 3) {
    return InvalidArgument(name(), " MatMulMany: ", ws.size(), " matrices for ", ys.size(), " outputs (1 to 3)");
  }
  for (size_t i = 0; i < ws.size(); ++i) RETURN_IF_ERROR(MatMul(x, *ws[i], ys[i]));
  return absl::OkStatus();
}

absl::Status Backend::MatMulAdd(const Buffer& x, const Weight& w, Buffer* scratch, Buffer* y) {
  RETURN_IF_ERROR(MatMul(x, w, scratch));
  return Add(*scratch, y);
}

absl::Status Backend::MatMulSwiGlu(const Buffer& x, const Weight& gate, const Weight& up, Buffer* up_scratch,
                                   Buffer* gate_out) {
  RETURN_IF_ERROR(MatMul(x, gate, gate_out));
  RETURN_IF_ERROR(MatMul(x, up, up_scratch));
  return SwiGlu(*gate_out, *up_scratch, gate_out);
}

absl::Status Backend::RopeWithFrequencies(std::span<const int32_t> positions, int64_t head_dim,
                                          std::span<const float> inv_freq, RopeStyle style, Buffer* x) {
  (void)positions, (void)head_dim, (void)inv_freq, (void)style, (void)x;
  return absl::UnimplementedError(Cat(name(), ": RoPE with scaled frequencies (rope scaling) is not supported"));
}

absl::Status Backend::NormRopeStore(const HeadNormRope& p, Buffer* q, Buffer* k, const Buffer& v,
                                    int64_t dst_row, Buffer* k_cache, Buffer* v_cache) {
  if ((p.q_norm == nullptr) != (p.k_norm == nullptr)) {
    return InvalidArgument(name(), " NormRopeStore: a q norm without a k norm or the reverse");
  }
  if (p.q_norm != nullptr) {
    RETURN_IF_ERROR(RmsNorm(*q, *p.q_norm, p.head_dim, p.eps, q));
    RETURN_IF_ERROR(RmsNorm(*k, *p.k_norm, p.head_dim, p.eps, k));
  }
  if (!p.inv_freq.empty()) {
    RETURN_IF_ERROR(RopeWithFrequencies(p.positions, p.head_dim, p.inv_freq, p.style, q));
    RETURN_IF_ERROR(RopeWithFrequencies(p.positions, p.head_dim, p.inv_freq, p.style, k));
  } else {
    RETURN_IF_ERROR(Rope(p.positions, p.head_dim, p.theta, p.style, q));
    RETURN_IF_ERROR(Rope(p.positions, p.head_dim, p.theta, p.style, k));
  }
  RETURN_IF_ERROR(CopyRows(*k, dst_row, k_cache));
  return CopyRows(v, dst_row, v_cache);
}

absl::Status Backend::PrepareRoutingOverride(std::shared_ptr<const RoutingTable> trace) {
  if (trace == nullptr) return absl::OkStatus();
  return absl::UnimplementedError(Cat(name(), ": no routing override (benchmark routing regimes)"));
}

absl::Status Backend::OverrideNextRouting(int layer, std::span<const int32_t> positions) {
  (void)layer, (void)positions;
  return absl::UnimplementedError(Cat(name(), ": no routing override (benchmark routing regimes)"));
}

}  // namespace specgen
