// The CPU ops of issue 45's features (GLM-4.5, gpt-oss) against naive double-precision loops and
// hand-computed values: attention sinks, sliding windows, partial and YaRN-scaled RoPE, biases, the
// clamped SwiGLU, sigmoid routing with a selection bias and expert groups, the shared expert's gate.
// fp32 unit roundoff u = 2^-24 ≈ 6e-8; each tolerance is derived beside its test.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/rope_scaling.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

class ArchOps : public ::testing::Test {
 protected:
  std::unique_ptr<Buffer> Buf(int64_t rows, int64_t cols, const std::vector<float>& data) {
    auto b = be_.NewBuffer(rows, cols).value();
    EXPECT_TRUE(be_.Write(data, b.get()).ok());
    return b;
  }
  // An f32 weight read in place: `data` must outlive it.
  std::unique_ptr<Weight> Wt(int64_t rows, int64_t cols, const std::vector<float>& data) {
    TensorView t;
    t.dtype = DType::kF32;
    t.ndim = rows == 1 ? 1 : 2;
    t.shape = {rows == 1 ? cols : rows, rows == 1 ? 0 : cols};
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

// Naive attention in double: query i (position pos[i]) of head h over the KV rows it sees (prefix rows
// r hold position r; batch row j position pos[j]; causal within the batch), with an optional window and
// sink logit per head.
std::vector<double> NaiveAttention(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, int64_t n, int64_t prefix, int64_t H,
                                   int64_t Hkv, int64_t d, double scale, const std::vector<int32_t>& pos,
                                   int64_t window, const std::vector<float>* sinks) {
  std::vector<double> out(n * H * d, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);
      std::vector<std::pair<int64_t, double>> s;  // (row, score)
      for (int64_t r = 0; r < prefix + i + 1; ++r) {
        const int64_t p = r < prefix ? r : pos[r - prefix];
        if (window > 0 && pos[i] - p >= window) continue;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += double(q[(i * H + h) * d + c]) * k[(r * Hkv + g) * d + c];
        s.push_back({r, dot * scale});
      }
      double m = sinks ? (*sinks)[h] : -INFINITY;
      for (auto& [r, x] : s) m = std::max(m, x);
      double sum = sinks ? std::exp((*sinks)[h] - m) : 0.0;
      for (auto& [r, x] : s) sum += std::exp(x - m);
      for (auto& [r, x] : s) {
        const double w = std::exp(x - m) / sum;
        for (int64_t c = 0; c < d; ++c) out[(i * H + h) * d + c] += w * v[(r * Hkv + g) * d + c];
      }
    }
  }
  return out;
}

AttentionShape Shape(int64_t heads, int64_t kv_heads, int64_t d, int64_t prefix, float scale) {
  AttentionShape s;
  s.n_heads = heads;
  s.n_kv_heads = kv_heads;
  s.head_dim = d;
  s.n_prefix = prefix;
  s.scale = scale;
  return s;
}

// Outputs are convex combinations of V rows (|v| ≤ 1) with weights from fp32 exp/sum over ≤ 24 keys:
// relative weight error ≲ 24·4u, so |error| ≤ 1e-5 with margin.
constexpr double kAttnTol = 1e-5;

TEST_F(ArchOps, AttentionWithSinksAndWindowMatchesNaive) {
  const int64_t H = 4, Hkv = 2, d = 8, prefix = 13, n = 5;
  const auto q = Random(n * H * d, 1), k = Random((prefix + n) * Hkv * d, 2), v = Random((prefix + n) * Hkv * d, 3);
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  const std::vector<int32_t> pos = {13, 14, 15, 16, 17};
  auto qb = Buf(n, H * d, q), kb = Buf(prefix + n, Hkv * d, k), vb = Buf(prefix + n, Hkv * d, v);
  auto out = be_.NewBuffer(n, H * d).value();
  auto sink_w = Wt(1, H, sinks);
  for (const int64_t window : {int64_t{0}, int64_t{4}, int64_t{7}}) {
    for (const bool with_sinks : {false, true}) {
      AttentionShape s = Shape(H, Hkv, d, prefix, 0.35f);
      s.sinks = with_sinks ? sink_w.get() : nullptr;
      s.window = window;
      s.positions = pos;
      ASSERT_TRUE(be_.Attention(*qb, *kb, *vb, s, {}, out.get()).ok());
      const auto want = NaiveAttention(q, k, v, n, prefix, H, Hkv, d, 0.35, pos, window, with_sinks ? &sinks : nullptr);
      const auto got = Get(*out);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], kAttnTol) << "window " << window << " sinks " << with_sinks << " at " << i;
      }
    }
  }
}

TEST_F(ArchOps, WindowFollowsPositionsNotRows) {
  // A tree batch: rows 1 and 2 both sit at position prefix + 1. With a window of 2 a query at position
  // p sees positions p − 1 and p only, wherever their rows are.
  const int64_t H = 1, Hkv = 1, d = 2, prefix = 3, n = 3;
  const std::vector<float> q = {1, 0, 1, 0, 1, 0};
  // V rows carry their row index in column 0, so the output is the attended rows' weighted index.
  std::vector<float> k(6 * 2, 0.0f), v(6 * 2, 0.0f);
  for (int r = 0; r < 6; ++r) v[r * 2] = static_cast<float>(r);
  const std::vector<int32_t> pos = {3, 4, 4};
  const std::vector<uint8_t> mask = {1, 0, 0, 1, 1, 0, 1, 0, 1};  // rows 1 and 2 are siblings
  auto qb = Buf(n, d, q), kb = Buf(6, d, k), vb = Buf(6, d, v);
  auto out = be_.NewBuffer(n, d).value();
  AttentionShape s = Shape(H, Hkv, d, prefix, 1.0f);
  s.window = 2;
  s.positions = pos;
  ASSERT_TRUE(be_.Attention(*qb, *kb, *vb, s, mask, out.get()).ok());
  const auto got = Get(*out);
  // Equal scores (k = 0): a uniform average of the rows seen. Row 0 (pos 3) sees prefix row 2 (pos 2)
  // and itself (row 3): mean 2.5. Row 2 (pos 4) sees batch row 0 (KV row 3, pos 3) and itself (KV row
  // 5): mean 4; its sibling (KV row 4) is masked out and prefix row 2 (pos 2) is out of the window.
  EXPECT_FLOAT_EQ(got[0], 2.5f);
  EXPECT_FLOAT_EQ(got[2], 3.5f);  // row 1: KV rows 3 and 4
  EXPECT_FLOAT_EQ(got[4], 4.0f);
}

TEST_F(ArchOps, PartialRopeRotatesTheFirstDimsScaledAndKeepsTheRest) {
  const int64_t head_dim = 8, rope_dim = 4, heads = 2, n = 3;
  const auto x = Random(n * heads * head_dim, 4);
  const std::vector<float> inv = {1.0f, 0.1f};
  const std::vector<int32_t> pos = {0, 5, 17};
  const float factor = 1.25f;
  auto b = Buf(n, heads * head_dim, x);
  ASSERT_TRUE(be_.RopePartial(pos, head_dim, rope_dim, inv, factor, RopeStyle::kRotateHalf, b.get()).ok());
  const auto got = Get(*b);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* in = x.data() + (i * heads + h) * head_dim;
      const float* o = got.data() + (i * heads + h) * head_dim;
      for (int64_t j = 0; j < rope_dim / 2; ++j) {
        const double a = pos[i] * double(inv[j]);
        const double x0 = in[j], x1 = in[j + rope_dim / 2];
        // cos/sin of an angle ≤ 17 rad in fp32: |error| ≲ 17·u·|x| + rounding ≈ 2e-6.
        EXPECT_NEAR(o[j], factor * (x0 * std::cos(a) - x1 * std::sin(a)), 5e-6);
        EXPECT_NEAR(o[j + rope_dim / 2], factor * (x1 * std::cos(a) + x0 * std::sin(a)), 5e-6);
      }
      for (int64_t c = rope_dim; c < head_dim; ++c) EXPECT_EQ(o[c], in[c]) << "pass-through dim " << c;
    }
  }
}

TEST_F(ArchOps, YarnFrequenciesFollowTheRampAndTheAttentionFactor) {
  RopeScaling s;
  s.kind = RopeScalingKind::kYarn;
  s.factor = 8.0f;
  s.original_context_length = 32;
  s.beta_fast = 32.0f;
  s.beta_slow = 1.0f;
  s.truncate = false;
  const int64_t dim = 16;
  const float theta = 150000.0f;
  const std::vector<float> inv = RopeInverseFrequencies(theta, dim, s);
  // transformers' formula in double: correction dims, a ramp over the pairs, a blend of the
  // extrapolated and interpolated frequencies.
  auto corr = [&](double rot) { return dim * std::log(32.0 / (rot * 2 * std::numbers::pi)) / (2 * std::log(double(theta))); };
  const double low = std::max(corr(32.0), 0.0), high = std::min(corr(1.0), double(dim - 1));
  ASSERT_EQ(inv.size(), 8u);
  for (int j = 0; j < 8; ++j) {
    const double base = std::pow(double(theta), -2.0 * j / dim);
    const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
    const double want = base / 8.0 * ramp + base * (1.0 - ramp);
    EXPECT_NEAR(inv[j], want, 1e-6 * want) << "pair " << j;  // a few fp32 roundings
  }
  EXPECT_NEAR(RopeAttentionFactor(s), 0.1 * std::log(8.0) + 1.0, 1e-6);
  s.attention_factor = 1.5f;
  EXPECT_EQ(RopeAttentionFactor(s), 1.5f);
  // Truncation rounds the band's ends outward to whole pairs.
  s.truncate = true;
  const std::vector<float> t = RopeInverseFrequencies(theta, dim, s);
  const double tl = std::floor(low), th = std::ceil(high);
  for (int j = 0; j < 8; ++j) {
    const double base = std::pow(double(theta), -2.0 * j / dim);
    const double ramp = std::clamp((j - tl) / (th - tl), 0.0, 1.0);
    EXPECT_NEAR(t[j], base / 8.0 * ramp + base * (1.0 - ramp), 1e-6 * base) << "pair " << j;
  }
}

TEST_F(ArchOps, ClampedSwiGluMatchesHandValues) {
  const float alpha = 1.702f, limit = 7.0f;
  const std::vector<float> gate = {0.0f, 1.0f, 10.0f, -3.0f, 7.0f};
  const std::vector<float> up = {2.0f, -9.0f, 0.5f, 100.0f, -7.5f};
  auto g = Buf(1, 5, gate), u = Buf(1, 5, up);
  auto out = be_.NewBuffer(1, 5).value();
  ASSERT_TRUE(be_.SwiGluClamped(*g, *u, alpha, limit, out.get()).ok());
  const auto got = Get(*out);
  auto sig = [](double z) { return 1.0 / (1.0 + std::exp(-z)); };
  const double want[5] = {
      (2.0 + 1.0) * 0.0,                       // gate 0: nothing
      (-7.0 + 1.0) * 1.0 * sig(1.702),         // up clamped to −7
      (0.5 + 1.0) * 7.0 * sig(1.702 * 7.0),    // gate clamped to 7 (above only)
      (7.0 + 1.0) * -3.0 * sig(-1.702 * 3.0),  // up clamped to 7; a negative gate is kept
      (-7.0 + 1.0) * 7.0 * sig(1.702 * 7.0),
  };
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(got[i], want[i], 4e-6 * std::max(1.0, std::abs(want[i]))) << i;
}

TEST_F(ArchOps, AddBiasAndSigmoidRowScale) {
  const std::vector<float> bias = {1.0f, -2.0f, 0.5f};
  auto b = Wt(1, 3, bias);
  auto y = Buf(2, 3, {0, 0, 0, 1, 1, 1});
  ASSERT_TRUE(be_.AddBias(*b, y.get()).ok());
  EXPECT_EQ(Get(*y), (std::vector<float>{1, -2, 0.5f, 2, -1, 1.5f}));
  auto g = Buf(2, 1, {0.0f, std::log(3.0f)});  // σ = 1/2 and 3/4
  ASSERT_TRUE(be_.ScaleRowsBySigmoid(*g, y.get()).ok());
  const auto got = Get(*y);
  EXPECT_FLOAT_EQ(got[0], 0.5f);
  EXPECT_NEAR(got[3], 1.5f, 1e-6);
  auto wrong = Wt(1, 2, {1.0f, 2.0f});
  EXPECT_FALSE(be_.AddBias(*wrong, y.get()).ok());
}

TEST_F(ArchOps, SigmoidRoutingSelectsOnBiasedScoresWithinGroupsAndWeighsUnbiased) {
  // 8 experts in 4 groups of 2, keep 2 groups, top-3. Logits chosen so that:
  //  - expert 7 has the best unbiased score but its group (3) ranks last once biased: excluded;
  //  - expert 2's selection bias makes it the best choice, but its group (1) is not kept.
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, -3.0f, 1.5f, 1.2f, -2.0f, 3.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.6f, 0.0f, 0.0f, 0.0f, 0.0f, -2.0f};
  auto lb = Buf(1, 8, logits);
  auto bw = Wt(1, 8, bias);
  auto sig = [](double z) { return 1.0 / (1.0 + std::exp(-z)); };
  std::vector<double> choice(8);
  for (int e = 0; e < 8; ++e) choice[e] = sig(logits[e]) + bias[e];
  // Group scores (best two): g0 = c0 + c1, g1 = c2 + c3, g2 = c4 + c5, g3 = c6 + c7.
  // g0 1.612 > g2 1.586 > g1 1.270 > g3 −0.928: groups 0 and 2 kept, so expert 2 (the best choice,
  // 1.222, in group 1) is out too.
  ASSERT_GT(choice[0] + choice[1], choice[4] + choice[5]);
  ASSERT_GT(choice[4] + choice[5], choice[2] + choice[3]);
  ASSERT_GT(choice[2] + choice[3], choice[6] + choice[7]);
  // Candidates 0, 1, 4, 5 by choice: 0 (0.881), 4 (0.818), 5 (0.769), 1 (0.731).
  RouterParams p;
  p.norm = RouterNorm::kSigmoidTopKRenormalize;
  p.selection_bias = bw.get();
  p.n_groups = 4;
  p.groups_used = 2;
  p.scale = 2.5f;
  Routing r;
  ASSERT_TRUE(be_.RouteWith(*lb, 3, p, &r).ok());
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 4, 5}));
  const double sum = sig(2.0) + sig(1.5) + sig(1.2);
  EXPECT_NEAR(r.weight[0], 2.5 * sig(2.0) / sum, 1e-6);
  EXPECT_NEAR(r.weight[1], 2.5 * sig(1.5) / sum, 1e-6);
  EXPECT_NEAR(r.weight[2], 2.5 * sig(1.2) / sum, 1e-6);
  // One group: the bias alone decides; no renormalization: the weights are the raw scores × scale.
  p.n_groups = 1;
  p.groups_used = 1;
  p.norm = RouterNorm::kSigmoidTopK;
  ASSERT_TRUE(be_.RouteWith(*lb, 3, p, &r).ok());
  // choice: 0 0.881, 2 1.222, 4 0.818, 5 0.769, 7 −1.047 → 2, 0, 4.
  EXPECT_EQ(r.expert, (std::vector<int32_t>{2, 0, 4}));
  EXPECT_NEAR(r.weight[0], 2.5 * sig(0.5), 1e-6);  // unbiased score of expert 2
  // A group count that does not divide the experts is refused, naming it.
  p.n_groups = 3;
  const absl::Status bad = be_.RouteWith(*lb, 3, p, &r);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.message()).find("3 groups"), std::string::npos) << bad;
}

TEST_F(ArchOps, SoftmaxRoutingWithAScaleScalesTheWeights) {
  auto lb = Buf(1, 4, {0.0f, 1.0f, 2.0f, -1.0f});
  RouterParams p;
  p.norm = RouterNorm::kTopKThenSoftmax;
  p.scale = 2.0f;
  Routing r;
  ASSERT_TRUE(be_.RouteWith(*lb, 2, p, &r).ok());
  EXPECT_EQ(r.expert, (std::vector<int32_t>{2, 1}));
  const double e1 = std::exp(-1.0);
  EXPECT_NEAR(r.weight[0], 2.0 / (1.0 + e1), 1e-6);
  EXPECT_NEAR(r.weight[1], 2.0 * e1 / (1.0 + e1), 1e-6);
}

}  // namespace
}  // namespace specgen
