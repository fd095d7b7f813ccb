#include "engine/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "Eigen/Core"
#include "engine/core/half.h"
#include "engine/core/packed_product.h"
#include "engine/core/quant.h"
#include "engine/backend/op_checks.h"
#include "engine/core/status_macros.h"

namespace specgen {
namespace {

// A 16-bit KV cache buffer keeps its values in fp32 storage, each rounded to its dtype when stored:
// the same values as a GPU's 16-bit rows, read by the same fp32 attention.
class CpuBuffer : public Buffer {
 public:
  CpuBuffer(int64_t capacity_rows, int64_t cols, DType dtype = DType::kF32)
      : Buffer(capacity_rows, cols, dtype), data_(static_cast<size_t>(capacity_rows * cols)) {}
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  float* row(int64_t r) { return data_.data() + r * cols(); }
  const float* row(int64_t r) const { return data_.data() + r * cols(); }

 private:
  std::vector<float> data_;
};

// A weight's data stays where the caller's view has it (the file mapping): f32 rows are read as they
// are, and the GGUF block types are kept packed and dequantized a block of rows at a time by the ops
// that read them (MatMul, Embed), so a quantized model takes its file size in memory, not four times
// that. f16 and bf16 matrices, and 1-D weights (norms, which RmsNorm reads whole), are dequantized
// once at upload: a 16-bit row converts at about the cost of the dot product it feeds, which would
// make every decode step of a 16-bit model several times slower for half its memory.
class CpuWeight : public Weight {
 public:
  // Rows in place: row r at data + r·row_bytes; to_f32 null for f32 rows.
  CpuWeight(int64_t rows, int64_t cols, DType src, const uint8_t* data, size_t row_bytes,
            void (*to_f32)(const uint8_t*, int64_t, float*))
      : Weight(rows, cols, src), data_(data), row_bytes_(row_bytes), to_f32_(to_f32) {}
  // A dequantized copy.
  CpuWeight(int64_t rows, int64_t cols, DType src, std::vector<float> owned)
      : Weight(rows, cols, src),
        owned_(std::move(owned)),
        data_(reinterpret_cast<const uint8_t*>(owned_.data())),
        row_bytes_(static_cast<size_t>(cols) * sizeof(float)) {}

  bool packed() const { return to_f32_ != nullptr; }
  size_t bytes() const { return row_bytes_ * static_cast<size_t>(rows()); }
  // The fp32 data of an unpacked weight (nullptr when packed).
  const float* data() const { return packed() ? nullptr : reinterpret_cast<const float*>(data_); }
  // Rows [r0, r1) as fp32: in place when unpacked, else dequantized into `scratch` (resized). The
  // values are those DequantizeRow gives, whichever way.
  const float* Rows(int64_t r0, int64_t r1, std::vector<float>* scratch) const {
    if (!packed()) return reinterpret_cast<const float*>(data_ + r0 * row_bytes_);
    scratch->resize(static_cast<size_t>((r1 - r0) * cols()));
    for (int64_t r = r0; r < r1; ++r) {
      to_f32_(data_ + r * row_bytes_, cols(), scratch->data() + (r - r0) * cols());
    }
    return scratch->data();
  }
  // Row r's packed bytes (packed weights only).
  const uint8_t* RawRow(int64_t r) const { return data_ + r * row_bytes_; }
  // Row r as fp32 into dst (cols() floats).
  void RowTo(int64_t r, float* dst) const {
    if (packed()) {
      to_f32_(data_ + r * row_bytes_, cols(), dst);
    } else {
      std::copy_n(reinterpret_cast<const float*>(data_ + r * row_bytes_), cols(), dst);
    }
  }

 private:
  std::vector<float> owned_;
  const uint8_t* data_;
  size_t row_bytes_;
  void (*to_f32_)(const uint8_t*, int64_t, float*) = nullptr;
};

const CpuBuffer& B(const Buffer& b) { return static_cast<const CpuBuffer&>(b); }
CpuBuffer& B(Buffer& b) { return static_cast<CpuBuffer&>(b); }
const CpuWeight& W(const Weight& w) { return static_cast<const CpuWeight&>(w); }


// Below this many multiply-adds a loop runs on the calling thread: waking workers costs more.
constexpr int64_t kMinParallelWork = 1 << 17;

}  // namespace

float DotF32(const float* a, const float* b, int64_t n) {
  // Lane j sums the products i ≡ j (mod 16) in index order; the tail and the lanes are then added in a
  // fixed order. Unaligned loads, so the order never depends on where the data sits.
  using Lanes = Eigen::Array<float, 16, 1>;
  Lanes acc = Lanes::Zero();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc += Eigen::Map<const Lanes>(a + i) * Eigen::Map<const Lanes>(b + i);
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return acc.sum() + tail;
}

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads) {}
CpuBackend::~CpuBackend() = default;

float* CpuBackend::Data(Buffer& b) { return B(b).data(); }
const float* CpuBackend::Data(const Buffer& b) { return B(b).data(); }
const float* CpuBackend::Data(const Weight& w) { return W(w).data(); }
size_t CpuBackend::HostBytes(const Weight& w) { return W(w).bytes(); }
bool CpuBackend::IsPacked(const Weight& w) { return W(w).packed(); }

absl::StatusOr<std::unique_ptr<Buffer>> CpuBackend::NewBuffer(int64_t capacity_rows, int64_t cols) {
  if (capacity_rows < 0 || cols <= 0) {
    return InvalidArgument("cpu NewBuffer: bad shape [", capacity_rows, ", ", cols, "]");
  }
  return std::unique_ptr<Buffer>(new CpuBuffer(capacity_rows, cols));
}

absl::StatusOr<std::unique_ptr<Buffer>> CpuBackend::NewCacheBuffer(int64_t capacity_rows, int64_t cols,
                                                                   DType type) {
  if (capacity_rows < 0 || cols <= 0 || !IsCacheType(type)) {
    return InvalidArgument("cpu NewCacheBuffer: [", capacity_rows, ", ", cols, "] of ", Name(type),
                           " (a KV cache is f32, f16 or bf16)");
  }
  return std::unique_ptr<Buffer>(new CpuBuffer(capacity_rows, cols, type));
}

absl::StatusOr<std::unique_ptr<Weight>> CpuBackend::Upload(const TensorView& t, std::string_view name) {
  if (t.location == Location::kDevice) {
    return InvalidArgument("tensor ", name, ": the cpu backend cannot read device memory");
  }
  ASSIGN_OR_RETURN(const UploadShape shape, CheckUpload(t, name));
  const int64_t rows = shape.rows, cols = shape.cols;
  const auto* bytes = static_cast<const uint8_t*>(t.data);
  ASSIGN_OR_RETURN(const size_t row_bytes, RowBytes(t.dtype, cols));  // whole blocks: CheckUpload
  if (t.dtype == DType::kF32) {
    return std::unique_ptr<Weight>(new CpuWeight(rows, cols, t.dtype, bytes, row_bytes, nullptr));
  }
  if (t.ndim == 2 && Info(t.dtype).quantized) {
    return std::unique_ptr<Weight>(
        new CpuWeight(rows, cols, t.dtype, bytes, row_bytes, Info(t.dtype).to_f32));
  }
  std::vector<float> f32(static_cast<size_t>(rows * cols));
  absl::Status s = DequantizeRows(t.dtype, t.data, rows, cols, f32.data());
  if (!s.ok()) return DataLoss("tensor ", name, ": ", s.message());
  return std::unique_ptr<Weight>(new CpuWeight(rows, cols, t.dtype, std::move(f32)));
}

absl::Status CpuBackend::Write(std::span<const float> src, Buffer* dst) {
  RETURN_IF_ERROR(CheckWrite("cpu", src.size(), *dst));
  std::copy(src.begin(), src.end(), B(*dst).data());
  return absl::OkStatus();
}

absl::Status CpuBackend::Read(const Buffer& src, std::span<float> dst) {
  RETURN_IF_ERROR(CheckRead("cpu", src, dst.size()));
  std::copy_n(B(src).data(), dst.size(), dst.begin());
  return absl::OkStatus();
}

absl::Status CpuBackend::Embed(const Weight& table, std::span<const int32_t> tokens, Buffer* out) {
  RETURN_IF_ERROR(CheckEmbedShape("cpu", table, tokens.size(), *out));
  RETURN_IF_ERROR(CheckTokenIds(table, tokens));
  for (size_t i = 0; i < tokens.size(); ++i) W(table).RowTo(tokens[i], B(*out).row(i));
  return absl::OkStatus();
}

// The packed product's one definition (engine/core/packed_product.h): x quantized once a call, each
// weight row unpacked once and multiplied with every token, the same bits as the GPU's.
absl::Status CpuBackend::PackedMatMul(const Buffer& x, const Weight& w, Buffer* y) {
  const int64_t n = x.rows(), in = x.cols(), out = w.rows(), nb = in / packed_product::kBlock;
  std::vector<int8_t> q(static_cast<size_t>(n * in));
  std::vector<float> d(static_cast<size_t>(n * nb));
  std::vector<int32_t> sum(static_cast<size_t>(n * nb));
  for (int64_t r = 0; r < n; ++r) {
    packed_product::QuantizeActivations(B(x).row(r), in, q.data() + r * in, d.data() + r * nb, sum.data() + r * nb);
  }
  const CpuWeight& wb = W(w);
  CpuBuffer& yb = B(*y);
  const int64_t min_parallel = std::max<int64_t>(1, kMinParallelWork / std::max<int64_t>(n * in, 1));
  pool_.ParallelFor(out, min_parallel, [&](int64_t begin, int64_t end) {
    thread_local packed_product::UnpackedRow row;
    for (int64_t o = begin; o < end; ++o) {
      row.Unpack(w.source_dtype(), wb.RawRow(o), in);
      for (int64_t r = 0; r < n; ++r) {
        yb.row(r)[o] = row.Product(q.data() + r * in, d.data() + r * nb, sum.data() + r * nb);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::MatMul(const Buffer& x, const Weight& w, Buffer* y) {
  RETURN_IF_ERROR(CheckMatMul("cpu", x, w, *y));
  const int64_t n = x.rows(), in = x.cols(), out = w.rows();
  const CpuBuffer& xb = B(x);
  const CpuWeight& wb = W(w);
  CpuBuffer& yb = B(*y);
  // Each thread owns a range of output features; within it, blocks of W rows small enough to stay in
  // cache are reused across the batch (a packed block is dequantized once a call, into the thread's
  // scratch). Every element is one DotF32 of the same fp32 values, so neither blocking nor packing
  // changes a value.
  if (wb.packed() && packed_product::Covers(w.source_dtype())) return PackedMatMul(xb, wb, &yb);
  const int64_t block = std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(in, 1));
  const int64_t min_parallel = std::max<int64_t>(1, kMinParallelWork / std::max<int64_t>(n * in, 1));
  pool_.ParallelFor(out, min_parallel, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;
    for (int64_t o0 = begin; o0 < end; o0 += block) {
      const int64_t o1 = std::min(end, o0 + block);
      const float* wrows = wb.Rows(o0, o1, &scratch);
      for (int64_t r = 0; r < n; ++r) {
        const float* xr = xb.row(r);
        float* yr = yb.row(r);
        for (int64_t o = o0; o < o1; ++o) yr[o] = DotF32(wrows + (o - o0) * in, xr, in);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::RmsNorm(const Buffer& x, const Weight& w, int64_t group, float eps, Buffer* y) {
  RETURN_IF_ERROR(CheckRmsNorm("cpu", x, w, group, *y));
  std::vector<float> unpacked;  // stays empty unless w is packed
  const float* wd = W(w).Rows(0, 1, &unpacked);
  const int64_t n_groups = x.rows() * (x.cols() / group);
  pool_.ParallelFor(n_groups, std::max<int64_t>(1, kMinParallelWork / group), [&](int64_t b, int64_t e) {
    for (int64_t g = b; g < e; ++g) {
      const float* xg = B(x).data() + g * group;
      float* yg = B(*y).data() + g * group;
      // As transformers: w ⊙ (x · rsqrt(mean(x²) + eps)), in fp32.
      const float mean_sq = DotF32(xg, xg, group) / static_cast<float>(group);
      const float inv = 1.0f / std::sqrt(mean_sq + eps);
      for (int64_t i = 0; i < group; ++i) yg[i] = wd[i] * (xg[i] * inv);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::Rope(std::span<const int32_t> positions, int64_t head_dim, float theta,
                              RopeStyle style, Buffer* x) {
  RETURN_IF_ERROR(CheckRope("cpu", positions.size(), head_dim, *x));
  // As transformers' default RoPE: inv_freq_j = 1 / theta^(2j/d) and the angle pos·inv_freq in fp32.
  std::vector<float> inv_freq(head_dim / 2);
  for (int64_t j = 0; j < head_dim / 2; ++j) {
    inv_freq[j] = 1.0f / std::pow(theta, static_cast<float>(2 * j) / static_cast<float>(head_dim));
  }
  return RopeWithFrequencies(positions, head_dim, inv_freq, style, x);
}

absl::Status CpuBackend::RopeWithFrequencies(std::span<const int32_t> positions, int64_t head_dim,
                                             std::span<const float> inv_freq, RopeStyle style, Buffer* x) {
  return RopePartial(positions, head_dim, head_dim, inv_freq, 1.0f, style, x);
}

absl::Status CpuBackend::RopePartial(std::span<const int32_t> positions, int64_t head_dim, int64_t rope_dim,
                                     std::span<const float> inv_freq, float factor, RopeStyle style, Buffer* x) {
  RETURN_IF_ERROR(CheckRope("cpu", positions.size(), head_dim, *x));
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0) {
    return InvalidArgument("cpu Rope: rotating ", rope_dim, " of ", head_dim, " dims (an even count, at most all)");
  }
  const int64_t half = rope_dim / 2, n_heads = x->cols() / head_dim;
  if (static_cast<int64_t>(inv_freq.size()) != half) {
    return InvalidArgument("cpu Rope: ", inv_freq.size(), " inverse frequencies for ", rope_dim, " rotated dims");
  }
  std::vector<float> cos_t(half), sin_t(half);
  for (int64_t i = 0; i < x->rows(); ++i) {
    for (int64_t j = 0; j < half; ++j) {
      const float angle = static_cast<float>(positions[i]) * inv_freq[j];
      // As transformers: cos and sin each times the attention factor (1 but for YaRN).
      cos_t[j] = std::cos(angle) * factor;
      sin_t[j] = std::sin(angle) * factor;
    }
    float* row = B(*x).row(i);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = row + h * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        // kRotateHalf pairs (j, j + d/2); kInterleaved pairs (2j, 2j + 1).
        float* a = style == RopeStyle::kRotateHalf ? v + j : v + 2 * j;
        float* b = style == RopeStyle::kRotateHalf ? v + j + half : v + 2 * j + 1;
        const float x0 = *a, x1 = *b;
        *a = x0 * cos_t[j] - x1 * sin_t[j];
        *b = x1 * cos_t[j] + x0 * sin_t[j];
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::AddBias(const Weight& b, Buffer* y) {
  if (b.rows() * b.cols() != y->cols()) {
    return InvalidArgument("cpu AddBias: a bias of ", b.rows() * b.cols(), " for rows of ", y->cols());
  }
  std::vector<float> unpacked;
  const float* bd = W(b).Rows(0, 1, &unpacked);
  for (int64_t i = 0; i < y->rows(); ++i) {
    float* row = B(*y).row(i);
    for (int64_t c = 0; c < y->cols(); ++c) row[c] += bd[c];
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::SwiGluClamped(const Buffer& gate, const Buffer& up, float alpha, float limit, Buffer* out) {
  RETURN_IF_ERROR(CheckSwiGlu("cpu", gate, up, *out));
  const float* g = B(gate).data();
  const float* u = B(up).data();
  float* o = B(*out).data();
  for (int64_t i = 0, n = gate.rows() * gate.cols(); i < n; ++i) {
    // As transformers' GptOssExperts (the same order of operations).
    const float gc = std::min(g[i], limit);
    const float uc = std::clamp(u[i], -limit, limit);
    const float glu = gc * (1.0f / (1.0f + std::exp(-(gc * alpha))));
    o[i] = (uc + 1.0f) * glu;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ScaleRowsBySigmoid(const Buffer& g, Buffer* y) {
  if (g.cols() != 1 || g.rows() != y->rows()) {
    return InvalidArgument("cpu ScaleRowsBySigmoid: gates ", g.rows(), "x", g.cols(), " for ", y->rows(), " rows");
  }
  for (int64_t i = 0; i < y->rows(); ++i) {
    const float s = 1.0f / (1.0f + std::exp(-B(g).row(i)[0]));
    float* row = B(*y).row(i);
    for (int64_t c = 0; c < y->cols(); ++c) row[c] *= s;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Zero(Buffer* y) {
  std::fill_n(B(*y).data(), y->rows() * y->cols(), 0.0f);
  return absl::OkStatus();
}

absl::Status CpuBackend::Add(const Buffer& x, Buffer* y) {
  RETURN_IF_ERROR(CheckSameShape("cpu", "Add", x, *y));
  const float* xd = B(x).data();
  float* yd = B(*y).data();
  for (int64_t i = 0, n = x.rows() * x.cols(); i < n; ++i) yd[i] += xd[i];
  return absl::OkStatus();
}

absl::Status CpuBackend::SwiGlu(const Buffer& gate, const Buffer& up, Buffer* out) {
  RETURN_IF_ERROR(CheckSwiGlu("cpu", gate, up, *out));
  const float* g = B(gate).data();
  const float* u = B(up).data();
  float* o = B(*out).data();
  for (int64_t i = 0, n = gate.rows() * gate.cols(); i < n; ++i) {
    o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyRows(const Buffer& src, int64_t dst_row, Buffer* dst) {
  RETURN_IF_ERROR(CheckCopyRows("cpu", src, dst_row, *dst));
  const float* from = B(src).data();
  float* to = B(*dst).row(dst_row);
  const int64_t n = src.rows() * src.cols();
  switch (dst->dtype()) {
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) to[i] = F16ToF32(F32ToF16(from[i]));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) to[i] = Bf16ToF32(F32ToBf16(from[i]));
      break;
    default:
      std::copy_n(from, n, to);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Attention(const Buffer& q, const Buffer& k_cache, const Buffer& v_cache,
                                   const AttentionShape& s, std::span<const uint8_t> mask, Buffer* out) {
  const int64_t n = q.rows(), d = s.head_dim;
  RETURN_IF_ERROR(CheckAttention("cpu", q, k_cache, v_cache, s, mask, *out));
  const int64_t group = s.n_heads / s.n_kv_heads;
  std::vector<float> sinks_unpacked;
  const float* sinks = s.sinks != nullptr ? W(*s.sinks).Rows(0, 1, &sinks_unpacked) : nullptr;
  const int64_t work_per_item = (s.n_prefix + n) * d * 2;
  pool_.ParallelFor(n * s.n_heads, std::max<int64_t>(1, kMinParallelWork / work_per_item),
                    [&](int64_t begin, int64_t end) {
    std::vector<float> p;
    std::vector<int64_t> keys;  // KV rows this query sees, ascending
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / s.n_heads, h = item % s.n_heads, g = h / group;
      keys.clear();
      // A sliding layer sees positions > p − window: prefix row r holds position r, batch row j
      // positions[j].
      const int64_t first = s.window > 0 ? static_cast<int64_t>(s.positions[i]) - s.window + 1 : 0;
      for (int64_t j = std::max<int64_t>(first, 0); j < s.n_prefix; ++j) keys.push_back(j);
      for (int64_t j = 0; j < n; ++j) {
        if (!(mask.empty() ? j <= i : mask[i * n + j] != 0)) continue;
        if (s.window > 0 && s.positions[j] < first) continue;
        keys.push_back(s.n_prefix + j);
      }
      // A ring cache (a sliding layer's, KvCache): KV row r is stored at row r mod ring.
      if (s.ring > 0) {
        for (int64_t& r : keys) r %= s.ring;
      }
      const float* qh = B(q).row(i) + h * d;
      float* oh = B(*out).row(i) + h * d;
      std::fill_n(oh, d, 0.0f);
      if (keys.empty()) continue;  // a row that sees nothing outputs zeros (never NaN)
      p.resize(keys.size());
      float max_score = -INFINITY;
      for (size_t t = 0; t < keys.size(); ++t) {
        p[t] = DotF32(qh, B(k_cache).row(keys[t]) + g * d, d) * s.scale;
        max_score = std::max(max_score, p[t]);
      }
      // A sink (gpt-oss) joins the max and the denominator, as transformers' eager attention does.
      const float sink = s.sinks != nullptr ? sinks[h] : -INFINITY;
      max_score = std::max(max_score, sink);
      float sum = 0.0f;
      for (float& v : p) {
        v = std::exp(v - max_score);
        sum += v;
      }
      if (s.sinks != nullptr) sum += std::exp(sink - max_score);
      // As transformers' eager attention: normalize the probabilities, then weight V.
      const float inv_sum = 1.0f / sum;
      for (size_t t = 0; t < keys.size(); ++t) {
        const float w = p[t] * inv_sum;
        const float* vh = B(v_cache).row(keys[t]) + g * d;
        for (int64_t c = 0; c < d; ++c) oh[c] += w * vh[c];
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::PrepareRoutingOverride(std::shared_ptr<const RoutingTable> trace) {
  routing_override_.Prepare(std::move(trace));
  return absl::OkStatus();
}

absl::Status CpuBackend::OverrideNextRouting(int layer, std::span<const int32_t> positions) {
  return routing_override_.Arm("cpu", layer, positions);
}

absl::Status CpuBackend::Route(const Buffer& logits, int64_t k, RouterNorm norm, Routing* routing) {
  if (IsSigmoidRouter(norm)) return RouteWith(logits, k, RouterParams{norm}, routing);
  const int64_t n = logits.rows(), e = logits.cols();
  RETURN_IF_ERROR(CheckRoute("cpu", logits, k));
  ASSIGN_OR_RETURN(const std::optional<RoutingOverrideState::Site> site, routing_override_.Take("cpu", n, e, k));
  routing->n_tokens = n;
  routing->k = k;
  routing->expert.assign(n * k, 0);
  routing->weight.assign(n * k, 0.0f);
  std::vector<float> prob(e);
  std::vector<int32_t> order(e);
  for (int64_t i = 0; i < n; ++i) {
    const float* l = B(logits).row(i);
    const bool softmax_first = norm != RouterNorm::kTopKThenSoftmax;
    if (softmax_first) {
      const float m = *std::max_element(l, l + e);
      float sum = 0.0f;
      for (int64_t j = 0; j < e; ++j) sum += prob[j] = std::exp(l[j] - m);
      for (int64_t j = 0; j < e; ++j) prob[j] /= sum;
    } else {
      std::copy_n(l, e, prob.begin());
    }
    // Top-k by descending score; equal scores: the lower expert id first.
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return prob[a] != prob[b] ? prob[a] > prob[b] : a < b;
    });
    int32_t* ids = routing->expert.data() + i * k;
    float* w = routing->weight.data() + i * k;
    for (int64_t j = 0; j < k; ++j) {
      ids[j] = order[j];
      w[j] = prob[order[j]];
    }
    if (norm == RouterNorm::kSoftmaxTopKRenormalize) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += w[j];
      for (int64_t j = 0; j < k; ++j) w[j] /= sum;
    } else if (norm == RouterNorm::kTopKThenSoftmax) {
      const float m = w[0];  // the largest selected logit
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += w[j] = std::exp(w[j] - m);
      for (int64_t j = 0; j < k; ++j) w[j] /= sum;
    }
  }
  if (site) return site->table->Rewrite(site->layer, site->positions, routing->expert);
  return absl::OkStatus();
}

absl::Status CpuBackend::RouteWith(const Buffer& logits, int64_t k, const RouterParams& p, Routing* routing) {
  if (!IsSigmoidRouter(p.norm)) {
    if (p.selection_bias != nullptr || p.n_groups != 1) {
      return InvalidArgument("cpu Route: a selection bias or expert groups need sigmoid routing");
    }
    RETURN_IF_ERROR(Route(logits, k, p.norm, routing));
    if (p.scale != 1.0f) {
      for (float& w : routing->weight) w *= p.scale;
    }
    return absl::OkStatus();
  }
  const int64_t n = logits.rows(), e = logits.cols();
  RETURN_IF_ERROR(CheckRoute("cpu", logits, k));
  if (p.n_groups <= 0 || e % p.n_groups != 0 || p.groups_used <= 0 || p.groups_used > p.n_groups ||
      p.groups_used * (e / p.n_groups) < k || (p.n_groups > 1 && e / p.n_groups < 2)) {
    return InvalidArgument("cpu Route: top-", k, " of ", e, " experts in ", p.n_groups, " groups keeping ",
                           p.groups_used);
  }
  std::vector<float> bias_unpacked;
  const float* bias = nullptr;
  if (p.selection_bias != nullptr) {
    if (p.selection_bias->rows() * p.selection_bias->cols() != e) {
      return InvalidArgument("cpu Route: a selection bias of ", p.selection_bias->rows() * p.selection_bias->cols(),
                             " for ", e, " experts");
    }
    bias = W(*p.selection_bias).Rows(0, 1, &bias_unpacked);
  }
  ASSIGN_OR_RETURN(const std::optional<RoutingOverrideState::Site> site, routing_override_.Take("cpu", n, e, k));
  routing->n_tokens = n;
  routing->k = k;
  routing->expert.assign(n * k, 0);
  routing->weight.assign(n * k, 0.0f);
  const int64_t group_size = e / p.n_groups;
  std::vector<float> score(e), choice(e), group_score(p.n_groups);
  std::vector<int32_t> order(e), groups(p.n_groups);
  std::vector<bool> allowed(e);
  for (int64_t i = 0; i < n; ++i) {
    const float* l = B(logits).row(i);
    for (int64_t j = 0; j < e; ++j) {
      score[j] = 1.0f / (1.0f + std::exp(-l[j]));
      choice[j] = score[j] + (bias != nullptr ? bias[j] : 0.0f);
    }
    // Groups ranked by the sum of their best two choice scores (DeepSeek-V3); the best groups_used kept.
    std::fill(allowed.begin(), allowed.end(), true);
    if (p.n_groups > 1) {
      for (int64_t g = 0; g < p.n_groups; ++g) {
        const float* c = choice.data() + g * group_size;
        float a = -INFINITY, b = -INFINITY;
        for (int64_t j = 0; j < group_size; ++j) {
          if (c[j] > a) {
            b = a;
            a = c[j];
          } else if (c[j] > b) {
            b = c[j];
          }
        }
        group_score[g] = a + b;
      }
      std::iota(groups.begin(), groups.end(), 0);
      std::partial_sort(groups.begin(), groups.begin() + p.groups_used, groups.end(), [&](int32_t a, int32_t b) {
        return group_score[a] != group_score[b] ? group_score[a] > group_score[b] : a < b;
      });
      std::fill(allowed.begin(), allowed.end(), false);
      for (int64_t g = 0; g < p.groups_used; ++g) {
        std::fill_n(allowed.begin() + groups[g] * group_size, group_size, true);
      }
    }
    std::iota(order.begin(), order.end(), 0);
    auto better = [&](int32_t a, int32_t b) {
      if (allowed[a] != allowed[b]) return static_cast<bool>(allowed[a]);
      return choice[a] != choice[b] ? choice[a] > choice[b] : a < b;
    };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
    int32_t* ids = routing->expert.data() + i * k;
    float* w = routing->weight.data() + i * k;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      ids[j] = order[j];
      w[j] = score[order[j]];  // the unbiased score: the bias only selects
      sum += w[j];
    }
    // As transformers: divided by (sum + 1e-20) when renormalizing, then times the routed scale.
    for (int64_t j = 0; j < k; ++j) {
      if (p.norm == RouterNorm::kSigmoidTopKRenormalize) w[j] /= sum + 1e-20f;
      w[j] *= p.scale;
    }
  }
  if (site) return site->table->Rewrite(site->layer, site->positions, routing->expert);
  return absl::OkStatus();
}

absl::Status CpuBackend::GatherRows(const Buffer& src, std::span<const int32_t> rows, Buffer* dst) {
  RETURN_IF_ERROR(CheckGatherRows("cpu", src, rows, *dst));
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(B(src).row(rows[i]), src.cols(), B(*dst).row(i));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ScatterAddScaled(const Buffer& src, std::span<const int32_t> rows,
                                          std::span<const float> scales, Buffer* dst) {
  RETURN_IF_ERROR(CheckScatterAddScaled("cpu", src, rows, scales, *dst));
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* s = B(src).row(i);
    float* d = B(*dst).row(rows[i]);
    for (int64_t c = 0; c < src.cols(); ++c) d[c] += scales[i] * s[c];
  }
  return absl::OkStatus();
}

}  // namespace specgen
