// CPU backend ops against naive double-precision loops, and the batch/thread invariance that the
// speculative engine relies on (bit-exact). fp32 unit roundoff u = 2^-24 ≈ 6e-8.
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/packed_product.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "gtest/gtest.h"
#include "tests/common/compare.h"

namespace specgen {
namespace {

using testing::ExpectAllClose;
constexpr double kU = 5.960464477539063e-08;  // 2^-24

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

class CpuOps : public ::testing::Test {
 protected:
  std::unique_ptr<Buffer> Buf(int64_t rows, int64_t cols, const std::vector<float>& data) {
    auto b = be_.NewBuffer(rows, cols).value();
    EXPECT_TRUE(be_.Write(data, b.get()).ok());
    return b;
  }
  std::unique_ptr<Buffer> Empty(int64_t rows, int64_t cols) { return be_.NewBuffer(rows, cols).value(); }
  // An f32 weight read in place: `data` must outlive it.
  std::unique_ptr<Weight> Wt(int64_t rows, int64_t cols, const std::vector<float>& data) {
    TensorView t;
    t.dtype = DType::kF32;
    t.ndim = 2;
    t.shape = {rows, cols};
    t.data = data.data();
    t.bytes = data.size() * sizeof(float);
    return be_.Upload(t, "test").value();
  }
  std::vector<float> Get(const Buffer& b) {
    std::vector<float> v(b.rows() * b.cols());
    EXPECT_TRUE(be_.Read(b, v).ok());
    return v;
  }
  CpuBackend be_{2};
};

TEST_F(CpuOps, MatMulMatchesNaiveWithinDotProductBound) {
  const int64_t n = 5, in = 77, out = 33;
  auto x = Random(n * in, 1), w = Random(out * in, 2);
  auto xb = Buf(n, in, x);
  auto wb = Wt(out, in, w);
  auto y = Empty(n, out);
  ASSERT_TRUE(be_.MatMul(*xb, *wb, y.get()).ok());
  auto got = Get(*y);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < in; ++i) {
        ref += static_cast<double>(x[r * in + i]) * w[o * in + i];
        mag += std::fabs(static_cast<double>(x[r * in + i]) * w[o * in + i]);
      }
      // Any fp32 summation order of `in` products: |err| ≤ in·u·Σ|x_i w_i|.
      EXPECT_NEAR(got[r * out + o], ref, in * kU * mag) << "row " << r << " out " << o;
    }
  }
}

// A row's result must not depend on the batch it is in, nor on the thread count: bit-exact.
TEST_F(CpuOps, MatMulIsBatchAndThreadInvariant) {
  const int64_t in = 300, out = 257;  // in not a multiple of 16; big enough to go parallel
  auto w = Random(out * in, 3);
  auto wb = Wt(out, in, w);
  for (int64_t n : {1, 2, 3, 8, 13}) {
    auto x = Random(n * in, 10 + n);
    auto xb = Buf(n, in, x);
    auto y = Empty(n, out);
    ASSERT_TRUE(be_.MatMul(*xb, *wb, y.get()).ok());
    auto batch = Get(*y);
    CpuBackend single_thread(1);
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> xr(x.begin() + r * in, x.begin() + (r + 1) * in);
      auto xrb = single_thread.NewBuffer(1, in).value();
      ASSERT_TRUE(single_thread.Write(xr, xrb.get()).ok());
      auto yr = single_thread.NewBuffer(1, out).value();
      ASSERT_TRUE(single_thread.MatMul(*xrb, *wb, yr.get()).ok());
      EXPECT_EQ(0, std::memcmp(CpuBackend::Data(*yr), batch.data() + r * out, out * sizeof(float)))
          << "batch " << n << " row " << r;
    }
  }
}

// Random bytes that are a valid row of any DType: every block field that is an f16 (d, dmin, m) sits at
// an even offset (block sizes are even), so clearing bit 6 of each odd byte keeps its exponent below
// 31: finite scales, while the quant bits stay random.
std::vector<uint8_t> RandomFinitePacked(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(gen() & (i % 2 ? 0xBF : 0xFF));
  return b;
}

// A packed weight (a block type: kept packed) gives bit for bit, whatever the batch and over blocks of
// rows split between threads: in the types of the packed product (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K,
// MXFP4) the product's one definition token by token; in the other block types what the same weight
// dequantized at load gives (the same fp32 values in the same reduction order); Embed the dequantized
// rows always.
TEST_F(CpuOps, PackedWeightsEqualDequantizedAtLoad) {
  const int64_t rows = 300, cols = 512;  // 128 rows a cache block at 512 columns: three blocks
  for (DType t : AllDTypes()) {
    if (t == DType::kF32) continue;
    std::vector<uint8_t> packed = RandomFinitePacked(TensorBytes(t, cols, rows).value(), 40 + int(t));
    if (t == DType::kMXFP4) {  // E8M0 scales above 2^124 overflow fp32 with the largest code (12/2)
      for (size_t i = 0; i < packed.size(); i += 17) packed[i] &= 0x7F;
    }
    std::vector<float> f32(rows * cols);
    ASSERT_TRUE(DequantizeRows(t, packed.data(), rows, cols, f32.data()).ok()) << Name(t);
    for (float v : f32) ASSERT_TRUE(std::isfinite(v)) << Name(t);
    TensorView v{t, 2, {rows, cols}, Location::kHost, packed.data(), packed.size()};
    auto wp = be_.Upload(v, "packed").value();
    auto wf = Wt(rows, cols, f32);
    const bool block_type = Info(t).quantized;
    EXPECT_EQ(CpuBackend::IsPacked(*wp), block_type) << Name(t);
    EXPECT_FALSE(CpuBackend::IsPacked(*wf));
    EXPECT_EQ(CpuBackend::HostBytes(*wp), block_type ? packed.size() : f32.size() * sizeof(float)) << Name(t);
    EXPECT_EQ(CpuBackend::HostBytes(*wf), f32.size() * sizeof(float));
    EXPECT_EQ(CpuBackend::Data(*wp) == nullptr, block_type) << Name(t);
    for (int64_t n : {1, 5}) {
      auto xb = Buf(n, cols, Random(n * cols, 50 + n));
      auto yp = Empty(n, rows), yf = Empty(n, rows);
      ASSERT_TRUE(be_.MatMul(*xb, *wp, yp.get()).ok());
      ASSERT_TRUE(be_.MatMul(*xb, *wf, yf.get()).ok());
      const std::vector<float> got = Get(*yp);
      std::vector<float> want = Get(*yf);
      if (packed_product::Covers(t)) {
        // The packed product's one definition, token by token (engine/core/packed_product.h).
        const std::vector<float> x = Get(*xb);
        std::vector<int8_t> q(cols);
        std::vector<float> d(cols / 32);
        std::vector<int32_t> sum(cols / 32);
        const size_t row_bytes = packed.size() / rows;
        for (int64_t r = 0; r < n; ++r) {
          packed_product::QuantizeActivations(&x[r * cols], cols, q.data(), d.data(), sum.data());
          for (int64_t o = 0; o < rows; ++o) {
            want[r * rows + o] =
                packed_product::RowProduct(t, packed.data() + o * row_bytes, cols, q.data(), d.data(), sum.data());
          }
        }
      }
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << Name(t) << " batch " << n;
    }
    const std::vector<int32_t> tokens = {299, 0, 128, 7};
    auto ep = Empty(tokens.size(), cols), ef = Empty(tokens.size(), cols);
    ASSERT_TRUE(be_.Embed(*wp, tokens, ep.get()).ok());
    ASSERT_TRUE(be_.Embed(*wf, tokens, ef.get()).ok());
    EXPECT_EQ(Get(*ep), Get(*ef)) << Name(t);
  }
}

TEST_F(CpuOps, UploadDequantizesVectorsAndChecksSize) {
  const int64_t cols = 64;
  auto src = Random(cols, 4);
  for (DType t : {DType::kF16, DType::kBF16, DType::kQ8_0}) {
    std::vector<uint8_t> bytes(TensorBytes(t, cols, 1).value());
    ASSERT_TRUE(QuantizeRow(t, src.data(), cols, bytes.data()).ok());
    std::vector<float> want(cols);
    ASSERT_TRUE(DequantizeRow(t, bytes.data(), cols, want.data()).ok());
    TensorView v{t, 1, {cols}, Location::kHost, bytes.data(), bytes.size()};
    auto w = be_.Upload(v, "norm").value();
    ASSERT_FALSE(CpuBackend::IsPacked(*w)) << Name(t);
    EXPECT_EQ(0, std::memcmp(CpuBackend::Data(*w), want.data(), want.size() * sizeof(float)))
        << Name(t);
  }
  TensorView short_view{DType::kF16, 2, {2, cols}, Location::kHost, src.data(), 10};
  auto bad = be_.Upload(short_view, "blk.0.attn_q.weight");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("blk.0.attn_q.weight"), std::string::npos);
  TensorView partial_block{DType::kQ4_K, 2, {2, 128}, Location::kHost, src.data(), 4096};
  bad = be_.Upload(partial_block, "blk.0.ffn_down.weight");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("not a multiple of the q4_k block size 256"),
            std::string::npos)
      << bad.status();
}

// RmsNorm reads a packed norm weight (a 2-D [1, n] view) as its dequantized values.
TEST_F(CpuOps, RmsNormReadsAPackedWeight) {
  const int64_t cols = 64;
  auto src = Random(cols, 8);
  std::vector<uint8_t> bytes(TensorBytes(DType::kQ8_0, cols, 1).value());
  ASSERT_TRUE(QuantizeRow(DType::kQ8_0, src.data(), cols, bytes.data()).ok());
  std::vector<float> deq(cols);
  ASSERT_TRUE(DequantizeRow(DType::kQ8_0, bytes.data(), cols, deq.data()).ok());
  TensorView v{DType::kQ8_0, 2, {1, cols}, Location::kHost, bytes.data(), bytes.size()};
  auto wp = be_.Upload(v, "norm").value();
  ASSERT_TRUE(CpuBackend::IsPacked(*wp));
  auto wf = Wt(1, cols, deq);
  auto x = Random(2 * cols, 9);
  auto yp = Empty(2, cols), yf = Empty(2, cols);
  ASSERT_TRUE(be_.RmsNorm(*Buf(2, cols, x), *wp, cols, 1e-6f, yp.get()).ok());
  ASSERT_TRUE(be_.RmsNorm(*Buf(2, cols, x), *wf, cols, 1e-6f, yf.get()).ok());
  EXPECT_EQ(Get(*yp), Get(*yf));
}

TEST_F(CpuOps, RmsNormRowAndPerHead) {
  const int64_t n = 3, cols = 48;
  auto x = Random(n * cols, 5, -3.0f, 3.0f);
  for (int64_t group : {cols, int64_t{16}}) {
    auto w = Random(group, 6);
    auto wb = Wt(1, group, w);
    auto xb = Buf(n, cols, x);
    auto y = Empty(n, cols);
    ASSERT_TRUE(be_.RmsNorm(*xb, *wb, group, 1e-6f, y.get()).ok());
    ASSERT_TRUE(be_.RmsNorm(*xb, *wb, group, 1e-6f, xb.get()).ok());  // in place: same result
    auto got = Get(*y);
    EXPECT_EQ(got, Get(*xb));
    std::vector<float> ref(n * cols);
    for (int64_t g = 0; g < n * cols / group; ++g) {
      double ss = 0;
      for (int64_t i = 0; i < group; ++i) ss += double(x[g * group + i]) * x[g * group + i];
      const double inv = 1.0 / std::sqrt(ss / group + 1e-6);
      for (int64_t i = 0; i < group; ++i) ref[g * group + i] = float(w[i] * (x[g * group + i] * inv));
    }
    // Sum of squares: ≤ group·u relative; sqrt, division and two products add a few u.
    ExpectAllClose(got, ref, 0.0, (group + 6) * kU,
                   "RmsNorm group " + std::to_string(group));
  }
}

// Naive RoPE in double: pairs (j, j + d/2) or (2j, 2j + 1), θ_j = pos · theta^(−2j/d).
std::vector<float> NaiveRope(std::vector<float> x, const std::vector<int32_t>& pos, int64_t d,
                             double theta, RopeStyle style) {
  const int64_t cols = static_cast<int64_t>(x.size() / pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    for (int64_t h = 0; h < cols / d; ++h) {
      float* v = x.data() + i * cols + h * d;
      for (int64_t j = 0; j < d / 2; ++j) {
        const double a = pos[i] * std::pow(theta, -2.0 * j / d);
        const int64_t i0 = style == RopeStyle::kRotateHalf ? j : 2 * j;
        const int64_t i1 = style == RopeStyle::kRotateHalf ? j + d / 2 : 2 * j + 1;
        const double x0 = v[i0], x1 = v[i1];
        v[i0] = float(x0 * std::cos(a) - x1 * std::sin(a));
        v[i1] = float(x0 * std::sin(a) + x1 * std::cos(a));
      }
    }
  }
  return x;
}

TEST_F(CpuOps, RopeBothStyles) {
  const int64_t d = 16, heads = 3;
  const std::vector<int32_t> pos = {0, 1, 7, 63, 100};
  auto x = Random(pos.size() * heads * d, 7);
  for (RopeStyle style : {RopeStyle::kRotateHalf, RopeStyle::kInterleaved}) {
    auto xb = Buf(pos.size(), heads * d, x);
    ASSERT_TRUE(be_.Rope(pos, d, 10000.0f, style, xb.get()).ok());
    // The fp32 angle pos·inv_freq is off by ≤ ~3u relative (inv_freq and the product rounded):
    // ≤ 100·3u ≈ 2e-5 rad at pos 100, which moves an element by at most that times |x| ≤ 1.
    ExpectAllClose(Get(*xb), NaiveRope(x, pos, d, 10000.0, style), 3e-5, 0.0, "Rope");
  }
  // Position 0 is the identity in both styles.
  auto x0 = Buf(1, d, std::vector<float>(x.begin(), x.begin() + d));
  ASSERT_TRUE(be_.Rope(std::vector<int32_t>{0}, d, 1e6f, RopeStyle::kInterleaved, x0.get()).ok());
  EXPECT_EQ(Get(*x0), std::vector<float>(x.begin(), x.begin() + d));
}

TEST_F(CpuOps, RouterVariantsAndTies) {
  // Token 0: experts 1 and 2 tie at the top; the lower id comes first. Token 1: a clear order.
  const std::vector<float> logits = {0.0f, 1.0f, 1.0f, -1.0f, 2.0f, 0.5f, -0.5f, 3.0f};
  auto lb = Buf(2, 4, logits);
  auto softmax = [](std::vector<double> l) {
    double m = *std::max_element(l.begin(), l.end()), s = 0;
    for (double& v : l) s += v = std::exp(v - m);
    for (double& v : l) v /= s;
    return l;
  };
  const auto p0 = softmax({0, 1, 1, -1}), p1 = softmax({2, 0.5, -0.5, 3});
  // Weights are fp32 softmaxes over at most 4 logits, each ≤ 1: exp, a 4-term sum and a divide put a
  // few u = 2^-24 ≈ 6e-8 of relative error on each, so 1e-6 absolute is ~16u of headroom, while a
  // wrong normalization (say, no renormalization: 0.40 for 0.5) is off by 0.1.
  Routing r;
  ASSERT_TRUE(be_.Route(*lb, 2, RouterNorm::kSoftmaxThenTopK, &r).ok());
  EXPECT_EQ(r.expert, (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_NEAR(r.weight[0], p0[1], 1e-6);
  EXPECT_NEAR(r.weight[1], p0[2], 1e-6);
  EXPECT_NEAR(r.weight[2], p1[3], 1e-6);
  EXPECT_NEAR(r.weight[3], p1[0], 1e-6);
  ASSERT_TRUE(be_.Route(*lb, 2, RouterNorm::kSoftmaxTopKRenormalize, &r).ok());
  EXPECT_EQ(r.expert, (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_NEAR(r.weight[0], 0.5, 1e-6);
  EXPECT_NEAR(r.weight[2], p1[3] / (p1[3] + p1[0]), 1e-6);
  ASSERT_TRUE(be_.Route(*lb, 2, RouterNorm::kTopKThenSoftmax, &r).ok());
  EXPECT_EQ(r.expert, (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_NEAR(r.weight[1], 0.5, 1e-6);
  EXPECT_NEAR(r.weight[2], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);  // softmax over logits {3, 2}
  EXPECT_NEAR(r.weight[3], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  EXPECT_FALSE(be_.Route(*lb, 5, RouterNorm::kSoftmaxThenTopK, &r).ok());
}

// Naive GQA attention in double over the visible KV rows.
std::vector<float> NaiveAttention(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, int64_t n, const AttentionShape& s,
                                  const std::vector<uint8_t>& mask) {
  const int64_t d = s.head_dim, qc = s.n_heads * d, kc = s.n_kv_heads * d;
  std::vector<float> out(n * qc, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const int64_t g = h / (s.n_heads / s.n_kv_heads);
      std::vector<int64_t> rows;
      for (int64_t j = 0; j < s.n_prefix; ++j) rows.push_back(j);
      for (int64_t j = 0; j < n; ++j) {
        if (mask.empty() ? j <= i : mask[i * n + j] != 0) rows.push_back(s.n_prefix + j);
      }
      std::vector<double> p;
      double m = -INFINITY, sum = 0;
      for (int64_t r : rows) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += double(q[i * qc + h * d + c]) * k[r * kc + g * d + c];
        p.push_back(dot * s.scale);
        m = std::max(m, p.back());
      }
      for (double& x : p) sum += x = std::exp(x - m);
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0;
        for (size_t t = 0; t < rows.size(); ++t) acc += p[t] / sum * v[rows[t] * kc + g * d + c];
        out[i * qc + h * d + c] = float(acc);
      }
    }
  }
  return out;
}

TEST_F(CpuOps, AttentionGqaCausalAndTreeMask) {
  AttentionShape s;
  s.n_heads = 6;
  s.n_kv_heads = 2;
  s.head_dim = 16;
  s.n_prefix = 7;
  s.scale = 0.25f;
  const int64_t n = 4, cap = 16, qc = s.n_heads * s.head_dim, kc = s.n_kv_heads * s.head_dim;
  auto q = Random(n * qc, 8, -2, 2), k = Random(cap * kc, 9, -2, 2), v = Random(cap * kc, 10);
  auto qb = Buf(n, qc, q), kb = Buf(cap, kc, k), vb = Buf(cap, kc, v);
  // A tree: row 0 is the root; 1 and 2 are siblings under it; 3 is a child of 2.
  const std::vector<uint8_t> tree = {1, 0, 0, 0,  //
                                     1, 1, 0, 0,  //
                                     1, 0, 1, 0,  //
                                     1, 0, 1, 1};
  for (const auto& mask : {std::vector<uint8_t>{}, tree}) {
    auto out = Empty(n, qc);
    ASSERT_TRUE(be_.Attention(*qb, *kb, *vb, s, mask, out.get()).ok());
    // Scores: |q·k|·scale err ≤ d·u·Σ|q k|·scale ≤ 16·u·64·0.25 ≈ 1.5e-5, which is also the relative
    // error of each probability; with |v| ≤ 1 the output is off by ≤ ~2·1.5e-5 + (rows)·u.
    ExpectAllClose(Get(*out), NaiveAttention(q, k, v, n, s, mask), 5e-5, 0.0,
                   mask.empty() ? "Attention causal" : "Attention tree");
  }
  const std::vector<uint8_t> short_mask = {1, 0, 1};
  auto out = Empty(n, qc);
  EXPECT_FALSE(be_.Attention(*qb, *kb, *vb, s, short_mask, out.get()).ok());
}

// A KV cache buffer of f16 or bf16 (NewCacheBuffer): CopyRows stores each value rounded to the type
// (round to nearest even, engine/core/half.h), Read and Write refuse it, and a type that is no cache type
// is refused. Attention over the rounded caches stays within the bound the rounding allows of the
// attention over the fp32 ones: with unit roundoff r (f16 2^-11, bf16 2^-8), |δk| ≤ r|k| moves each
// score by Δ ≤ r·Σ|q k|·scale (plus 2·d·u·Σ|q k|·scale of fp32 order), so each softmax weight by a
// factor within e^(±2Δ); |δv| ≤ r|v|; the output Σ p v (weights summing to 1) moves by at most
// ((e^(2Δ) − 1) + r)·max|v|·(1 + r) + 2·(L + 8)·u·max|v| for L keys.
TEST_F(CpuOps, CacheTypesRoundOnStoreAndAttendWithinTheRoundingBound) {
  AttentionShape s;
  s.n_heads = 6;
  s.n_kv_heads = 2;
  s.head_dim = 16;
  s.n_prefix = 20;
  s.scale = 0.25f;
  const int64_t n = 4, cap = 24, qc = s.n_heads * s.head_dim, kc = s.n_kv_heads * s.head_dim;
  const auto q = Random(n * qc, 18, -2, 2), k = Random(cap * kc, 19, -2, 2), v = Random(cap * kc, 20, -3, 3);
  auto qb = Buf(n, qc, q), ksrc = Buf(cap, kc, k), vsrc = Buf(cap, kc, v);
  auto k32 = be_.NewCacheBuffer(cap, kc, DType::kF32).value(), v32 = be_.NewCacheBuffer(cap, kc, DType::kF32).value();
  ASSERT_TRUE(be_.CopyRows(*ksrc, 0, k32.get()).ok() && be_.CopyRows(*vsrc, 0, v32.get()).ok());
  auto want = Empty(n, qc);
  ASSERT_TRUE(be_.Attention(*qb, *k32, *v32, s, {}, want.get()).ok());
  const auto exact = Get(*want);
  for (const DType type : {DType::kF16, DType::kBF16}) {
    const std::string what(Name(type));
    const double r = type == DType::kF16 ? 0x1p-11 : 0x1p-8;
    auto kt = be_.NewCacheBuffer(cap, kc, type).value(), vt = be_.NewCacheBuffer(cap, kc, type).value();
    EXPECT_EQ(kt->dtype(), type);
    ASSERT_TRUE(be_.CopyRows(*ksrc, 0, kt.get()).ok() && be_.CopyRows(*vsrc, 0, vt.get()).ok());
    const float* stored = CpuBackend::Data(*kt);
    int changed = 0;
    for (int64_t i = 0; i < cap * kc; ++i) {
      const float want_i = type == DType::kF16 ? F16ToF32(F32ToF16(k[i])) : Bf16ToF32(F32ToBf16(k[i]));
      ASSERT_EQ(stored[i], want_i) << what << " element " << i;
      changed += stored[i] != k[i];
    }
    EXPECT_GT(changed, cap * kc / 2) << what << ": uniform fp32 values are rarely exact in 16 bits";
    std::vector<float> host(cap * kc);
    EXPECT_FALSE(be_.Read(*kt, host).ok()) << what;
    EXPECT_FALSE(be_.Write(host, kt.get()).ok()) << what;

    auto out = Empty(n, qc);
    ASSERT_TRUE(be_.Attention(*qb, *kt, *vt, s, {}, out.get()).ok()) << what;
    const auto got = Get(*out);
    double max_v = 0;
    for (float x : v) max_v = std::max<double>(max_v, std::fabs(x));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < s.n_heads; ++h) {
        const int64_t g = h / (s.n_heads / s.n_kv_heads), keys = s.n_prefix + i + 1;
        double delta = 0;
        for (int64_t j = 0; j < keys; ++j) {
          double a = 0;
          for (int64_t c = 0; c < s.head_dim; ++c) {
            a += std::fabs(double(q[i * qc + h * s.head_dim + c]) * k[j * kc + g * s.head_dim + c]);
          }
          delta = std::max(delta, (r + 2 * s.head_dim * kU) * a * s.scale);
        }
        const double tol = ((std::exp(2 * delta) - 1) + r) * max_v * (1 + r) + 2 * (keys + 8) * kU * max_v;
        for (int64_t c = 0; c < s.head_dim; ++c) {
          const int64_t e = i * qc + h * s.head_dim + c;
          ASSERT_LE(std::fabs(double(got[e]) - exact[e]), tol) << what << " output " << e;
        }
      }
    }
    EXPECT_NE(std::memcmp(got.data(), exact.data(), got.size() * sizeof(float)), 0) << what << ": no effect";
  }
  EXPECT_FALSE(be_.NewCacheBuffer(cap, kc, DType::kQ8_0).ok());
  // Only fp32 activations are copied in.
  auto f16 = be_.NewCacheBuffer(cap, kc, DType::kF16).value();
  EXPECT_FALSE(be_.CopyRows(*f16, 0, k32.get()).ok());
  // K and V of one type.
  auto out = Empty(n, qc);
  EXPECT_FALSE(be_.Attention(*qb, *k32, *f16, s, {}, out.get()).ok());
}

TEST_F(CpuOps, EmbedGatherScatterSwiGlu) {
  const std::vector<float> table = {0, 1, 2, 3, 4, 5};  // [3, 2]
  auto tb = Wt(3, 2, table);
  auto out = Empty(2, 2);
  ASSERT_TRUE(be_.Embed(*tb, std::vector<int32_t>{2, 0}, out.get()).ok());
  EXPECT_EQ(Get(*out), (std::vector<float>{4, 5, 0, 1}));
  auto bad = be_.Embed(*tb, std::vector<int32_t>{1, 3}, out.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.message()).find("token id 3"), std::string::npos) << bad.message();

  auto src = Buf(3, 2, {1, 2, 3, 4, 5, 6});
  auto g = Empty(2, 2);
  ASSERT_TRUE(be_.GatherRows(*src, std::vector<int32_t>{2, 0}, g.get()).ok());
  EXPECT_EQ(Get(*g), (std::vector<float>{5, 6, 1, 2}));
  auto acc = Buf(3, 2, {0, 0, 0, 0, 0, 0});
  ASSERT_TRUE(be_.ScatterAddScaled(*g, std::vector<int32_t>{1, 1}, std::vector<float>{2, 0.5f},
                                   acc.get()).ok());
  EXPECT_EQ(Get(*acc), (std::vector<float>{0, 0, 10.5f, 13, 0, 0}));

  auto gate = Buf(1, 3, {-1.0f, 0.0f, 2.0f}), up = Buf(1, 3, {2.0f, 5.0f, 0.5f});
  ASSERT_TRUE(be_.SwiGlu(*gate, *up, gate.get()).ok());
  auto sw = Get(*gate);
  for (int i = 0; i < 3; ++i) {
    const double z = std::vector<double>{-1, 0, 2}[i], u = std::vector<double>{2, 5, 0.5}[i];
    EXPECT_NEAR(sw[i], z / (1 + std::exp(-z)) * u, 4 * kU * std::fabs(z * u) + 1e-12);
  }
}

}  // namespace
}  // namespace specgen
