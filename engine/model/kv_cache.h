// KvCache: per layer, the K (normed and roped) and V rows of every position seen so far, in backend
// memory. The forward pass stores a batch's rows at size() .. size()+n-1 in every layer, then commits
// them with Append(n); Truncate(n) rolls back to the first n positions (rejected draft tokens). Rows are
// stored in the cache's dtype (f32, f16 or bf16: --cache-type), rounded when stored; the attention
// reads them back in fp32.
//
// A sliding-window layer (gpt-oss: 128 positions on every other layer) can be a ring: it keeps only
// the last window + max_pass_rows − 1 positions, position c at row c mod ring_rows(layer), so its
// memory stays bounded whatever the context. That is the fewest rows with which a pass of up to
// max_pass_rows positions still finds, after storing its own rows, every row its queries see (a query
// at p sees p − window + 1 .. p), and with which a rollback by less than one pass (a rejected draft)
// still finds the window of the position it resumes at. Attention reads a ring through
// AttentionShape::ring; the values are those of the full cache, bit for bit. A larger pass into an
// empty cache grows the ring first; into a non-empty one it is an error naming the limit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace specgen {

// Which layers are rings. Empty `window`: none.
struct KvRing {
  std::vector<int64_t> window;  // per layer: its sliding window, or 0 for a layer that keeps every position
  int64_t max_pass_rows = 0;    // the most positions one pass stores (> 0 when any window is set)
  // The rows layer `layer` keeps: window + max_pass_rows − 1 when that is fewer than max_positions,
  // else 0 (the layer keeps every position; a ring would save nothing).
  int64_t RingRows(int64_t layer, int64_t max_positions) const;
};

// The rings of a model's sliding layers (ModelSpec::is_swa) for passes of up to max_pass_rows.
KvRing SlidingWindowRing(const ModelSpec& spec, int64_t max_pass_rows);

class KvCache {
 public:
  // Room for `max_positions` positions of `n_layers` layers, each row kv_dim = Hkv * d elements of
  // `dtype` (IsCacheType); the layers `ring` names are rings.
  static absl::StatusOr<KvCache> Create(Backend& backend, int64_t n_layers, int64_t max_positions,
                                        int64_t kv_dim, DType dtype = DType::kF32, const KvRing& ring = {});
  // Bytes of the K and V storage of every layer at `max_positions` (what Create allocates).
  static double Bytes(int64_t n_layers, int64_t max_positions, int64_t kv_dim, DType dtype,
                      const KvRing& ring = {});

  int64_t size() const { return size_; }             // committed positions
  int64_t max_positions() const { return max_positions_; }
  int64_t n_layers() const { return static_cast<int64_t>(k_.size()); }
  DType dtype() const { return dtype_; }
  const KvRing& ring() const { return ring_; }
  // The rows of a ring layer (AttentionShape::ring), or 0 for a layer that keeps every position.
  int64_t ring_rows(int64_t layer) const { return ring_rows_[layer]; }

  // Writes k, v [n, kv_dim] at rows size() .. size()+n-1 of `layer`, not yet committed.
  absl::Status Store(Backend& backend, int64_t layer, const Buffer& k, const Buffer& v);
  // The same after q and k are normed and rotated, all through Backend::NormRopeStore (k is stored
  // rotated; q and k are changed in place).
  absl::Status NormRopeStore(Backend& backend, int64_t layer, const Backend::HeadNormRope& p, Buffer* q,
                             Buffer* k, const Buffer& v);
  // Commits n positions stored in every layer.
  absl::Status Append(int64_t n);
  // Keeps the first n positions (n <= size()). With rings, n must be KeepablePrefix(n): an error names
  // the layer whose ring no longer holds the window of position n.
  absl::Status Truncate(int64_t n);
  // The most positions up to n that Truncate can keep: n, or 0 when a ring has since overwritten rows
  // position n's window needs (a rollback far behind the newest position, as a new chat turn that
  // shares only an early prefix). Without rings: n.
  int64_t KeepablePrefix(int64_t n) const;

  // The buffers of a layer: [max_positions, kv_dim], or [ring_rows, kv_dim] for a ring (attention
  // reads rows < size()+n, or their ring rows).
  const Buffer& k(int64_t layer) const { return *k_[layer]; }
  const Buffer& v(int64_t layer) const { return *v_[layer]; }

 private:
  absl::Status CheckStore(int64_t layer, int64_t rows) const;
  // A pass larger than a ring layer was sized for, into an empty cache (a whole prompt at once, as
  // `specgen logits` feeds it): nothing is kept yet, so the ring is made larger (or the layer whole).
  absl::Status GrowRing(Backend& backend, int64_t layer, int64_t rows);
  // Copies src's rows to ring rows (size_ + j) mod ring_rows(layer), in at most two runs.
  absl::Status StoreWrapped(Backend& backend, const Buffer& src, Buffer* ring);

  int64_t size_ = 0;
  int64_t max_positions_ = 0;
  DType dtype_ = DType::kF32;
  std::vector<std::unique_ptr<Buffer>> k_;
  std::vector<std::unique_ptr<Buffer>> v_;
  KvRing ring_;
  std::vector<int64_t> ring_rows_;
  std::vector<int64_t> pass_rows_;  // per ring layer: the largest pass it holds (ring_.max_pass_rows or grown)
  // One past the newest position any ring row was written for since the cache was last emptied: a
  // position c is still in a ring of R rows iff c >= written_ − R (nothing at c + R or later was written).
  int64_t written_ = 0;
  // For a store that wraps past a ring's end: the pass's rows gathered run by run, and a place for
  // NormRopeStore's own copy (the rows stored are then taken from q/k as it left them).
  std::unique_ptr<Buffer> wrap_rows_;
  std::unique_ptr<Buffer> wrap_k_, wrap_v_;
};

}  // namespace specgen
