// KV-cache attention against a CPU loop: GQA, causal and tree masks, fp32, f16 and bf16 caches, and batch
// invariance (a query's output is bit-identical alone or in a batch); the single-query decode kernel
// against the same loop, deterministic and independent of its grid bound; and the decode kernel with
// q/k-norm + RoPE + KV append fused in, bit-identical (output and caches, of every cache type) to the two
// kernels it joins; the stores round to a 16-bit cache's type as the CPU does.
#include <cmath>
#include <cstring>

#include "kernels/attention.cuh"
#include "kernels/attention_choice.h"
#include "kernels/decode_fused.cuh"
#include "kernels/gemv.cuh"
#include "kernels/rope.cuh"
#include "tests/common/compare.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;
using ::specgen::testing::ExpectAllWithin;

struct Case {
  int n, n_past, heads, kv_heads, d;
  ElemType kv;
  bool tree;
};

std::vector<uint8_t> RandomTree(std::mt19937_64& rng, int n) {
  // Node b's parent is a random earlier node (or the prefix); a node sees itself and its ancestors.
  std::vector<int> parent(n);
  std::vector<uint8_t> mask(size_t(n) * n, 0);
  for (int b = 0; b < n; ++b) {
    parent[b] = b == 0 ? -1 : std::uniform_int_distribution<int>(-1, b - 1)(rng);
    for (int a = b; a >= 0; a = parent[a]) mask[size_t(b) * n + a] = 1;
  }
  return mask;
}

// A 16-bit cache's bits for `x` (kF16 or kBF16), and x replaced by the values they hold, so that the
// fp64 references read what the kernels read.
std::vector<uint16_t> ToCacheBits(ElemType kv, std::vector<float>* x) {
  if (kv == ElemType::kF32) return {};
  std::vector<uint16_t> bits = kv == ElemType::kF16 ? testing::ToF16(*x) : testing::ToBf16(*x);
  *x = kv == ElemType::kF16 ? testing::F16Values(bits) : testing::Bf16Values(bits);
  return bits;
}

void CheckAttention(const Case& c) {
  auto rng = testing::FreshRng();
  const int keys = c.n_past + c.n, g = c.heads / c.kv_heads;
  const auto q = testing::RandomNormal(rng, size_t(c.n) * c.heads * c.d);
  auto k = testing::RandomNormal(rng, size_t(keys) * c.kv_heads * c.d);
  auto v = testing::RandomNormal(rng, size_t(keys) * c.kv_heads * c.d);
  // The reference uses the same 16-bit values the cache holds.
  const std::vector<uint16_t> kb = ToCacheBits(c.kv, &k), vb = ToCacheBits(c.kv, &v);
  const auto mask = c.tree ? RandomTree(rng, c.n) : std::vector<uint8_t>();
  const double scale = 1.0 / std::sqrt(double(c.d));
  std::vector<double> ref(q.size()), tol(q.size());
  for (int i = 0; i < c.n; ++i)
    for (int h = 0; h < c.heads; ++h) {
      const int kh = h / g;
      std::vector<double> s;
      std::vector<int> js;
      double max_dot_err = 0, max_v = 0;
      for (int j = 0; j < keys; ++j) {
        const int b = j - c.n_past;
        const bool vis = j < c.n_past || (c.tree ? mask[size_t(i) * c.n + b] != 0 : b <= i);
        if (!vis) continue;
        double dot = 0, adot = 0;
        for (int e = 0; e < c.d; ++e) {
          const double p = double(q[(size_t(i) * c.heads + h) * c.d + e]) *
                           k[(size_t(j) * c.kv_heads + kh) * c.d + e];
          dot += p;
          adot += std::fabs(p);
        }
        s.push_back(dot * scale);
        js.push_back(j);
        max_dot_err = std::max(max_dot_err, c.d * 0x1p-24 * adot * scale);
      }
      double m = -INFINITY, l = 0;
      for (double x : s) m = std::max(m, x);
      for (double x : s) l += std::exp(x - m);
      for (int e = 0; e < c.d; ++e) {
        double acc = 0;
        for (size_t t = 0; t < s.size(); ++t) {
          const double ve = v[(size_t(js[t]) * c.kv_heads + kh) * c.d + e];
          acc += std::exp(s[t] - m) / l * ve;
          max_v = std::max(max_v, std::fabs(ve));
        }
        ref[(size_t(i) * c.heads + h) * c.d + e] = acc;
      }
      // Tolerance: each score errs by <= d u sum|q k| scale (fp32 dot, any order) plus expf's and
      // the rescalings' few ulps, so each weight p_j errs relatively by <= 2 (score err + 8u); the
      // fp32 sums of p_j and p_j v_j over L keys add <= 2 (L + 8) u relative. Output = sum p_j v_j /
      // sum p_j, so |err| <= max|v| (2 (score err + 8u) + 2 (L + 8) u).
      const double t = max_v * (2 * (max_dot_err + 8 * 0x1p-24) + 2 * (s.size() + 8) * 0x1p-24);
      for (int e = 0; e < c.d; ++e) tol[(size_t(i) * c.heads + h) * c.d + e] = t;
    }
  DeviceBuffer<float> dq(q), dout(q.size()), dk32(k), dv32(v);
  DeviceBuffer<uint16_t> dk16(kb), dv16(vb);
  DeviceBuffer<uint8_t> dmask(mask);
  const size_t ws_bytes = AttentionWorkspaceBytes(c.n, c.heads, keys, c.d);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  const void* kp = c.kv == ElemType::kF32 ? static_cast<const void*>(dk32.get()) : dk16.get();
  const void* vp = c.kv == ElemType::kF32 ? static_cast<const void*>(dv32.get()) : dv16.get();
  CUDA_OK(LaunchAttention(dq.get(), kp, vp, c.kv, c.tree ? dmask.get() : nullptr, dout.get(), c.n,
                          c.n_past, c.heads, c.kv_heads, c.d, float(scale), ws.get(), ws_bytes,
                          nullptr));
  const auto got = dout.Download();
  ExpectAllWithin(got, ref, tol,
                  "attention n=" + std::to_string(c.n) + " past=" + std::to_string(c.n_past) +
                      (c.tree ? " tree" : " causal"));
  // Batch invariance (causal): query i alone, with the cache holding slots < n_past + i + 1, gives
  // the same bits.
  if (!c.tree) {
    for (int i : {0, c.n - 1}) {
      dout.Poison();
      CUDA_OK(LaunchAttention(dq.get() + size_t(i) * c.heads * c.d, kp, vp, c.kv, nullptr,
                              dout.get(), 1, c.n_past + i, c.heads, c.kv_heads, c.d, float(scale),
                              ws.get(), ws_bytes, nullptr));
      const auto one = dout.Download();
      ASSERT_EQ(std::memcmp(one.data(), got.data() + size_t(i) * c.heads * c.d,
                            sizeof(float) * c.heads * c.d),
                0)
          << "query " << i << " differs alone vs in a batch of " << c.n;
    }
  }
}

// The one choice of kernel the backend and the graphed draft both follow (no device needed).
TEST(AttentionChoice, EachKernelTakesItsShapes) {
  const auto choose = [](int head_dim, int heads, int kv_heads, int queries, bool masked, bool aligned) {
    AttentionProblem p;
    p.head_dim = head_dim;
    p.heads = heads;
    p.kv_heads = kv_heads;
    p.queries = queries;
    p.masked = masked;
    p.caches_aligned = aligned;
    return ChooseAttentionKernel(p);
  };
  // A decode step or a verify pass of up to kDecodeMaxQueries, head sizes 32..256.
  EXPECT_EQ(choose(128, 16, 8, 1, false, true), AttentionKernel::kDecode);
  EXPECT_EQ(choose(32, 4, 2, kDecodeMaxQueries, false, true), AttentionKernel::kDecode);
  // One query more, a mask or unaligned caches: the chunked kernel where it takes the head size...
  EXPECT_EQ(choose(128, 16, 8, kDecodeMaxQueries + 1, false, true), AttentionKernel::kChunked);
  EXPECT_EQ(choose(64, 16, 8, 5, true, true), AttentionKernel::kChunked);
  EXPECT_EQ(choose(256, 16, 8, 1, false, false), AttentionKernel::kChunked);
  // ... else the simple one (head_dim 32, a group past kAttentionMaxGroup, a prefill past 64 queries).
  EXPECT_EQ(choose(32, 4, 2, 1, false, false), AttentionKernel::kSimple);
  EXPECT_EQ(choose(96, 8, 8, 1, false, true), AttentionKernel::kSimple);
  EXPECT_EQ(choose(128, 16 * kAttentionMaxGroup, 8, 1, false, true), AttentionKernel::kSimple);
  EXPECT_EQ(choose(128, 16, 8, kAttentionMaxQueries + 1, false, true), AttentionKernel::kSimple);
}

TEST(AttentionGpu, CausalGqaFp32AndBf16) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckAttention({1, 700, 16, 4, 128, ElemType::kF32, false});   // decode
  CheckAttention({5, 300, 8, 8, 64, ElemType::kBF16, false});    // verify k+1 = 5, MHA
  CheckAttention({64, 0, 8, 1, 128, ElemType::kF32, false});     // prefill chunk, MQA
  CheckAttention({9, 257, 16, 2, 256, ElemType::kBF16, false});  // head_dim 256, group 8
  CheckAttention({5, 300, 16, 8, 128, ElemType::kF16, false});   // f16 cache (--cache-type f16)
  CheckAttention({17, 40, 8, 2, 64, ElemType::kF16, false});     // f16, past the decode kernel's 16
}

TEST(AttentionGpu, TreeMask) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckAttention({12, 100, 8, 2, 128, ElemType::kF32, true});
  CheckAttention({33, 511, 4, 4, 64, ElemType::kBF16, true});
  CheckAttention({12, 100, 8, 2, 256, ElemType::kF16, true});
}

// LaunchDecodeAttention: one query seeing slots 0..n_past, against the same CPU reference and
// tolerance as above; deterministic (a relaunch gives the same bits, so the workspace counters are
// left at zero) and independent of the max_past bound the grid is sized for (graph replays use the
// bound, eager launches the same one; a different bound must not change a bit either).
void CheckDecodeAttention(int n_past, int heads, int kv_heads, int d, ElemType kv) {
  auto rng = testing::FreshRng();
  const int keys = n_past + 1, g = heads / kv_heads;
  const int max_past = n_past + 300;  // capacity past the keys: the extra slots are never read
  const auto q = testing::RandomNormal(rng, size_t(heads) * d);
  auto k = testing::RandomNormal(rng, size_t(max_past + 1) * kv_heads * d);
  auto v = testing::RandomNormal(rng, size_t(max_past + 1) * kv_heads * d);
  const std::vector<uint16_t> kb = ToCacheBits(kv, &k), vb = ToCacheBits(kv, &v);
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> ref(q.size()), tol(q.size());
  for (int h = 0; h < heads; ++h) {
    const int kh = h / g;
    std::vector<double> s(keys);
    double max_dot_err = 0, max_v = 0, m = -INFINITY, l = 0;
    for (int j = 0; j < keys; ++j) {
      double dot = 0, adot = 0;
      for (int e = 0; e < d; ++e) {
        const double p = double(q[size_t(h) * d + e]) * k[(size_t(j) * kv_heads + kh) * d + e];
        dot += p;
        adot += std::fabs(p);
      }
      s[j] = dot * scale;
      m = std::max(m, s[j]);
      max_dot_err = std::max(max_dot_err, d * 0x1p-24 * adot * scale);
    }
    for (double x : s) l += std::exp(x - m);
    for (int e = 0; e < d; ++e) {
      double acc = 0;
      for (int j = 0; j < keys; ++j) {
        const double ve = v[(size_t(j) * kv_heads + kh) * d + e];
        acc += std::exp(s[j] - m) / l * ve;
        max_v = std::max(max_v, std::fabs(ve));
      }
      ref[size_t(h) * d + e] = acc;
    }
    // As CheckAttention; the online softmax adds one rescale per batch of 4-16 keys and per merge
    // level (warps, chunks): at most L / 4 + 2 more roundings of each sum, inside 2 (L + 8) u again
    // with L replaced by 2 L.
    const double t = max_v * (2 * (max_dot_err + 8 * 0x1p-24) + 2 * (2 * keys + 8) * 0x1p-24);
    for (int e = 0; e < d; ++e) tol[size_t(h) * d + e] = t;
  }
  DeviceBuffer<float> dq(q), dout(q.size()), dk32(k), dv32(v);
  DeviceBuffer<uint16_t> dk16(kb), dv16(vb);
  DeviceBuffer<int32_t> dpast(std::vector<int32_t>{n_past});
  const void* kp = kv == ElemType::kF32 ? static_cast<const void*>(dk32.get()) : dk16.get();
  const void* vp = kv == ElemType::kF32 ? static_cast<const void*>(dv32.get()) : dv16.get();
  const size_t ws_bytes = DecodeAttentionWorkspaceBytes(heads, kv_heads, max_past + 1, d);
  DeviceBuffer<uint8_t> ws(std::vector<uint8_t>(ws_bytes, 0));  // counters start at zero
  const std::string what = "decode attention past=" + std::to_string(n_past) + " heads=" +
                           std::to_string(heads) + "/" + std::to_string(kv_heads) + " d=" +
                           std::to_string(d);
  CUDA_OK(LaunchDecodeAttention(dq.get(), kp, vp, kv, dout.get(), max_past, heads, kv_heads, d,
                                float(scale), ws.get(), ws_bytes, dpast.get(), nullptr, false));
  const auto got = dout.Download();
  ExpectAllWithin(got, ref, tol, what);
  // Relaunch, then the bound lowered to n_past itself without the device length: the same bits each
  // time.
  for (int run = 0; run < 2; ++run) {
    dout.Poison();
    if (run == 0) {
      CUDA_OK(LaunchDecodeAttention(dq.get(), kp, vp, kv, dout.get(), max_past, heads, kv_heads, d,
                                    float(scale), ws.get(), ws_bytes, dpast.get(), nullptr, false));
    } else {
      CUDA_OK(LaunchDecodeAttention(dq.get(), kp, vp, kv, dout.get(), n_past, heads, kv_heads, d,
                                    float(scale), ws.get(), ws_bytes, nullptr, nullptr, false));
    }
    const auto again = dout.Download();
    ASSERT_EQ(std::memcmp(again.data(), got.data(), sizeof(float) * got.size()), 0)
        << what << ": run " << run << " differs from the first";
  }
}

// The fused prologue (LaunchDecodeAttention with a DecodeRopeAppend) against LaunchQkNormRopeAppend
// followed by LaunchDecodeAttention on a copy of the same caches: the same bits in the output and in
// every cache row (the new slot included), so nothing downstream can tell the paths apart.
// A KV cache of one type on the device, filled from fp32 values (rounded to a 16-bit type).
struct TestCache {
  TestCache(ElemType kv, std::vector<float> values)
      : kv(kv), f32(kv == ElemType::kF32 ? values : std::vector<float>()), bits(ToCacheBits(kv, &values)) {}
  void* get() const { return kv == ElemType::kF32 ? static_cast<void*>(f32.get()) : static_cast<void*>(bits.get()); }
  // The cache's bytes, whatever its type.
  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> out;
    if (kv == ElemType::kF32) {
      const auto x = f32.Download();
      out.resize(x.size() * sizeof(float));
      std::memcpy(out.data(), x.data(), out.size());
    } else {
      const auto x = bits.Download();
      out.resize(x.size() * sizeof(uint16_t));
      std::memcpy(out.data(), x.data(), out.size());
    }
    return out;
  }
  ElemType kv;
  DeviceBuffer<float> f32;
  DeviceBuffer<uint16_t> bits;
};

void CheckFusedRopeAppend(int n_past, int heads, int kv_heads, int d, bool qk_norm, RopeStyle style,
                          ElemType kv = ElemType::kF32) {
  auto rng = testing::FreshRng();
  const int max_past = n_past + 40, capacity = max_past + 1;
  const auto q_raw = testing::RandomNormal(rng, size_t(heads) * d);
  const auto k_raw = testing::RandomNormal(rng, size_t(kv_heads) * d);
  const auto v_raw = testing::RandomNormal(rng, size_t(kv_heads) * d);
  const auto cache_k = testing::RandomNormal(rng, size_t(capacity) * kv_heads * d);
  const auto cache_v = testing::RandomNormal(rng, size_t(capacity) * kv_heads * d);
  auto norm_w = testing::ToBf16(testing::RandomNormal(rng, size_t(d)));
  std::vector<uint16_t> k_norm_w = testing::ToBf16(testing::RandomNormal(rng, size_t(d)));
  DeviceBuffer<float> dq(q_raw), dk(k_raw), dv(v_raw), dq_rot(q_raw.size());
  TestCache kc_a(kv, cache_k), vc_a(kv, cache_v), kc_b(kv, cache_k), vc_b(kv, cache_v);
  DeviceBuffer<uint16_t> dqn(norm_w), dkn(k_norm_w);
  DeviceBuffer<float2> table(size_t(capacity) * d / 2);
  CUDA_OK(LaunchRopeTable(table.get(), capacity, d, 1e6, nullptr));
  DeviceBuffer<DecodeState> state(1);
  CUDA_OK(LaunchSetDecodeState(state.get(), nullptr, 0, n_past, nullptr));
  DeviceBuffer<int32_t> dpast(std::vector<int32_t>{n_past});
  const size_t ws_bytes = DecodeAttentionWorkspaceBytes(heads, kv_heads, max_past + 1, d);
  DeviceBuffer<uint8_t> ws_a(std::vector<uint8_t>(ws_bytes, 0)), ws_b(std::vector<uint8_t>(ws_bytes, 0));
  DeviceBuffer<float> out_a(q_raw.size()), out_b(q_raw.size());
  const float scale = 1.f / std::sqrt(float(d));
  const void* qn = qk_norm ? static_cast<const void*>(dqn.get()) : nullptr;
  const void* kn = qk_norm ? static_cast<const void*>(dkn.get()) : nullptr;
  CUDA_OK(LaunchQkNormRopeAppend(dq.get(), dk.get(), dv.get(), dq_rot.get(), qn, kn, ElemType::kBF16, 1e-6f,
                                 kc_a.get(), vc_a.get(), kv, state.get(), heads, kv_heads, d, table.get(), style,
                                 nullptr, false));
  CUDA_OK(LaunchDecodeAttention(dq_rot.get(), kc_a.get(), vc_a.get(), kv, out_a.get(), max_past,
                                heads, kv_heads, d, scale, ws_a.get(), ws_bytes, dpast.get(), nullptr, false));
  DecodeRopeAppend rope;
  rope.q_raw = dq.get();
  rope.k_raw = dk.get();
  rope.v_raw = dv.get();
  rope.q_norm = qn;
  rope.k_norm = kn;
  rope.norm_type = ElemType::kBF16;
  rope.eps = 1e-6f;
  rope.rope_table = table.get();
  rope.style = style;
  CUDA_OK(LaunchDecodeAttention(rope, kc_b.get(), vc_b.get(), kv, out_b.get(), max_past, heads, kv_heads, d,
                                scale, ws_b.get(), ws_bytes, dpast.get(), nullptr, false));
  const std::string what = "fused decode attention past=" + std::to_string(n_past) + " heads=" +
                           std::to_string(heads) + "/" + std::to_string(kv_heads) + " d=" + std::to_string(d) +
                           (qk_norm ? " qk-norm" : "") + (style == RopeStyle::kRotateHalf ? " half" : " pairs") +
                           " kv type " + std::to_string(int(kv));
  const auto a = out_a.Download(), b = out_b.Download();
  for (float x : b) ASSERT_TRUE(std::isfinite(x)) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()), 0) << what << ": outputs differ";
  EXPECT_EQ(kc_a.Bytes(), kc_b.Bytes()) << what << ": K caches differ";
  EXPECT_EQ(vc_a.Bytes(), vc_b.Bytes()) << what << ": V caches differ";
  // The new slot was written (not left as the random row it started as), and holds the rounded values:
  // the V row is v_raw as the cache's type stores it (the CPU's rounding, engine/core/half.h).
  const size_t row_bytes = size_t(kv_heads) * d * ElemBytes(kv);
  const auto kc = kc_b.Bytes(), kc_init = TestCache(kv, cache_k).Bytes(), vc = vc_b.Bytes();
  EXPECT_NE(std::memcmp(kc.data() + n_past * row_bytes, kc_init.data() + n_past * row_bytes, row_bytes), 0) << what;
  const TestCache v_want(kv, v_raw);
  EXPECT_EQ(std::memcmp(vc.data() + n_past * row_bytes, v_want.Bytes().data(), row_bytes), 0)
      << what << ": the new V row is not v rounded to the cache's type";
}

TEST(AttentionGpu, DecodeWithFusedRopeAppend) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckFusedRopeAppend(31, 16, 8, 128, true, RopeStyle::kRotateHalf);    // the draft's shape, ctx 32
  CheckFusedRopeAppend(256, 16, 8, 128, true, RopeStyle::kRotateHalf);   // the new slot opens a 5th chunk
  CheckFusedRopeAppend(1900, 16, 8, 128, false, RopeStyle::kRotateHalf); // 15 chunks, no q/k norm
  CheckFusedRopeAppend(70, 8, 8, 64, true, RopeStyle::kInterleaved);     // MHA, pairwise RoPE
  CheckFusedRopeAppend(300, 16, 2, 256, true, RopeStyle::kRotateHalf);   // group 8, head_dim 256
  CheckFusedRopeAppend(63, 4, 2, 32, true, RopeStyle::kRotateHalf);      // the bundled draft's heads
  CheckFusedRopeAppend(31, 16, 8, 128, true, RopeStyle::kRotateHalf, ElemType::kF16);   // --cache-type f16
  CheckFusedRopeAppend(300, 16, 2, 256, true, RopeStyle::kRotateHalf, ElemType::kF16);  // merged chunks
  CheckFusedRopeAppend(63, 4, 2, 32, true, RopeStyle::kRotateHalf, ElemType::kBF16);    // bf16, head_dim 32
}

// Each of a batch's `queries` outputs (got: [queries, heads * d]) against LaunchDecodeAttention of
// that query alone at its own position (n_past + t), bit for bit: the batch kernel's promise.
struct DecodeCase {
  const float* q;  // device, [queries, heads * d]
  const void* k;
  const void* v;
  ElemType kv;
  int n_past, heads, kv_heads, d;
};
void ExpectEqualsSingleQueries(const DecodeCase& c, int queries, const std::vector<float>& got, size_t ws_bytes,
                               const std::string& what) {
  const size_t row = size_t(c.heads) * c.d;
  DeviceBuffer<float> done(row);
  DeviceBuffer<uint8_t> ws_one(std::vector<uint8_t>(ws_bytes, 0));
  const float scale = 1.f / std::sqrt(float(c.d));
  for (int t = 0; t < queries; ++t) {
    done.Poison();
    CUDA_OK(LaunchDecodeAttention(c.q + size_t(t) * row, c.k, c.v, c.kv, done.get(), c.n_past + t, c.heads,
                                  c.kv_heads, c.d, scale, ws_one.get(), ws_bytes, nullptr, nullptr, false));
    const auto one = done.Download();
    EXPECT_EQ(std::memcmp(one.data(), got.data() + size_t(t) * row, sizeof(float) * row), 0)
        << what << ": query " << t << " differs from its single-query launch";
  }
}

// LaunchDecodeAttentionBatch (the Backend's attention for 1..16 causal queries) against single-query
// launches, one per query t with n_past + t (each checked against the CPU reference by
// DecodeSingleQuery): the same bits, so a position's output does not depend on the batch it is in.
void CheckDecodeBatch(int n_past, int queries, int heads, int kv_heads, int d, ElemType kv) {
  auto rng = testing::FreshRng();
  const int capacity = n_past + queries;
  const size_t row = size_t(heads) * d;
  const auto q = testing::RandomNormal(rng, size_t(queries) * row);
  auto k = testing::RandomNormal(rng, size_t(capacity) * kv_heads * d);
  auto v = testing::RandomNormal(rng, size_t(capacity) * kv_heads * d);
  const auto kb = ToCacheBits(kv, &k), vb = ToCacheBits(kv, &v);
  DeviceBuffer<float> dq(q), dout(q.size()), dk32(k), dv32(v);
  DeviceBuffer<uint16_t> dk16(kb), dv16(vb);
  const void* kp = kv == ElemType::kF32 ? static_cast<const void*>(dk32.get()) : dk16.get();
  const void* vp = kv == ElemType::kF32 ? static_cast<const void*>(dv32.get()) : dv16.get();
  const float scale = 1.f / std::sqrt(float(d));
  const size_t ws_bytes = DecodeAttentionWorkspaceBytes(heads, kv_heads, capacity, d, queries);
  DeviceBuffer<uint8_t> ws(std::vector<uint8_t>(ws_bytes, 0));
  const std::string what = "decode batch past=" + std::to_string(n_past) + " queries=" + std::to_string(queries) +
                           " heads=" + std::to_string(heads) + "/" + std::to_string(kv_heads) + " d=" +
                           std::to_string(d);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {  // the second launch finds the counters the first left at zero
    dout.Poison();
    CUDA_OK(LaunchDecodeAttentionBatch(dq.get(), kp, vp, kv, dout.get(), n_past, queries, heads, kv_heads, d,
                                       scale, ws.get(), ws_bytes, nullptr));
    const auto got = dout.Download();
    for (float x : got) ASSERT_TRUE(std::isfinite(x)) << what;
    if (run == 1) {
      EXPECT_EQ(std::memcmp(got.data(), first.data(), sizeof(float) * got.size()), 0) << what << ": relaunch";
    }
    first = got;
  }
  ExpectEqualsSingleQueries({dq.get(), kp, vp, kv, n_past, heads, kv_heads, d}, queries, first, ws_bytes, what);
}

TEST(AttentionGpu, DecodeBatchEqualsSingleQueries) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckDecodeBatch(31, 5, 16, 8, 128, ElemType::kF32);     // a k = 4 verification at ctx 32
  CheckDecodeBatch(0, 9, 16, 8, 128, ElemType::kF32);      // the first query sees only its own key
  CheckDecodeBatch(120, 9, 16, 8, 128, ElemType::kF32);    // from one chunk to three within the batch
  CheckDecodeBatch(1020, 16, 16, 8, 128, ElemType::kF32);  // across the 1024-slot switch of chunk size
  CheckDecodeBatch(300, 4, 8, 8, 64, ElemType::kBF16);     // MHA, bf16 cache
  CheckDecodeBatch(70, 3, 16, 2, 256, ElemType::kF32);     // group 8, head_dim 256
  CheckDecodeBatch(40, 1, 32, 4, 128, ElemType::kF32);     // one query: the single-query kernel's case
  CheckDecodeBatch(250, 5, 4, 2, 32, ElemType::kF32);      // head_dim 32, across its 256-slot chunks
  CheckDecodeBatch(300, 5, 16, 8, 128, ElemType::kF16);    // f16 cache
  CheckDecodeBatch(250, 5, 4, 2, 32, ElemType::kF16);      // f16, head_dim 32 (one element a lane)
}

// The batch with its length read from the device, as a graph-captured verification would launch it
// (grid and workspace sized for `bound`, the longest cache): the same bits as the launch given the
// length on the host, for every query, and again on a second launch (the counters left at zero).
void CheckDecodeBatchDeviceLength(int n_past, int bound, int queries, ElemType kv) {
  auto rng = testing::FreshRng();
  const int heads = 16, kv_heads = 8, d = 128, capacity = bound + queries;
  const auto q = testing::RandomNormal(rng, size_t(queries) * heads * d);
  const auto k = testing::RandomNormal(rng, size_t(capacity) * kv_heads * d);
  const auto v = testing::RandomNormal(rng, size_t(capacity) * kv_heads * d);
  DeviceBuffer<float> dq(q), dk32(k), dv32(v), host_out(q.size()), dev_out(q.size());
  DeviceBuffer<uint16_t> dk16(testing::ToBf16(k)), dv16(testing::ToBf16(v));
  const void* kp = kv == ElemType::kF32 ? static_cast<const void*>(dk32.get()) : dk16.get();
  const void* vp = kv == ElemType::kF32 ? static_cast<const void*>(dv32.get()) : dv16.get();
  DeviceBuffer<int32_t> d_len(std::vector<int32_t>{n_past});
  const float scale = 1.f / std::sqrt(float(d));
  const size_t host_ws = DecodeAttentionWorkspaceBytes(heads, kv_heads, n_past + queries, d, queries);
  const size_t dev_ws = DecodeAttentionWorkspaceBytes(heads, kv_heads, bound + queries, d, queries);
  DeviceBuffer<uint8_t> ws1(std::vector<uint8_t>(host_ws, 0)), ws2(std::vector<uint8_t>(dev_ws, 0));
  const std::string what = "device length " + std::to_string(n_past) + " of " + std::to_string(bound) +
                           ", queries " + std::to_string(queries);
  CUDA_OK(LaunchDecodeAttentionBatch(dq.get(), kp, vp, kv, host_out.get(), n_past, queries, heads, kv_heads, d,
                                     scale, ws1.get(), host_ws, nullptr));
  const auto want = host_out.Download();
  for (int run = 0; run < 2; ++run) {
    dev_out.Poison();
    CUDA_OK(LaunchDecodeAttentionBatch(dq.get(), kp, vp, kv, dev_out.get(), bound, queries, heads, kv_heads, d,
                                       scale, ws2.get(), dev_ws, nullptr, d_len.get()));
    const auto got = dev_out.Download();
    for (float x : got) ASSERT_TRUE(std::isfinite(x)) << what;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * got.size()), 0) << what << ", run " << run;
  }
}

TEST(AttentionGpu, DecodeBatchTakesItsLengthFromTheDevice) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckDecodeBatchDeviceLength(31, 31, 5, ElemType::kF32);     // the bound is the length
  CheckDecodeBatchDeviceLength(31, 500, 5, ElemType::kF32);    // a grid for 500: most blocks return
  CheckDecodeBatchDeviceLength(120, 1100, 9, ElemType::kF32);  // a bound past the 1024-slot chunk switch
  CheckDecodeBatchDeviceLength(0, 64, 16, ElemType::kBF16);    // the first query sees only its own key
}

// LaunchNormRopeStore with the batch's base position read from the device (positions base + t, cache
// rows base + t) against the launch given them on the host: the same bits in q, k and both caches.
TEST(AttentionGpu, NormRopeStoreTakesItsBaseFromTheDevice) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  const int n = 5, heads = 16, kv_heads = 8, d = 128, base = 37, capacity = 64;
  const auto q = testing::RandomNormal(rng, size_t(n) * heads * d);
  const auto k = testing::RandomNormal(rng, size_t(n) * kv_heads * d);
  const auto v = testing::RandomNormal(rng, size_t(n) * kv_heads * d);
  const auto cache = testing::RandomNormal(rng, size_t(capacity) * kv_heads * d);
  DeviceBuffer<uint16_t> qn(testing::ToBf16(testing::RandomNormal(rng, d))), kn(testing::ToBf16(testing::RandomNormal(rng, d)));
  std::vector<int32_t> positions(n);
  for (int t = 0; t < n; ++t) positions[t] = base + t;
  DeviceBuffer<int32_t> dpos(positions), dbase(std::vector<int32_t>{base});
  std::vector<std::vector<float>> out[2];
  for (int device_base = 0; device_base < 2; ++device_base) {
    DeviceBuffer<float> dq(q), dk(k), dv(v), kc(cache), vc(cache);
    CUDA_OK(LaunchNormRopeStore(dq.get(), dk.get(), dv.get(), qn.get(), kn.get(), ElemType::kBF16, 1e-6f,
                                device_base ? nullptr : dpos.get(), n, heads, kv_heads, d, 1e6,
                                RopeStyle::kRotateHalf, kc.get(), vc.get(), device_base ? 0 : base, nullptr,
                                device_base ? dbase.get() : nullptr));
    out[device_base] = {dq.Download(), dk.Download(), kc.Download(), vc.Download()};
  }
  const char* names[] = {"q", "k", "k cache", "v cache"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(std::memcmp(out[0][i].data(), out[1][i].data(), sizeof(float) * out[0][i].size()), 0) << names[i];
  }
  // (The host launch's rows moved: the check would pass for a kernel ignoring both.)
  EXPECT_NE(std::memcmp(out[0][2].data(), cache.data(), sizeof(float) * cache.size()), 0);
}

// One workspace through batches of changing size at a context of several chunks (merged through the
// per-(query, head) counters, which every launch must find at zero): 5, 1, 5, 3, 16 queries, each query
// against its single-query launch. (Counters placed after a batch-sized count had a batch of 1 lay its
// partials over the counters the next batch of 5 used.)
TEST(AttentionGpu, DecodeBatchSizesShareOneWorkspace) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  const int heads = 16, kv_heads = 8, d = 128, n_past = 300, capacity = n_past + kDecodeMaxQueries;
  const size_t row = size_t(heads) * d;
  const auto k = testing::RandomNormal(rng, size_t(capacity) * kv_heads * d);
  const auto v = testing::RandomNormal(rng, size_t(capacity) * kv_heads * d);
  const auto q = testing::RandomNormal(rng, size_t(kDecodeMaxQueries) * row);
  DeviceBuffer<float> dq(q), dk(k), dv(v), dout(q.size());
  const float scale = 1.f / std::sqrt(float(d));
  const size_t ws_bytes = DecodeAttentionWorkspaceBytes(heads, kv_heads, capacity, d, kDecodeMaxQueries);
  DeviceBuffer<uint8_t> ws(std::vector<uint8_t>(ws_bytes, 0));
  for (int queries : {5, 1, 5, 3, 16}) {
    dout.Poison();
    CUDA_OK(LaunchDecodeAttentionBatch(dq.get(), dk.get(), dv.get(), ElemType::kF32, dout.get(), n_past, queries,
                                       heads, kv_heads, d, scale, ws.get(), ws_bytes, nullptr));
    ExpectEqualsSingleQueries({dq.get(), dk.get(), dv.get(), ElemType::kF32, n_past, heads, kv_heads, d}, queries,
                              dout.Download(), ws_bytes, "batch of " + std::to_string(queries));
  }
}

// Under programmatic dependent launch the batch kernel starts while the kernels before it still run
// (it loads the cache rows of earlier positions early): the rows of its own positions, stored by the
// kernel just before it (LaunchNormRopeStore, as in the Transformer's layer), must be read only after
// that kernel's end. A GEMV of one block (8 rows of 2^20 inputs: one multiprocessor streams 16 MB)
// ahead of the store keeps the window open; the new rows hold NaN until the store writes them. The
// result must equal, bit for bit, a launch made once the stream is idle.
TEST(AttentionGpu, DecodeBatchReadsItsNewRowsAfterTheStore) {
  SPECGEN_SKIP_WITHOUT_GPU();
  if (!ProgrammaticLaunchSupported(0)) GTEST_SKIP() << "no programmatic dependent launch on device 0";
  auto rng = testing::FreshRng();
  const int heads = 16, kv_heads = 8, d = 128, n_past = 31, queries = 5, capacity = n_past + queries;
  const size_t row = size_t(heads) * d, kv_row = size_t(kv_heads) * d;
  auto cache_init = testing::RandomNormal(rng, size_t(capacity) * kv_row);
  for (size_t i = size_t(n_past) * kv_row; i < cache_init.size(); ++i) cache_init[i] = std::nanf("");
  const auto q_init = testing::RandomNormal(rng, queries * row), k_init = testing::RandomNormal(rng, queries * kv_row);
  DeviceBuffer<float> kc(cache_init.size()), vc(cache_init.size()), q(q_init.size()), k(k_init.size()),
      v(testing::RandomNormal(rng, queries * kv_row));
  std::vector<int32_t> pos(queries);
  for (int t = 0; t < queries; ++t) pos[t] = n_past + t;
  DeviceBuffer<int32_t> dpos(pos);
  const int gemv_rows = 8, gemv_in = 1 << 20;
  DeviceBuffer<uint16_t> w(size_t(gemv_rows) * gemv_in);
  CUDA_OK(cudaMemset(w.get(), 0x3C, size_t(gemv_rows) * gemv_in * sizeof(uint16_t)));
  DeviceBuffer<float> x(testing::RandomNormal(rng, gemv_in)), y(gemv_rows);
  const float scale = 1.f / std::sqrt(float(d));
  const size_t ws_bytes = DecodeAttentionWorkspaceBytes(heads, kv_heads, capacity, d, queries);
  DeviceBuffer<uint8_t> ws(std::vector<uint8_t>(ws_bytes, 0));
  DeviceBuffer<float> out(queries * row), idle(queries * row);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Round 0 loads the kernels (lazy module loading); round 1 is the one checked.
  for (int round = 0; round < 2; ++round) {
    kc.Upload(cache_init);  // (the store rotates q and k in place and fills the new rows)
    vc.Upload(cache_init);
    q.Upload(q_init);
    k.Upload(k_init);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(LaunchGemv(w.get(), ElemType::kBF16, x.get(), y.get(), 1, gemv_rows, gemv_in, stream));
    CUDA_OK(LaunchNormRopeStore(q.get(), k.get(), v.get(), nullptr, nullptr, ElemType::kF32, 1e-6f, dpos.get(),
                                queries, heads, kv_heads, d, 1e6, RopeStyle::kRotateHalf, kc.get(), vc.get(),
                                n_past, stream));
    CUDA_OK(LaunchDecodeAttentionBatch(q.get(), kc.get(), vc.get(), ElemType::kF32, out.get(), n_past, queries,
                                       heads, kv_heads, d, scale, ws.get(), ws_bytes, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
  }
  // The stream idle: the same launch over the stored rows (and the rotated queries).
  CUDA_OK(LaunchDecodeAttentionBatch(q.get(), kc.get(), vc.get(), ElemType::kF32, idle.get(), n_past, queries, heads,
                                     kv_heads, d, scale, ws.get(), ws_bytes, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  const auto got = out.Download(), want = idle.Download();
  for (float f : want) ASSERT_TRUE(std::isfinite(f)) << "the store left a new row unwritten";
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " read a new row before the store wrote it";
  }
  EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * got.size()), 0);
}

TEST(AttentionGpu, DecodeSingleQuery) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckDecodeAttention(0, 16, 8, 128, ElemType::kF32);     // only its own key
  CheckDecodeAttention(31, 16, 8, 128, ElemType::kF32);    // the draft's shape, ctx 32
  CheckDecodeAttention(64, 16, 8, 128, ElemType::kF32);    // 65 keys: one chunk, a second batch a warp
  CheckDecodeAttention(127, 16, 8, 128, ElemType::kF32);   // 128 keys: the last 2-batch single chunk
  CheckDecodeAttention(128, 16, 8, 128, ElemType::kF32);   // 129 keys: 3 chunks of 64 slots, merged
  CheckDecodeAttention(255, 16, 8, 128, ElemType::kF32);   // 256 keys: 4 full 64-slot chunks
  CheckDecodeAttention(256, 16, 8, 128, ElemType::kF32);   // one key into a 5th chunk
  CheckDecodeAttention(1023, 16, 8, 128, ElemType::kF32);  // 1024 keys: 16 chunks of one 64-slot unit
  CheckDecodeAttention(1024, 16, 8, 128, ElemType::kF32);  // 1025 keys: 9 chunks of 2 units (one partial)
  CheckDecodeAttention(1900, 16, 8, 128, ElemType::kF32);  // 15 chunks, merged by the last block
  CheckDecodeAttention(2047, 16, 8, 128, ElemType::kF32);  // 16 chunks: the most the workspace holds
  CheckDecodeAttention(700, 16, 4, 128, ElemType::kBF16);
  CheckDecodeAttention(300, 8, 8, 64, ElemType::kBF16);    // MHA, batches of 16 keys
  CheckDecodeAttention(513, 16, 2, 256, ElemType::kF32);   // group 8, head_dim 256: 9 chunks of 64
  CheckDecodeAttention(37, 4, 1, 64, ElemType::kF32);      // MQA
  CheckDecodeAttention(95, 4, 2, 32, ElemType::kF32);      // head_dim 32 (the bundled draft): one chunk
  CheckDecodeAttention(300, 4, 2, 32, ElemType::kF32);     // 301 keys: 3 chunks of 128 slots, merged
  CheckDecodeAttention(2047, 4, 2, 32, ElemType::kBF16);   // 16 chunks, bf16 cache
  CheckDecodeAttention(700, 16, 4, 128, ElemType::kF16);   // f16 cache
  CheckDecodeAttention(300, 4, 2, 32, ElemType::kF16);     // f16, head_dim 32
}

}  // namespace
}  // namespace specgen::kernels
