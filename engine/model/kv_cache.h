// KvCache: per layer, the K (normed and roped) and V rows of every position seen so far, in backend
// memory. The forward pass stores a batch's rows at size() .. size()+n-1 in every layer, then commits
// them with Append(n); Truncate(n) rolls back to the first n positions (rejected draft tokens). Rows are
// stored in the cache's dtype (f32, f16 or bf16: --cache-type), rounded when stored; the attention
// reads them back in fp32.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace specgen {

class KvCache {
 public:
  // Room for `max_positions` positions of `n_layers` layers, each row kv_dim = Hkv * d elements of
  // `dtype` (IsCacheType).
  static absl::StatusOr<KvCache> Create(Backend& backend, int64_t n_layers, int64_t max_positions,
                                        int64_t kv_dim, DType dtype = DType::kF32);
  // Bytes of the K and V storage of every layer at `max_positions` (what Create allocates).
  static double Bytes(int64_t n_layers, int64_t max_positions, int64_t kv_dim, DType dtype);

  int64_t size() const { return size_; }             // committed positions
  int64_t max_positions() const { return max_positions_; }
  int64_t n_layers() const { return static_cast<int64_t>(k_.size()); }
  DType dtype() const { return dtype_; }

  // Writes k, v [n, kv_dim] at rows size() .. size()+n-1 of `layer`, not yet committed.
  absl::Status Store(Backend& backend, int64_t layer, const Buffer& k, const Buffer& v);
  // The same after q and k are normed and rotated, all through Backend::NormRopeStore (k is stored
  // rotated; q and k are changed in place).
  absl::Status NormRopeStore(Backend& backend, int64_t layer, const Backend::HeadNormRope& p, Buffer* q,
                             Buffer* k, const Buffer& v);
  // Commits n positions stored in every layer.
  absl::Status Append(int64_t n);
  // Keeps the first n positions (n <= size()).
  absl::Status Truncate(int64_t n);

  // The full-capacity buffers [max_positions, kv_dim] of a layer (attention reads rows < size()+n).
  const Buffer& k(int64_t layer) const { return *k_[layer]; }
  const Buffer& v(int64_t layer) const { return *v_[layer]; }

 private:
  absl::Status CheckStore(int64_t layer, int64_t rows) const;

  int64_t size_ = 0;
  int64_t max_positions_ = 0;
  DType dtype_ = DType::kF32;
  std::vector<std::unique_ptr<Buffer>> k_;
  std::vector<std::unique_ptr<Buffer>> v_;
};

}  // namespace specgen
