#include "engine/model/kv_cache.h"

#include "engine/core/status_macros.h"

namespace specgen {

absl::StatusOr<KvCache> KvCache::Create(Backend& backend, int64_t n_layers, int64_t max_positions,
                                        int64_t kv_dim, DType dtype) {
  if (n_layers <= 0 || max_positions <= 0 || kv_dim <= 0) {
    return InvalidArgument("KV cache: bad geometry: ", n_layers, " layers, ", max_positions,
                           " positions, ", kv_dim, " elements per row");
  }
  if (!IsCacheType(dtype)) {
    return InvalidArgument("KV cache: type ", Name(dtype), " (the cache is f32, f16 or bf16)");
  }
  KvCache cache;
  cache.max_positions_ = max_positions;
  cache.dtype_ = dtype;
  for (int64_t l = 0; l < n_layers; ++l) {
    ASSIGN_OR_RETURN(std::unique_ptr<Buffer> k, backend.NewCacheBuffer(max_positions, kv_dim, dtype));
    ASSIGN_OR_RETURN(std::unique_ptr<Buffer> v, backend.NewCacheBuffer(max_positions, kv_dim, dtype));
    cache.k_.push_back(std::move(k));
    cache.v_.push_back(std::move(v));
  }
  return cache;
}

double KvCache::Bytes(int64_t n_layers, int64_t max_positions, int64_t kv_dim, DType dtype) {
  return 2.0 * static_cast<double>(n_layers) * static_cast<double>(max_positions) *
         static_cast<double>(kv_dim) * static_cast<double>(Info(dtype).block_bytes);
}

absl::Status KvCache::CheckStore(int64_t layer, int64_t rows) const {
  if (layer < 0 || layer >= n_layers()) return InvalidArgument("KV cache: no layer ", layer);
  if (size_ + rows > max_positions_) {
    return InvalidArgument("KV cache: ", size_, " + ", rows, " positions exceed the context of ",
                           max_positions_);
  }
  return absl::OkStatus();
}

absl::Status KvCache::Store(Backend& backend, int64_t layer, const Buffer& k, const Buffer& v) {
  RETURN_IF_ERROR(CheckStore(layer, k.rows()));
  RETURN_IF_ERROR(backend.CopyRows(k, size_, k_[layer].get()));
  return backend.CopyRows(v, size_, v_[layer].get());
}

absl::Status KvCache::NormRopeStore(Backend& backend, int64_t layer, const Backend::HeadNormRope& p, Buffer* q,
                                    Buffer* k, const Buffer& v) {
  RETURN_IF_ERROR(CheckStore(layer, k->rows()));
  return backend.NormRopeStore(p, q, k, v, size_, k_[layer].get(), v_[layer].get());
}

absl::Status KvCache::Append(int64_t n) {
  if (n < 0 || size_ + n > max_positions_) {
    return InvalidArgument("KV cache: appending ", n, " positions to ", size_, " exceeds the context of ",
                           max_positions_);
  }
  size_ += n;
  return absl::OkStatus();
}

absl::Status KvCache::Truncate(int64_t n) {
  if (n < 0 || n > size_) {
    return InvalidArgument("KV cache: cannot truncate to ", n, " positions; it holds ", size_);
  }
  size_ = n;
  return absl::OkStatus();
}

}  // namespace specgen
