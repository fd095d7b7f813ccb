#include "engine/io/tensor_check.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/half.h"
#include "engine/core/status_macros.h"

namespace specgen {
namespace {

// Where a packed block keeps its f16 scales (ggml's block layouts, docs/formats.md §2): byte offsets
// in the block and the field names. tensor_check_test poisons each offset and sees the dequantized
// block turn non-finite, so a wrong offset here fails a test.
struct ScaleField {
  int offset;
  std::string_view name;
};
struct ScaleLayout {
  ScaleField fields[2];
  int n;
};

std::optional<ScaleLayout> ScalesOf(DType t) {
  switch (t) {
    case DType::kQ8_0:  // d, qs[32]
    case DType::kQ4_0:  // d, qs[16]
    case DType::kQ5_0:  // d, qh[4], qs[16]
      return ScaleLayout{{{0, "d"}, {0, ""}}, 1};
    case DType::kQ4_1:  // d, m, qs[16]
    case DType::kQ5_1:  // d, m, qh[4], qs[16]
      return ScaleLayout{{{0, "d"}, {2, "m"}}, 2};
    case DType::kQ4_K:  // d, dmin, scales[12], qs[128]
    case DType::kQ5_K:  // d, dmin, scales[12], qh[32], qs[128]
      return ScaleLayout{{{0, "d"}, {2, "dmin"}}, 2};
    case DType::kQ2_K:  // scales[16], qs[64], d, dmin
      return ScaleLayout{{{80, "d"}, {82, "dmin"}}, 2};
    case DType::kQ3_K:  // hmask[32], qs[64], scales[12], d
      return ScaleLayout{{{108, "d"}, {0, ""}}, 1};
    case DType::kQ6_K:  // ql[128], qh[64], scales[16], d
      return ScaleLayout{{{208, "d"}, {0, ""}}, 1};
    default:
      return std::nullopt;
  }
}

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// An f16 whose exponent bits are all ones is an infinity or a NaN; likewise bf16 and f32.
bool F16NonFinite(uint16_t h) { return (h & 0x7c00u) == 0x7c00u; }
bool Bf16NonFinite(uint16_t h) { return (h & 0x7f80u) == 0x7f80u; }

struct Chunk {
  size_t tensor;  // index into the tensors being checked
  int64_t first, count;  // blocks
  size_t bytes;
};

}  // namespace

std::optional<NonFiniteValue> FindNonFinite(DType dtype, const uint8_t* data, int64_t first, int64_t count) {
  const int64_t end = first + count;
  switch (dtype) {
    case DType::kF32:
      for (int64_t i = first; i < end; ++i) {
        uint32_t u;
        std::memcpy(&u, data + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) {
          float f;
          std::memcpy(&f, &u, 4);
          return NonFiniteValue{i, "value", f};
        }
      }
      return std::nullopt;
    case DType::kF16:
      for (int64_t i = first; i < end; ++i) {
        const uint16_t h = Load16(data + 2 * i);
        if (F16NonFinite(h)) return NonFiniteValue{i, "value", F16ToF32(h)};
      }
      return std::nullopt;
    case DType::kBF16:
      for (int64_t i = first; i < end; ++i) {
        const uint16_t h = Load16(data + 2 * i);
        if (Bf16NonFinite(h)) return NonFiniteValue{i, "value", Bf16ToF32(h)};
      }
      return std::nullopt;
    default:
      break;
  }
  const std::optional<ScaleLayout> layout = ScalesOf(dtype);
  if (!layout) return std::nullopt;  // a type without f16 scales: nothing that can be non-finite
  const int64_t block_bytes = Info(dtype).block_bytes;
  for (int64_t b = first; b < end; ++b) {
    const uint8_t* block = data + b * block_bytes;
    for (int f = 0; f < layout->n; ++f) {
      const uint16_t h = Load16(block + layout->fields[f].offset);
      if (F16NonFinite(h)) return NonFiniteValue{b, layout->fields[f].name, F16ToF32(h)};
    }
  }
  return std::nullopt;
}

absl::Status CheckTensorsFinite(const WeightSet& weights, std::string_view source,
                                const TensorCheckOptions& options) {
  std::vector<std::pair<WeightKey, TensorView>> tensors;
  std::vector<Chunk> chunks;
  size_t total = 0;
  for (const auto& [key, view] : weights.tensors()) {
    if (view.location == Location::kDevice || view.data == nullptr) continue;  // nothing host-side to read
    const DTypeInfo& info = Info(view.dtype);
    if (info.block_bytes <= 0 || info.block_elems <= 0) continue;
    const int64_t blocks = view.numel() / info.block_elems;
    const int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>(options.chunk_bytes) / info.block_bytes);
    for (int64_t first = 0; first < blocks; first += per_chunk) {
      const int64_t count = std::min(per_chunk, blocks - first);
      chunks.push_back({tensors.size(), first, count, static_cast<size_t>(count * info.block_bytes)});
      total += chunks.back().bytes;
    }
    tensors.push_back({key, view});
  }

  // The first failure in chunk order wins, so the error does not depend on thread timing.
  std::atomic<size_t> next{0};
  std::atomic<size_t> first_bad{chunks.size()};
  std::atomic<size_t> done{0};
  std::mutex mu;
  std::optional<std::pair<size_t, NonFiniteValue>> found;  // (chunk, value), under mu
  auto work = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks.size();) {
      if (c > first_bad.load()) break;  // an earlier chunk already failed
      const Chunk& chunk = chunks[c];
      const TensorView& view = tensors[chunk.tensor].second;
      const auto bad = FindNonFinite(view.dtype, static_cast<const uint8_t*>(view.data), chunk.first, chunk.count);
      if (bad) {
        std::lock_guard<std::mutex> lock(mu);
        if (!found || c < found->first) found = std::make_pair(c, *bad);
        size_t seen = first_bad.load();
        while (c < seen && !first_bad.compare_exchange_weak(seen, c)) {
        }
      }
      const size_t now = done.fetch_add(chunk.bytes) + chunk.bytes;
      if (options.progress) options.progress(now, total);
    }
  };
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::clamp<int>(threads, 1, static_cast<int>(std::max<size_t>(1, chunks.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

  if (!found) return absl::OkStatus();
  const auto& [c, bad] = *found;
  const auto& [key, view] = tensors[chunks[c].tensor];
  const DTypeInfo& info = Info(view.dtype);
  const int64_t blocks_per_row = std::max<int64_t>(1, view.cols() / info.block_elems);
  const std::string_view name = weights.SourceName(key);
  const std::string what = info.quantized ? Cat("block ", bad.block, " (row ", bad.block / blocks_per_row,
                                                ") has scale ", bad.field, " = ", bad.value)
                                          : Cat("element ", bad.block, " (row ", bad.block / blocks_per_row,
                                                ", column ", bad.block % blocks_per_row, ") is ", bad.value);
  return absl::FailedPreconditionError(
      Cat(source, ": tensor ", name.empty() ? KeyString(key) : std::string(name), " (", KeyString(key), ", ",
          info.name, " ", ShapeString(view), "): ", what,
          "; the weights are corrupt (every logit they reach would be NaN). --no-check-tensors skips this check"));
}

}  // namespace specgen
