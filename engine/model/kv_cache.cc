#include "engine/model/kv_cache.h"

#include <algorithm>
#include <array>

#include "engine/core/status_macros.h"

namespace specgen {

int64_t KvRing::RingRows(int64_t layer, int64_t max_positions) const {
  const int64_t w = layer < static_cast<int64_t>(window.size()) ? window[layer] : 0;
  if (w <= 0) return 0;
  const int64_t rows = w + max_pass_rows - 1;
  return rows < max_positions ? rows : 0;
}

KvRing SlidingWindowRing(const ModelSpec& spec, int64_t max_pass_rows) {
  KvRing ring;
  if (spec.sliding_window <= 0) return ring;
  for (int64_t l = 0; l < spec.n_layers; ++l) ring.window.push_back(spec.is_swa(l) ? spec.sliding_window : 0);
  ring.max_pass_rows = max_pass_rows;
  return ring;
}

absl::StatusOr<KvCache> KvCache::Create(Backend& backend, int64_t n_layers, int64_t max_positions,
                                        int64_t kv_dim, DType dtype, const KvRing& ring) {
  if (n_layers <= 0 || max_positions <= 0 || kv_dim <= 0) {
    return InvalidArgument("KV cache: bad geometry: ", n_layers, " layers, ", max_positions,
                           " positions, ", kv_dim, " elements per row");
  }
  if (!IsCacheType(dtype)) {
    return InvalidArgument("KV cache: type ", Name(dtype), " (the cache is f32, f16 or bf16)");
  }
  if (!ring.window.empty() && static_cast<int64_t>(ring.window.size()) != n_layers) {
    return InvalidArgument("KV cache: ring windows for ", ring.window.size(), " layers of ", n_layers);
  }
  for (size_t l = 0; l < ring.window.size(); ++l) {
    if (ring.window[l] < 0) return InvalidArgument("KV cache: layer ", l, ": window ", ring.window[l]);
    if (ring.window[l] > 0 && ring.max_pass_rows <= 0) {
      return InvalidArgument("KV cache: layer ", l, " is a ring of window ", ring.window[l], " but the largest pass is ",
                             ring.max_pass_rows, " rows");
    }
  }
  KvCache cache;
  cache.max_positions_ = max_positions;
  cache.dtype_ = dtype;
  cache.ring_ = ring;
  bool any_ring = false;
  for (int64_t l = 0; l < n_layers; ++l) {
    const int64_t ring_rows = ring.RingRows(l, max_positions);
    cache.ring_rows_.push_back(ring_rows);
    cache.pass_rows_.push_back(ring.max_pass_rows);
    any_ring = any_ring || ring_rows > 0;
    const int64_t rows = ring_rows > 0 ? ring_rows : max_positions;
    ASSIGN_OR_RETURN(std::unique_ptr<Buffer> k, backend.NewCacheBuffer(rows, kv_dim, dtype));
    ASSIGN_OR_RETURN(std::unique_ptr<Buffer> v, backend.NewCacheBuffer(rows, kv_dim, dtype));
    cache.k_.push_back(std::move(k));
    cache.v_.push_back(std::move(v));
  }
  if (any_ring) {
    ASSIGN_OR_RETURN(cache.wrap_rows_, backend.NewBuffer(ring.max_pass_rows, kv_dim));
    ASSIGN_OR_RETURN(cache.wrap_k_, backend.NewCacheBuffer(ring.max_pass_rows, kv_dim, DType::kF32));
    ASSIGN_OR_RETURN(cache.wrap_v_, backend.NewCacheBuffer(ring.max_pass_rows, kv_dim, DType::kF32));
  }
  return cache;
}

double KvCache::Bytes(int64_t n_layers, int64_t max_positions, int64_t kv_dim, DType dtype, const KvRing& ring) {
  double rows = 0;
  for (int64_t l = 0; l < n_layers; ++l) {
    const int64_t r = ring.RingRows(l, max_positions);
    rows += static_cast<double>(r > 0 ? r : max_positions);
  }
  return 2.0 * rows * static_cast<double>(kv_dim) * static_cast<double>(Info(dtype).block_bytes);
}

absl::Status KvCache::CheckStore(int64_t layer, int64_t rows) const {
  if (layer < 0 || layer >= n_layers()) return InvalidArgument("KV cache: no layer ", layer);
  if (size_ + rows > max_positions_) {
    return InvalidArgument("KV cache: ", size_, " + ", rows, " positions exceed the context of ",
                           max_positions_);
  }
  if (ring_rows_[layer] > 0 && rows > pass_rows_[layer]) {
    return InvalidArgument("KV cache: a pass of ", rows, " positions after ", size_, " exceeds the ", pass_rows_[layer],
                           " that layer ", layer, "'s sliding-window ring (", ring_rows_[layer],
                           " rows) is sized for; feed at most that many at once");
  }
  return absl::OkStatus();
}

absl::Status KvCache::GrowRing(Backend& backend, int64_t layer, int64_t rows) {
  if (layer < 0 || layer >= n_layers() || ring_rows_[layer] == 0 || rows <= pass_rows_[layer] || size_ != 0) {
    return absl::OkStatus();  // nothing to grow (CheckStore judges the rest)
  }
  KvRing grown;
  grown.window.assign(static_cast<size_t>(n_layers()), 0);
  grown.window[layer] = ring_.window[layer];
  grown.max_pass_rows = rows;
  const int64_t ring_rows = grown.RingRows(layer, max_positions_);  // 0: as large as the whole cache
  const int64_t kv_dim = k_[layer]->cols();
  ASSIGN_OR_RETURN(k_[layer], backend.NewCacheBuffer(ring_rows > 0 ? ring_rows : max_positions_, kv_dim, dtype_));
  ASSIGN_OR_RETURN(v_[layer], backend.NewCacheBuffer(ring_rows > 0 ? ring_rows : max_positions_, kv_dim, dtype_));
  ring_rows_[layer] = ring_rows;
  pass_rows_[layer] = rows;
  if (ring_rows > 0 && wrap_rows_->capacity_rows() < rows) {
    ASSIGN_OR_RETURN(wrap_rows_, backend.NewBuffer(rows, kv_dim));
    ASSIGN_OR_RETURN(wrap_k_, backend.NewCacheBuffer(rows, kv_dim, DType::kF32));
    ASSIGN_OR_RETURN(wrap_v_, backend.NewCacheBuffer(rows, kv_dim, DType::kF32));
  }
  return absl::OkStatus();
}

absl::Status KvCache::StoreWrapped(Backend& backend, const Buffer& src, Buffer* ring) {
  const int64_t n = src.rows(), rows = ring->rows(), start = size_ % rows;
  const int64_t first = std::min(n, rows - start);  // rows before the ring's end, then from row 0
  std::vector<int32_t> ids;
  for (const auto [from, to, dst] : {std::array<int64_t, 3>{0, first, start}, std::array<int64_t, 3>{first, n, 0}}) {
    if (from == to) continue;
    ids.resize(static_cast<size_t>(to - from));
    for (int64_t j = from; j < to; ++j) ids[j - from] = static_cast<int32_t>(j);
    RETURN_IF_ERROR(wrap_rows_->set_rows(to - from));
    RETURN_IF_ERROR(backend.GatherRows(src, ids, wrap_rows_.get()));
    RETURN_IF_ERROR(backend.CopyRows(*wrap_rows_, dst, ring));
  }
  return absl::OkStatus();
}

absl::Status KvCache::Store(Backend& backend, int64_t layer, const Buffer& k, const Buffer& v) {
  RETURN_IF_ERROR(GrowRing(backend, layer, k.rows()));
  RETURN_IF_ERROR(CheckStore(layer, k.rows()));
  const int64_t ring = ring_rows_[layer];
  if (ring == 0) {
    RETURN_IF_ERROR(backend.CopyRows(k, size_, k_[layer].get()));
    return backend.CopyRows(v, size_, v_[layer].get());
  }
  written_ = std::max(written_, size_ + k.rows());
  if (size_ % ring + k.rows() <= ring) {
    RETURN_IF_ERROR(backend.CopyRows(k, size_ % ring, k_[layer].get()));
    return backend.CopyRows(v, size_ % ring, v_[layer].get());
  }
  RETURN_IF_ERROR(StoreWrapped(backend, k, k_[layer].get()));
  return StoreWrapped(backend, v, v_[layer].get());
}

absl::Status KvCache::NormRopeStore(Backend& backend, int64_t layer, const Backend::HeadNormRope& p, Buffer* q,
                                    Buffer* k, const Buffer& v) {
  RETURN_IF_ERROR(GrowRing(backend, layer, k->rows()));
  RETURN_IF_ERROR(CheckStore(layer, k->rows()));
  const int64_t ring = ring_rows_[layer];
  if (ring == 0) return backend.NormRopeStore(p, q, k, v, size_, k_[layer].get(), v_[layer].get());
  written_ = std::max(written_, size_ + k->rows());
  if (size_ % ring + k->rows() <= ring) {
    return backend.NormRopeStore(p, q, k, v, size_ % ring, k_[layer].get(), v_[layer].get());
  }
  // The pass runs past the ring's end: norm and rotate (k in place; its stored copy is not used),
  // then store k and v in two runs.
  RETURN_IF_ERROR(backend.NormRopeStore(p, q, k, v, 0, wrap_k_.get(), wrap_v_.get()));
  RETURN_IF_ERROR(StoreWrapped(backend, *k, k_[layer].get()));
  return StoreWrapped(backend, v, v_[layer].get());
}

absl::Status KvCache::Append(int64_t n) {
  if (n < 0 || size_ + n > max_positions_) {
    return InvalidArgument("KV cache: appending ", n, " positions to ", size_, " exceeds the context of ",
                           max_positions_);
  }
  size_ += n;
  return absl::OkStatus();
}

int64_t KvCache::KeepablePrefix(int64_t n) const {
  for (int64_t l = 0; l < n_layers() && n > 0; ++l) {
    if (ring_rows_[l] == 0) continue;
    // The next query, at position n, sees n − window + 1 .. n: those before n must still be there.
    // If they are not, no shorter prefix but the empty one is kept either: its window reaches back
    // further still.
    const int64_t oldest = std::max<int64_t>(0, n - ring_.window[l] + 1);
    if (oldest < written_ - ring_rows_[l]) return 0;
  }
  return n;
}

absl::Status KvCache::Truncate(int64_t n) {
  if (n < 0 || n > size_) {
    return InvalidArgument("KV cache: cannot truncate to ", n, " positions; it holds ", size_);
  }
  if (n == 0) {  // nothing older is read again: every ring row is free
    size_ = 0;
    written_ = 0;
    return absl::OkStatus();
  }
  for (int64_t l = 0; l < n_layers(); ++l) {
    if (ring_rows_[l] == 0) continue;
    const int64_t oldest = std::max<int64_t>(0, n - ring_.window[l] + 1);
    if (oldest < written_ - ring_rows_[l]) {
      return absl::FailedPreconditionError(
          Cat("KV cache: cannot truncate to ", n, " positions: layer ", l, "'s sliding-window ring (",
              ring_rows_[l], " rows) holds positions from ", written_ - ring_rows_[l], " on, and position ", n,
              " sees back to ", oldest, " (keep 0 and feed the prefix again)"));
    }
  }
  size_ = n;
  return absl::OkStatus();
}

}  // namespace specgen
