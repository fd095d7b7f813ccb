#include "engine/backend/backend.h"

#include "engine/core/status_macros.h"

namespace specgen {

absl::Status Backend::NormRopeStore(const HeadNormRope& p, Buffer* q, Buffer* k, const Buffer& v,
                                    int64_t dst_row, Buffer* k_cache, Buffer* v_cache) {
  if ((p.q_norm == nullptr) != (p.k_norm == nullptr)) {
    return InvalidArgument(name(), " NormRopeStore: a q norm without a k norm or the reverse");
  }
  if (p.q_norm != nullptr) {
    RETURN_IF_ERROR(RmsNorm(*q, *p.q_norm, p.head_dim, p.eps, q));
    RETURN_IF_ERROR(RmsNorm(*k, *p.k_norm, p.head_dim, p.eps, k));
  }
  RETURN_IF_ERROR(Rope(p.positions, p.head_dim, p.theta, p.style, q));
  RETURN_IF_ERROR(Rope(p.positions, p.head_dim, p.theta, p.style, k));
  RETURN_IF_ERROR(CopyRows(*k, dst_row, k_cache));
  return CopyRows(v, dst_row, v_cache);
}

}  // namespace specgen
