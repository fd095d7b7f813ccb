// Every Backend op of CudaBackend against its CPU twin (CpuBackend, the fp32 reference) on fresh random
// inputs, outputs poisoned with NaN before each op. Tolerances are derived per element, u = 2^-24:
//  - a dot product of length K summed in two different orders in fp32 differs by at most
//    2·K·u·Σ|a_i b_i| (each order is within K·u·Σ|terms| of the exact value). Both backends see the
//    same weights (bf16/f16 weights are exact in fp32), so this bounds MatMul (GEMV and f32 paths).
//  - the cuBLAS prefill path (> 16 rows, bf16 weights) also rounds x to bf16 (relative 2^-9 per term):
//    (2^-9 + 2·K·u)·Σ|w x|.
//  - RMSNorm: one sum of squares of length G (2·G·u relative), sqrt/div/mul (8u): (2G + 8)·u·|y|.
//  - RoPE: the CPU forms the angle in fp32 (pos·inv_freq, inv_freq from powf: about 4 ulps), the GPU
//    in double: angle error ≤ 8·u·pos·inv_freq ≤ 8·u·pos, moving the output by that times |x0|+|x1|;
//    plus 8u for cos/sin and the products.
//  - SwiGLU: expf differs by a few ulps between libm and CUDA: 16·u·|y| (+ denormal floor).
//  - Attention: score error δ ≤ 2·d·u·Σ|q k|·scale; softmax weights then err by ≤ 2δ + (keys + 8)·u
//    relative, so an output errs by ≤ (2δ_max + (keys + 8)·u)·max|v| (the weights sum to 1).
//  - Embed, CopyRows, GatherRows, Zero, Add: exact. ScatterAddScaled: fma vs mul+add, 2u per add.
//  - Route: identical expert ids except where two probabilities are within the softmax error
//    (4·E·u relative); weights within 8·E·u relative.
// NaN fails everywhere (the comparisons are written so that NaN is never within tolerance).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/routed_experts.h"
#include "engine/core/half.h"
#include "gtest/gtest.h"
#include "kernels/gemv.cuh"
#include "tests/common/gpu_test_env.h"
#include "tests/common/compare.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen {
namespace {

constexpr double kU = 0x1p-24;

// Seeded fresh for every test, the seed printed ($SPECGEN_TEST_SEED replays a failure's inputs).
using kernels::testing::FreshRng;
using testing::ExpectAllClose;
using testing::ExpectAllWithin;

std::vector<float> Normal(std::mt19937_64& rng, size_t n, float sd = 1.f) {
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Weight data of a dtype with the fp32 values it represents exactly.
struct HostWeight {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint16_t> half;  // f16 / bf16 bits
  std::vector<float> f32;      // exact values
  TensorView View() const {
    TensorView t;
    t.dtype = dtype;
    t.ndim = rows == 1 ? 1 : 2;
    if (t.ndim == 1) {
      t.shape[0] = cols;
    } else {
      t.shape[0] = rows;
      t.shape[1] = cols;
    }
    t.data = dtype == DType::kF32 ? static_cast<const void*>(f32.data()) : half.data();
    t.bytes = static_cast<size_t>(rows * cols) * (dtype == DType::kF32 ? 4 : 2);
    return t;
  }
};

HostWeight MakeWeight(std::mt19937_64& rng, DType dtype, int64_t rows, int64_t cols, float sd = 0.2f) {
  HostWeight w{dtype, rows, cols, {}, Normal(rng, rows * cols, sd)};
  if (dtype != DType::kF32) {
    w.half.resize(w.f32.size());
    for (size_t i = 0; i < w.f32.size(); ++i) {
      w.half[i] = dtype == DType::kBF16 ? F32ToBf16(w.f32[i]) : F32ToF16(w.f32[i]);
      w.f32[i] = dtype == DType::kBF16 ? Bf16ToF32(w.half[i]) : F16ToF32(w.half[i]);
    }
  }
  return w;
}

// Every op test runs under both small-batch reduction orders (the parameter): the ops that must equal
// each other bit for bit (fused vs plain, device- vs host-routed experts, batch sizes) must do so in
// each order.
class CudaOps : public ::testing::TestWithParam<kernels::GemvOrder> {
 protected:
  void SetUp() override {
    SPECGEN_SKIP_WITHOUT_CUDA();
    gpu_ = testing::TestCudaBackend(size_t{1} << 30, GetParam());
    ASSERT_NE(gpu_, nullptr);
    rng_ = FreshRng();
  }

  // The same contents on both backends.
  struct Pair {
    std::unique_ptr<Buffer> cpu, gpu;
  };
  Pair MakePair(int64_t rows, int64_t cols, const std::vector<float>& data) {
    Pair p{*cpu_.NewBuffer(rows, cols), *gpu_->NewBuffer(rows, cols)};
    EXPECT_TRUE(cpu_.Write(data, p.cpu.get()).ok());
    EXPECT_TRUE(gpu_->Write(data, p.gpu.get()).ok());
    return p;
  }
  Pair Poisoned(int64_t rows, int64_t cols) {
    return MakePair(rows, cols, std::vector<float>(rows * cols, std::nanf("")));
  }
  std::vector<float> Cpu(const Pair& p) {
    const float* d = CpuBackend::Data(*p.cpu);
    return std::vector<float>(d, d + p.cpu->rows() * p.cpu->cols());
  }
  std::vector<float> Gpu(const Pair& p) {
    std::vector<float> v(p.gpu->rows() * p.gpu->cols());
    EXPECT_TRUE(gpu_->Read(*p.gpu, v).ok());
    return v;
  }

  CpuBackend cpu_{1};
  std::unique_ptr<CudaBackend> gpu_;
  std::mt19937_64 rng_;
};

TEST_P(CudaOps, MatMulAllPathsAndDtypes) {
  struct Shape { int n, out, in; };
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (Shape s : {Shape{1, 96, 64}, Shape{5, 130, 256}, Shape{16, 64, 1024}, Shape{17, 72, 64},
                    Shape{40, 509, 48}, Shape{3, 33, 20}}) {
      const HostWeight hw = MakeWeight(rng_, dt, s.out, s.in);
      auto cw = cpu_.Upload(hw.View(), "w");
      auto gw = gpu_->Upload(hw.View(), "w");
      ASSERT_TRUE(cw.ok() && gw.ok()) << gw.status();
      const std::vector<float> xv = Normal(rng_, s.n * s.in);
      Pair x = MakePair(s.n, s.in, xv), y = Poisoned(s.n, s.out);
      ASSERT_TRUE(cpu_.MatMul(*x.cpu, **cw, y.cpu.get()).ok());
      ASSERT_TRUE(gpu_->MatMul(*x.gpu, **gw, y.gpu.get()).ok());
      const bool cublas = s.n > 16 && dt == DType::kBF16 && s.in % 8 == 0;
      // The tensor-core order (bf16, inputs a multiple of 32, up to 16 rows) also leaves x's split into
      // bf16 hi + lo out of each product (2^-18 of it) and may truncate its fp32 sums (a whole ulp
      // a step: the 2 in * kU below covers it).
      const bool tensor = s.n <= 16 && dt != DType::kF32 &&
                          kernels::GemvTensorOrder(GetParam(), dt == DType::kBF16 ? kernels::ElemType::kBF16
                                                                                 : kernels::ElemType::kF16,
                                                   s.in);
      std::vector<double> tol(s.n * s.out);
      for (int t = 0; t < s.n; ++t) {
        for (int o = 0; o < s.out; ++o) {
          double abs_dot = 0;
          for (int k = 0; k < s.in; ++k) abs_dot += std::fabs(double(hw.f32[o * s.in + k]) * xv[t * s.in + k]);
          tol[t * s.out + o] = ((cublas ? 0x1p-9 : 0.0) + (tensor ? 0x1p-18 : 0.0) + 2.0 * s.in * kU) * abs_dot + 1e-30;
        }
      }
      ExpectAllWithin(Gpu(y), Cpu(y), tol,
                      "MatMul " + std::string(Name(dt)) + " n=" + std::to_string(s.n) + " out=" +
                          std::to_string(s.out) + " in=" + std::to_string(s.in));
    }
  }
}

TEST_P(CudaOps, MatMulIsBatchInvariantBitForBit) {
  // The decode/verify path (<= 16 rows): a row's result must not depend on the batch size.
  for (DType dt : {DType::kBF16, DType::kF32}) {
    const int in = 512, out = 200;
    const HostWeight hw = MakeWeight(rng_, dt, out, in);
    auto gw = gpu_->Upload(hw.View(), "w");
    ASSERT_TRUE(gw.ok());
    const std::vector<float> xv = Normal(rng_, 16 * in);
    std::vector<float> full(16 * out);
    auto x16 = *gpu_->NewBuffer(16, in);
    auto y16 = *gpu_->NewBuffer(16, out);
    ASSERT_TRUE(gpu_->Write(xv, x16.get()).ok());
    ASSERT_TRUE(gpu_->MatMul(*x16, **gw, y16.get()).ok());
    ASSERT_TRUE(gpu_->Read(*y16, full).ok());
    for (int t : {0, 7, 15}) {
      auto x1 = *gpu_->NewBuffer(1, in);
      auto y1 = *gpu_->NewBuffer(1, out);
      ASSERT_TRUE(gpu_->Write(std::span<const float>(xv).subspan(t * in, in), x1.get()).ok());
      ASSERT_TRUE(gpu_->MatMul(*x1, **gw, y1.get()).ok());
      std::vector<float> one(out);
      ASSERT_TRUE(gpu_->Read(*y1, one).ok());
      for (int o = 0; o < out; ++o) ASSERT_EQ(one[o], full[t * out + o]) << Name(dt) << " row " << t;
    }
  }
}

TEST_P(CudaOps, EmbedRmsNormRopeSwiGluAddZeroCopy) {
  const int n = 7, dim = 96, vocab = 50;
  for (DType dt : {DType::kBF16, DType::kF32}) {
    const HostWeight table = MakeWeight(rng_, dt, vocab, dim, 1.0f);
    auto ct = cpu_.Upload(table.View(), "embd");
    auto gt = gpu_->Upload(table.View(), "embd");
    ASSERT_TRUE(ct.ok() && gt.ok());
    const std::vector<int32_t> ids = {3, 0, 49, 3, 17, 8, 8};
    Pair e = Poisoned(n, dim);
    ASSERT_TRUE(cpu_.Embed(**ct, ids, e.cpu.get()).ok());
    ASSERT_TRUE(gpu_->Embed(**gt, ids, e.gpu.get()).ok());
    ExpectAllClose(Gpu(e), Cpu(e), 0.0, 0.0, "Embed");
    const int32_t bad_id[1] = {vocab};
    auto one = *gpu_->NewBuffer(1, dim);
    EXPECT_FALSE(gpu_->Embed(**gt, bad_id, one.get()).ok());
  }
  // RMSNorm, whole rows and per head (group 32), in place and not.
  for (int group : {96, 32}) {
    const HostWeight w = MakeWeight(rng_, DType::kF32, 1, group, 1.0f);
    auto cw = cpu_.Upload(w.View(), "norm");
    auto gw = gpu_->Upload(w.View(), "norm");
    ASSERT_TRUE(cw.ok() && gw.ok());
    Pair x = MakePair(n, dim, Normal(rng_, n * dim, 3.0f)), y = Poisoned(n, dim);
    ASSERT_TRUE(cpu_.RmsNorm(*x.cpu, **cw, group, 1e-6f, y.cpu.get()).ok());
    ASSERT_TRUE(gpu_->RmsNorm(*x.gpu, **gw, group, 1e-6f, y.gpu.get()).ok());
    const auto ref = Cpu(y);
    std::vector<double> tol(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) tol[i] = (2.0 * group + 8) * kU * std::fabs(ref[i]) + 1e-30;
    ExpectAllWithin(Gpu(y), ref, tol, "RmsNorm group " + std::to_string(group));
  }
  // RoPE, both pairings, positions up to 4000.
  for (RopeStyle style : {RopeStyle::kRotateHalf, RopeStyle::kInterleaved}) {
    const int head_dim = 32;
    const std::vector<float> xv = Normal(rng_, n * dim);
    Pair x = MakePair(n, dim, xv);
    const std::vector<int32_t> pos = {0, 1, 2, 100, 1000, 3999, 7};
    ASSERT_TRUE(cpu_.Rope(pos, head_dim, 1e6f, style, x.cpu.get()).ok());
    ASSERT_TRUE(gpu_->Rope(pos, head_dim, 1e6f, style, x.gpu.get()).ok());
    std::vector<double> tol(n * dim);
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < dim; ++c) {
        const int h0 = c / head_dim * head_dim, j = c % head_dim, half = head_dim / 2;
        const int a = style == RopeStyle::kRotateHalf ? h0 + j % half : h0 + j / 2 * 2;
        const int b = style == RopeStyle::kRotateHalf ? a + half : a + 1;
        tol[i * dim + c] = 8.0 * kU * (1.0 + pos[i]) * (std::fabs(xv[i * dim + a]) + std::fabs(xv[i * dim + b]));
      }
    }
    ExpectAllWithin(Gpu(x), Cpu(x), tol, "Rope");
  }
  {  // SwiGLU (out aliasing gate), Add, Zero, CopyRows.
    Pair g = MakePair(n, dim, Normal(rng_, n * dim, 4.0f)), u = MakePair(n, dim, Normal(rng_, n * dim));
    ASSERT_TRUE(cpu_.SwiGlu(*g.cpu, *u.cpu, g.cpu.get()).ok());
    ASSERT_TRUE(gpu_->SwiGlu(*g.gpu, *u.gpu, g.gpu.get()).ok());
    const auto ref = Cpu(g);
    std::vector<double> tol(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) tol[i] = 16 * kU * std::fabs(ref[i]) + 1e-37;
    ExpectAllWithin(Gpu(g), ref, tol, "SwiGlu");
    ASSERT_TRUE(cpu_.Add(*u.cpu, g.cpu.get()).ok());
    ASSERT_TRUE(gpu_->Add(*u.gpu, g.gpu.get()).ok());
    const auto ref2 = Cpu(g);
    // The addends differ by at most the SwiGLU bound tol[i]; each side then rounds its own sum once
    // (<= u |sum| each), so the two sums can land an ulp apart even when the addends barely differ:
    // tol[i] + 2u |sum|. (u |sum| alone for both roundings failed 1 of 672 elements at seed
    // 2408335135637344967: sums 1 ulp apart at |sum| 0.65.)
    std::vector<double> tol2(ref2.size());
    for (size_t i = 0; i < ref2.size(); ++i) tol2[i] = tol[i] + 2 * kU * std::fabs(ref2[i]);
    ExpectAllWithin(Gpu(g), ref2, tol2, "Add");
    Pair big = Poisoned(20, dim);
    ASSERT_TRUE(cpu_.Zero(big.cpu.get()).ok());
    ASSERT_TRUE(gpu_->Zero(big.gpu.get()).ok());
    ASSERT_TRUE(cpu_.CopyRows(*u.cpu, 11, big.cpu.get()).ok());
    ASSERT_TRUE(gpu_->CopyRows(*u.gpu, 11, big.gpu.get()).ok());
    ExpectAllClose(Gpu(big), Cpu(big), 0.0, 0.0, "Zero+CopyRows");
    EXPECT_FALSE(gpu_->CopyRows(*u.gpu, 14, big.gpu.get()).ok());  // 14 + 7 > 20
  }
}

// The fused products (MatMulMany, MatMulAdd, MatMulSwiGlu: one launch each on CUDA for 1..16 rows)
// against the Backend defaults on the same GPU backend (MatMul, Add, SwiGlu, each checked against the
// CPU above): the same bits, at 17 rows too (where the defaults run).
TEST_P(CudaOps, FusedMatMulsEqualTheirOpsBitForBit) {
  const int in = 96, q_out = 64, kv_out = 32, ffn = 80;
  const HostWeight wq = MakeWeight(rng_, DType::kBF16, q_out, in), wk = MakeWeight(rng_, DType::kBF16, kv_out, in),
                   wv = MakeWeight(rng_, DType::kBF16, kv_out, in), wg = MakeWeight(rng_, DType::kBF16, ffn, in),
                   wu = MakeWeight(rng_, DType::kBF16, ffn, in), wo = MakeWeight(rng_, DType::kBF16, in, ffn);
  std::vector<std::unique_ptr<Weight>> w;
  for (const HostWeight* h : {&wq, &wk, &wv, &wg, &wu, &wo}) {
    auto u = gpu_->Upload(h->View(), "w");
    ASSERT_TRUE(u.ok()) << u.status();
    w.push_back(std::move(u).value());
  }
  const auto read = [&](const Buffer& b) {
    std::vector<float> v(b.rows() * b.cols());
    EXPECT_TRUE(gpu_->Read(b, v).ok());
    return v;
  };
  const auto same = [&](const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (float v : a) ASSERT_TRUE(std::isfinite(v)) << what;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()), 0) << what << " differs from its ops";
  };
  for (int n : {1, 5, 16, 17}) {
    const std::string at = " n=" + std::to_string(n);
    const auto xv = Normal(rng_, size_t(n) * in), hv = Normal(rng_, size_t(n) * in);
    std::vector<std::vector<float>> out[2];
    for (int fused = 0; fused < 2; ++fused) {
      auto x = *gpu_->NewBuffer(n, in), h = *gpu_->NewBuffer(n, in), scratch = *gpu_->NewBuffer(n, in);
      auto q = *gpu_->NewBuffer(n, q_out), k = *gpu_->NewBuffer(n, kv_out), v = *gpu_->NewBuffer(n, kv_out);
      auto g = *gpu_->NewBuffer(n, ffn), u = *gpu_->NewBuffer(n, ffn);
      ASSERT_TRUE(gpu_->Write(xv, x.get()).ok() && gpu_->Write(hv, h.get()).ok());
      const Weight* qkv[3] = {w[0].get(), w[1].get(), w[2].get()};
      Buffer* ys[3] = {q.get(), k.get(), v.get()};
      Backend& be = *gpu_;
      if (fused) {
        ASSERT_TRUE(be.MatMulMany(*x, qkv, ys).ok());
        ASSERT_TRUE(be.MatMulSwiGlu(*x, *w[3], *w[4], u.get(), g.get()).ok());
        ASSERT_TRUE(be.MatMulAdd(*g, *w[5], scratch.get(), h.get()).ok());
      } else {
        ASSERT_TRUE(be.Backend::MatMulMany(*x, qkv, ys).ok());
        ASSERT_TRUE(be.Backend::MatMulSwiGlu(*x, *w[3], *w[4], u.get(), g.get()).ok());
        ASSERT_TRUE(be.Backend::MatMulAdd(*g, *w[5], scratch.get(), h.get()).ok());
      }
      out[fused] = {read(*q), read(*k), read(*v), read(*g), read(*h)};
    }
    const char* names[] = {"q", "k", "v", "SwiGLU", "residual"};
    for (int i = 0; i < 5; ++i) same(out[1][i], out[0][i], std::string(names[i]) + at);
  }
  // A shape error is a Status naming the op, not a launch.
  auto x = *gpu_->NewBuffer(2, in + 8), y = *gpu_->NewBuffer(2, in), s = *gpu_->NewBuffer(2, in);
  const absl::Status st = gpu_->MatMulAdd(*x, *w[5], s.get(), y.get());
  EXPECT_FALSE(st.ok());
}

// CudaBackend::NormRopeStore (one kernel) against the Backend default on the same GPU backend (its
// RmsNorm, Rope and CopyRows, each checked against the CPU above): the same bits in q, k and every row
// of both caches (rows outside the batch untouched).
TEST_P(CudaOps, NormRopeStoreEqualsItsOpsBitForBit) {
  struct Case {
    int n, heads, kv_heads, d;
    bool norm;
    RopeStyle style;
    DType norm_type;
  };
  for (const Case c : {Case{1, 16, 8, 128, true, RopeStyle::kRotateHalf, DType::kBF16},
                       Case{5, 16, 8, 128, true, RopeStyle::kRotateHalf, DType::kF32},
                       Case{3, 8, 8, 64, false, RopeStyle::kInterleaved, DType::kF32},
                       Case{2, 8, 2, 256, true, RopeStyle::kRotateHalf, DType::kBF16}}) {
    const int rows = 48, dst_row = 37, qd = c.heads * c.d, kvd = c.kv_heads * c.d;
    const std::string what = "NormRopeStore n=" + std::to_string(c.n) + " heads=" + std::to_string(c.heads) + "/" +
                             std::to_string(c.kv_heads) + " d=" + std::to_string(c.d);
    const HostWeight qn = MakeWeight(rng_, c.norm_type, 1, c.d, 1.0f), kn = MakeWeight(rng_, c.norm_type, 1, c.d, 1.0f);
    auto gq = gpu_->Upload(qn.View(), "q_norm");
    auto gk = gpu_->Upload(kn.View(), "k_norm");
    ASSERT_TRUE(gq.ok() && gk.ok());
    const auto qv = Normal(rng_, size_t(c.n) * qd, 2.f), kv = Normal(rng_, size_t(c.n) * kvd, 2.f);
    const auto vv = Normal(rng_, size_t(c.n) * kvd), cache0 = Normal(rng_, size_t(rows) * kvd);
    std::vector<int32_t> pos(c.n);
    for (int i = 0; i < c.n; ++i) pos[i] = dst_row + 1000 * i;  // far apart: distinct angles
    std::vector<std::vector<float>> got[2];
    for (int fused = 0; fused < 2; ++fused) {
      auto q = *gpu_->NewBuffer(c.n, qd), k = *gpu_->NewBuffer(c.n, kvd), v = *gpu_->NewBuffer(c.n, kvd);
      auto kc = *gpu_->NewBuffer(rows, kvd), vc = *gpu_->NewBuffer(rows, kvd);
      ASSERT_TRUE(gpu_->Write(qv, q.get()).ok() && gpu_->Write(kv, k.get()).ok() && gpu_->Write(vv, v.get()).ok());
      ASSERT_TRUE(gpu_->Write(cache0, kc.get()).ok() && gpu_->Write(cache0, vc.get()).ok());
      Backend::HeadNormRope p;
      if (c.norm) {
        p.q_norm = gq->get();
        p.k_norm = gk->get();
      }
      p.eps = 1e-6f;
      p.head_dim = c.d;
      p.positions = pos;
      p.theta = 1e6f;
      p.style = c.style;
      const absl::Status st = fused ? gpu_->NormRopeStore(p, q.get(), k.get(), *v, dst_row, kc.get(), vc.get())
                                    : gpu_->Backend::NormRopeStore(p, q.get(), k.get(), *v, dst_row, kc.get(), vc.get());
      ASSERT_TRUE(st.ok()) << what << ": " << st;
      for (Buffer* b : {q.get(), k.get(), kc.get(), vc.get()}) {
        std::vector<float> h(b->rows() * b->cols());
        ASSERT_TRUE(gpu_->Read(*b, h).ok());
        for (float x : h) ASSERT_TRUE(std::isfinite(x)) << what;
        got[fused].push_back(std::move(h));
      }
    }
    const char* names[] = {"q", "k", "K cache", "V cache"};
    for (int b = 0; b < 4; ++b) {
      ASSERT_EQ(got[0][b].size(), got[1][b].size());
      EXPECT_EQ(std::memcmp(got[0][b].data(), got[1][b].data(), sizeof(float) * got[0][b].size()), 0)
          << what << ": " << names[b] << " differs from RmsNorm + Rope + CopyRows";
    }
  }
  // One norm without the other is refused with a message, not run.
  const HostWeight w = MakeWeight(rng_, DType::kF32, 1, 64, 1.0f);
  auto gw = gpu_->Upload(w.View(), "q_norm");
  ASSERT_TRUE(gw.ok());
  auto q = *gpu_->NewBuffer(1, 128), k = *gpu_->NewBuffer(1, 64), v = *gpu_->NewBuffer(1, 64);
  auto kc = *gpu_->NewBuffer(4, 64), vc = *gpu_->NewBuffer(4, 64);
  Backend::HeadNormRope p;
  p.q_norm = gw->get();
  p.head_dim = 64;
  const int32_t one_pos[1] = {0};
  p.positions = one_pos;
  p.theta = 1e4f;
  const absl::Status st = gpu_->NormRopeStore(p, q.get(), k.get(), *v, 0, kc.get(), vc.get());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("k norm"), std::string::npos) << st;
}

TEST_P(CudaOps, AttentionCausalTreeGqaAllHeadSizes) {
  struct Case { int heads, kv_heads, d, n, prefix; bool tree; };
  for (Case c : {Case{4, 2, 16, 5, 3, false}, Case{4, 2, 32, 1, 40, false}, Case{4, 4, 16, 8, 0, true},
                 Case{8, 1, 64, 9, 300, false}, Case{16, 8, 128, 1, 700, false}, Case{4, 2, 64, 6, 20, true},
                 Case{8, 2, 128, 40, 5, false}, Case{4, 2, 64, 80, 0, false}, Case{2, 1, 256, 3, 10, false}}) {
    const int n = c.n, rows = c.prefix + n, qc = c.heads * c.d, kc = c.kv_heads * c.d;
    const std::vector<float> qv = Normal(rng_, n * qc), kv = Normal(rng_, rows * kc), vv = Normal(rng_, rows * kc);
    Pair q = MakePair(n, qc, qv), k = MakePair(rows + 3, kc, [&] {
      auto t = kv;
      t.resize((rows + 3) * kc, std::nanf(""));  // rows past the batch must never be read
      return t;
    }());
    Pair v = MakePair(rows + 3, kc, [&] {
      auto t = vv;
      t.resize((rows + 3) * kc, std::nanf(""));
      return t;
    }());
    Pair out = Poisoned(n, qc);
    std::vector<uint8_t> mask;
    if (c.tree) {  // a random tree: node i's parent is some j < i
      mask.assign(n * n, 0);
      std::vector<int> parent(n, -1);
      for (int i = 1; i < n; ++i) parent[i] = static_cast<int>(rng_() % i);
      for (int i = 0; i < n; ++i) {
        for (int j = i; j >= 0; j = parent[j]) mask[i * n + j] = 1;
      }
    }
    AttentionShape s{c.heads, c.kv_heads, c.d, c.prefix, 1.0f / std::sqrt(float(c.d))};
    ASSERT_TRUE(cpu_.Attention(*q.cpu, *k.cpu, *v.cpu, s, mask, out.cpu.get()).ok());
    const absl::Status st = gpu_->Attention(*q.gpu, *k.gpu, *v.gpu, s, mask, out.gpu.get());
    ASSERT_TRUE(st.ok()) << st;
    std::vector<double> tol(n * qc);
    double vmax = 0;
    for (float x : vv) vmax = std::max<double>(vmax, std::fabs(x));
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < c.heads; ++h) {
        const int g = h / (c.heads / c.kv_heads);
        double delta = 0;
        for (int j = 0; j < rows; ++j) {
          double a = 0;
          for (int e = 0; e < c.d; ++e) a += std::fabs(double(qv[i * qc + h * c.d + e]) * kv[j * kc + g * c.d + e]);
          delta = std::max(delta, 2.0 * c.d * kU * a * s.scale);
        }
        for (int e = 0; e < c.d; ++e) tol[i * qc + h * c.d + e] = (2 * delta + (rows + 8) * kU) * vmax;
      }
    }
    ExpectAllWithin(Gpu(out), Cpu(out), tol,
                    "Attention H=" + std::to_string(c.heads) + " Hkv=" + std::to_string(c.kv_heads) + " d=" +
                        std::to_string(c.d) + " n=" + std::to_string(n) + " prefix=" + std::to_string(c.prefix) +
                        (c.tree ? " tree" : " causal"));
  }
}

TEST_P(CudaOps, RouteGatherScatter) {
  const int n = 9, e = 32, dim = 48;
  for (RouterNorm norm : {RouterNorm::kSoftmaxThenTopK, RouterNorm::kSoftmaxTopKRenormalize,
                          RouterNorm::kTopKThenSoftmax}) {
    Pair logits = MakePair(n, e, Normal(rng_, n * e, 2.0f));
    Routing rc, rg;
    rg.expert.assign(1, -7);
    ASSERT_TRUE(cpu_.Route(*logits.cpu, 4, norm, &rc).ok());
    ASSERT_TRUE(gpu_->Route(*logits.gpu, 4, norm, &rg).ok());
    ASSERT_EQ(rg.expert.size(), rc.expert.size());
    const float* l = CpuBackend::Data(*logits.cpu);
    for (size_t i = 0; i < rc.expert.size(); ++i) {
      if (rc.expert[i] != rg.expert[i]) {  // only a numerical near-tie may swap two experts
        const size_t t = i / 4;
        EXPECT_LE(std::fabs(l[t * e + rc.expert[i]] - l[t * e + rg.expert[i]]), 4 * e * kU * 8)
            << "token " << t << " slot " << i % 4;
      } else {
        EXPECT_NEAR(rg.weight[i], rc.weight[i], 8 * e * kU * std::fabs(rc.weight[i]) + 1e-30) << i;
      }
    }
  }
  Pair src = MakePair(n, dim, Normal(rng_, n * dim));
  const std::vector<int32_t> rows = {8, 0, 3, 3};
  Pair g = Poisoned(4, dim);
  ASSERT_TRUE(cpu_.GatherRows(*src.cpu, rows, g.cpu.get()).ok());
  ASSERT_TRUE(gpu_->GatherRows(*src.gpu, rows, g.gpu.get()).ok());
  ExpectAllClose(Gpu(g), Cpu(g), 0.0, 0.0, "GatherRows");
  const std::vector<float> scales = {0.5f, -1.25f, 0.3f, 2.0f};
  const std::vector<float> base = Normal(rng_, n * dim);
  Pair dst = MakePair(n, dim, base);
  ASSERT_TRUE(cpu_.ScatterAddScaled(*g.cpu, rows, scales, dst.cpu.get()).ok());
  ASSERT_TRUE(gpu_->ScatterAddScaled(*g.gpu, rows, scales, dst.gpu.get()).ok());
  const auto ref = Cpu(dst);
  std::vector<double> tol(ref.size());
  const auto gv = Cpu(g);
  for (int c = 0; c < dim; ++c) {
    for (int r = 0; r < n; ++r) tol[r * dim + c] = 1e-30;
    for (size_t i = 0; i < rows.size(); ++i) {
      tol[rows[i] * dim + c] += 4 * kU * (std::fabs(ref[rows[i] * dim + c]) + std::fabs(scales[i] * gv[i * dim + c]) +
                                          std::fabs(base[rows[i] * dim + c]));
    }
  }
  ExpectAllWithin(Gpu(dst), ref, tol, "ScatterAddScaled");
  EXPECT_FALSE(gpu_->GatherRows(*src.gpu, std::vector<int32_t>{0, 0, 0, n}, g.gpu.get()).ok());
}

// RouteAndRunExperts (routing on the device, no host wait) against RunRoutedExperts on the same
// backend (Route read by the host, then GatherRows / MatMul / SwiGlu / ScatterAddScaled per expert):
// the kernels reduce every dot product in the order MatMul's kernel would and add each token's experts
// in ascending id with the same fmaf, so the two agree bit for bit; no tolerance. Shapes cover both
// reduction orders (length % 8 == 0 with bf16/f16: the GEMV's; otherwise, and f32: the row kernel's),
// one token to the 16 of a verify pass, and every router convention.
TEST_P(CudaOps, RouteAndRunExpertsEqualsHostRoutingBitForBit) {
  struct Shape {
    int hidden, ffn;
  };
  const int experts = 12;
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    // {256, 512}: both products' inputs multiples of 32, rows split over parts in the tensor-core order.
    for (Shape sh : {Shape{64, 40}, Shape{44, 40}, Shape{64, 36}, Shape{256, 512}}) {
      std::vector<HostWeight> host;
      std::vector<std::unique_ptr<Weight>> uploaded;
      ExpertWeights refs;
      for (int e = 0; e < experts; ++e) {
        for (int part = 0; part < 3; ++part) {
          host.push_back(part < 2 ? MakeWeight(rng_, dt, sh.ffn, sh.hidden) : MakeWeight(rng_, dt, sh.hidden, sh.ffn));
          auto w = gpu_->Upload(host.back().View(), "expert");
          ASSERT_TRUE(w.ok()) << w.status();
          (part == 0 ? refs.gate : part == 1 ? refs.up : refs.down).push_back(w->get());
          uploaded.push_back(std::move(*w));
        }
      }
      auto set = gpu_->PrepareExperts(refs);
      ASSERT_TRUE(set.ok()) << set.status();
      ASSERT_NE(*set, nullptr) << "one shape and type: the device path must take these experts";
      for (int n : {1, 2, 5, 16}) {
        for (auto [k, norm] : {std::pair{3, RouterNorm::kSoftmaxTopKRenormalize},
                               std::pair{1, RouterNorm::kSoftmaxThenTopK}, std::pair{2, RouterNorm::kTopKThenSoftmax}}) {
          const std::string what = std::string(Name(dt)) + " hidden " + std::to_string(sh.hidden) + " ffn " +
                                   std::to_string(sh.ffn) + " n " + std::to_string(n) + " k " + std::to_string(k);
          auto buffer = [&](int64_t rows, int64_t cols, const std::vector<float>& v) {
            auto b = *gpu_->NewBuffer(rows, cols);
            EXPECT_TRUE(gpu_->Write(v, b.get()).ok());
            return b;
          };
          const std::vector<float> nan(size_t(n) * sh.hidden, std::nanf(""));
          auto x = buffer(n, sh.hidden, Normal(rng_, size_t(n) * sh.hidden));
          auto logits = buffer(n, experts, Normal(rng_, size_t(n) * experts, 2.0f));
          auto host_out = buffer(n, sh.hidden, nan), dev_out = buffer(n, sh.hidden, nan);
          auto xe = *gpu_->NewBuffer(n, sh.hidden), ye = *gpu_->NewBuffer(n, sh.hidden);
          auto ge = *gpu_->NewBuffer(n, sh.ffn), ue = *gpu_->NewBuffer(n, sh.ffn);
          ASSERT_TRUE(RunRoutedExperts(*gpu_, *x, *logits, k, norm, refs, {xe.get(), ye.get(), ge.get(), ue.get()},
                                       host_out.get())
                          .ok());
          const SyncCounts before = gpu_->syncs();
          auto ran = gpu_->RouteAndRunExperts(*x, *logits, k, norm, **set, dev_out.get(), false);
          ASSERT_TRUE(ran.ok()) << ran.status();
          ASSERT_TRUE(*ran) << what;
          EXPECT_EQ(gpu_->syncs().expert_union, before.expert_union) << what << ": the device path read routing";
          EXPECT_EQ(gpu_->syncs().other, before.other) << what << ": the device path waited";
          std::vector<float> h(nan.size()), d(nan.size());
          ASSERT_TRUE(gpu_->Read(*host_out, h).ok());
          ASSERT_TRUE(gpu_->Read(*dev_out, d).ok());
          size_t differ = 0, first = 0;
          for (size_t i = 0; i < h.size(); ++i) {
            if (std::memcmp(&h[i], &d[i], sizeof(float)) != 0 || std::isnan(d[i])) {
              if (differ++ == 0) first = i;
            }
          }
          EXPECT_EQ(differ, 0u) << what << ": first at [" << first / sh.hidden << ", " << first % sh.hidden
                                << "] host " << h[first] << " device " << d[first];
          // accumulate: the sum added to a residual, the bits of Add after the plain path.
          const std::vector<float> resid = Normal(rng_, nan.size());
          auto added = buffer(n, sh.hidden, resid), acc = buffer(n, sh.hidden, resid);
          ASSERT_TRUE(gpu_->Add(*dev_out, added.get()).ok());
          auto ran_acc = gpu_->RouteAndRunExperts(*x, *logits, k, norm, **set, acc.get(), true);
          ASSERT_TRUE(ran_acc.ok() && *ran_acc) << what;
          std::vector<float> a(nan.size()), b(nan.size());
          ASSERT_TRUE(gpu_->Read(*added, a).ok());
          ASSERT_TRUE(gpu_->Read(*acc, b).ok());
          EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()), 0) << what << ": accumulate != Add";
        }
      }
      // A batch beyond 16 tokens is not the device path's: it says so and leaves the output alone.
      auto x17 = *gpu_->NewBuffer(17, sh.hidden), l17 = *gpu_->NewBuffer(17, experts), o17 = *gpu_->NewBuffer(17, sh.hidden);
      auto ran = gpu_->RouteAndRunExperts(*x17, *l17, 2, RouterNorm::kSoftmaxThenTopK, **set, o17.get(), false);
      ASSERT_TRUE(ran.ok());
      EXPECT_FALSE(*ran);
    }
  }
  // Experts of two shapes: no device set (the caller routes on the host).
  const HostWeight a = MakeWeight(rng_, DType::kBF16, 40, 64), b = MakeWeight(rng_, DType::kBF16, 48, 64),
                   c = MakeWeight(rng_, DType::kBF16, 64, 40);
  auto wa = *gpu_->Upload(a.View(), "a"), wb = *gpu_->Upload(b.View(), "b"), wc = *gpu_->Upload(c.View(), "c");
  auto mixed = gpu_->PrepareExperts({{wa.get(), wb.get()}, {wa.get(), wa.get()}, {wc.get(), wc.get()}});
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(*mixed, nullptr);
}

TEST_P(CudaOps, ArenaBudgetIsAStatusNotACrash) {
  auto small = testing::TestCudaBackend(size_t{64} << 20);
  ASSERT_NE(small, nullptr);
  auto too_big = small->NewBuffer(1 << 16, 1 << 10);  // 256 MiB
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted) << too_big.status();
  EXPECT_NE(std::string(too_big.status().message()).find("VRAM budget"), std::string::npos);
  // Freed blocks are reused: allocating and dropping 16 MiB many times stays within 64 MiB.
  for (int i = 0; i < 20; ++i) {
    auto b = small->NewBuffer(1 << 12, 1 << 10);
    ASSERT_TRUE(b.ok()) << i << ": " << b.status();
  }
}

// A KV cache buffer of each type (NewCacheBuffer) on both backends. CopyRows rounds to the type as the
// CPU does: the GPU's stored rows, read back, equal the CPU's rounded fp32 values bit for bit. The fused
// NormRopeStore stores the same bits as its ops (RmsNorm, Rope, CopyRows) on a 16-bit cache too. And
// Attention over caches holding the same values matches the CPU within the fp32 bound above (the 16-bit
// rounding is in both inputs, not in the comparison); a 16-bit cache refuses Read.
std::vector<float> CacheValues(const Buffer& b) {
  // The backend's stream is non-blocking: wait for the stores queued there before copying back.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const size_t n = static_cast<size_t>(b.rows() * b.cols());
  std::vector<float> out(n);
  if (b.dtype() == DType::kF32) {
    EXPECT_EQ(cudaMemcpy(out.data(), CudaBackend::CacheData(b), n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  std::vector<uint16_t> bits(n);
  EXPECT_EQ(cudaMemcpy(bits.data(), CudaBackend::CacheData(b), n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < n; ++i) out[i] = b.dtype() == DType::kF16 ? F16ToF32(bits[i]) : Bf16ToF32(bits[i]);
  return out;
}

TEST_P(CudaOps, CacheTypesStoreRoundedAndAttend) {
  for (const DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    const int heads = 8, kv_heads = 2, d = 64, rows = 40, prefix = 30, n = 5, qc = heads * d, kc = kv_heads * d;
    const std::string what = std::string("cache type ") + std::string(Name(type));
    Pair kcache{*cpu_.NewCacheBuffer(rows, kc, type), *gpu_->NewCacheBuffer(rows, kc, type)};
    Pair vcache{*cpu_.NewCacheBuffer(rows, kc, type), *gpu_->NewCacheBuffer(rows, kc, type)};
    // Wide values (sd 3): many of them are not representable in 16 bits, so rounding is exercised.
    const auto k0 = Normal(rng_, size_t(prefix) * kc, 3.f), v0 = Normal(rng_, size_t(prefix) * kc, 3.f);
    Pair ksrc = MakePair(prefix, kc, k0), vsrc = MakePair(prefix, kc, v0);
    for (Backend* be : {static_cast<Backend*>(&cpu_), static_cast<Backend*>(gpu_.get())}) {
      const bool gpu = be != &cpu_;
      ASSERT_TRUE(be->CopyRows(gpu ? *ksrc.gpu : *ksrc.cpu, 0, gpu ? kcache.gpu.get() : kcache.cpu.get()).ok());
      ASSERT_TRUE(be->CopyRows(gpu ? *vsrc.gpu : *vsrc.cpu, 0, gpu ? vcache.gpu.get() : vcache.cpu.get()).ok());
    }
    const auto gk = CacheValues(*kcache.gpu);
    const float* ck = CpuBackend::Data(*kcache.cpu);
    int rounded = 0;
    for (size_t i = 0; i < k0.size(); ++i) {
      ASSERT_EQ(std::memcmp(&gk[i], &ck[i], 4), 0) << what << ": K element " << i << " " << k0[i] << " stored as "
                                                   << gk[i] << " on the GPU, " << ck[i] << " on the CPU";
      rounded += gk[i] != k0[i];
    }
    if (type != DType::kF32) {
      EXPECT_GT(rounded, 0) << what << ": nothing was rounded";
    } else {
      EXPECT_EQ(rounded, 0) << what;
    }
    std::vector<float> dummy(size_t(rows) * kc);
    EXPECT_EQ(gpu_->Read(*kcache.gpu, dummy).ok(), type == DType::kF32) << what;

    // Attention of n queries over rows 0 .. prefix - 1 (all stored by CopyRows, the same on both).
    const std::vector<float> qv = Normal(rng_, size_t(n) * qc);
    Pair q = MakePair(n, qc, qv), out = Poisoned(n, qc);
    AttentionShape s{heads, kv_heads, d, prefix - n, 1.0f / std::sqrt(float(d))};
    ASSERT_TRUE(cpu_.Attention(*q.cpu, *kcache.cpu, *vcache.cpu, s, {}, out.cpu.get()).ok()) << what;
    ASSERT_TRUE(gpu_->Attention(*q.gpu, *kcache.gpu, *vcache.gpu, s, {}, out.gpu.get()).ok()) << what;
    const float* cv = CpuBackend::Data(*vcache.cpu);
    double vmax = 0;
    for (int i = 0; i < prefix * kc; ++i) vmax = std::max<double>(vmax, std::fabs(cv[i]));
    std::vector<double> tol(size_t(n) * qc);
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < heads; ++h) {
        const int g = h / (heads / kv_heads);
        double delta = 0;
        for (int j = 0; j < prefix; ++j) {
          double a = 0;
          for (int e = 0; e < d; ++e) a += std::fabs(double(qv[i * qc + h * d + e]) * ck[j * kc + g * d + e]);
          delta = std::max(delta, 2.0 * d * kU * a * s.scale);
        }
        for (int e = 0; e < d; ++e) tol[i * qc + h * d + e] = (2 * delta + (prefix + 8) * kU) * vmax;
      }
    }
    ExpectAllWithin(Gpu(out), Cpu(out), tol, what + ": Attention");

    // NormRopeStore of n more rows: fused and one op at a time store the same bits.
    std::vector<std::vector<float>> stored[2];
    const auto qn = Normal(rng_, size_t(n) * qc, 2.f), kn = Normal(rng_, size_t(n) * kc, 2.f),
               vn = Normal(rng_, size_t(n) * kc, 2.f);
    std::vector<int32_t> pos(n);
    for (int i = 0; i < n; ++i) pos[i] = prefix + i;
    for (int fused = 0; fused < 2; ++fused) {
      auto kc2 = *gpu_->NewCacheBuffer(rows, kc, type), vc2 = *gpu_->NewCacheBuffer(rows, kc, type);
      auto qb = *gpu_->NewBuffer(n, qc), kb = *gpu_->NewBuffer(n, kc), vb = *gpu_->NewBuffer(n, kc);
      ASSERT_TRUE(gpu_->Write(qn, qb.get()).ok() && gpu_->Write(kn, kb.get()).ok() && gpu_->Write(vn, vb.get()).ok());
      Backend::HeadNormRope p;
      p.eps = 1e-6f;
      p.head_dim = d;
      p.positions = pos;
      p.theta = 1e6f;
      const absl::Status st = fused ? gpu_->NormRopeStore(p, qb.get(), kb.get(), *vb, prefix, kc2.get(), vc2.get())
                                    : gpu_->Backend::NormRopeStore(p, qb.get(), kb.get(), *vb, prefix, kc2.get(),
                                                                   vc2.get());
      ASSERT_TRUE(st.ok()) << what << ": " << st;
      for (const Buffer* b : {kc2.get(), vc2.get()}) {
        auto values = CacheValues(*b);
        values.erase(values.begin(), values.begin() + size_t(prefix) * kc);  // the rows stored here
        values.resize(size_t(n) * kc);
        for (float x : values) ASSERT_TRUE(std::isfinite(x)) << what;
        stored[fused].push_back(std::move(values));
      }
    }
    for (int b = 0; b < 2; ++b) {
      EXPECT_EQ(std::memcmp(stored[0][b].data(), stored[1][b].data(), sizeof(float) * stored[0][b].size()), 0)
          << what << ": NormRopeStore's " << (b == 0 ? "K" : "V") << " rows differ from its ops'";
    }
    // The V rows are v rounded to the type, exactly as the CPU rounds.
    for (size_t i = 0; i < vn.size(); ++i) {
      const float want = type == DType::kF16 ? F16ToF32(F32ToF16(vn[i]))
                         : type == DType::kBF16 ? Bf16ToF32(F32ToBf16(vn[i]))
                                                : vn[i];
      ASSERT_EQ(stored[1][1][i], want) << what << ": V element " << i;
    }
  }
}

// --- the ops of GLM-4.5 / gpt-oss (ModelFeature, issue 45) ---

TEST_P(CudaOps, SupportsEveryModelFeatureButTheRing) {
  for (ModelFeature f : {ModelFeature::kAttentionBias, ModelFeature::kAttentionSinks, ModelFeature::kSlidingWindow,
                         ModelFeature::kPartialRope, ModelFeature::kScaledRope, ModelFeature::kSharedExperts,
                         ModelFeature::kSigmoidRouting, ModelFeature::kRouterBias, ModelFeature::kExpertBias,
                         ModelFeature::kClampedSwiGlu}) {
    EXPECT_TRUE(gpu_->Supports(f)) << FeatureName(f);
  }
  EXPECT_TRUE(gpu_->SupportsRopeFrequencies());
  EXPECT_FALSE(gpu_->SupportsKvRing());
}

// AddBias is one fp32 add of the same values on both sides: exact. SwiGluClamped and ScaleRowsBySigmoid
// are the CPU's formulas with every operation rounded alike, except e^−z: CUDA's expf is within 2 ulp of
// exp, glibc's within 1, so the two exps differ by at most 3 ulp; through 1 + e (relative error scaled by
// e/(1+e) ≤ 1), the division and the products, each of which may then round to a neighbouring float
// (1 ulp each, 4 of them), the outputs differ by at most 7 ulp relative: 16·u·|y| with margin (the SwiGlu
// bound above), plus a floor below the normal range.
TEST_P(CudaOps, AddBiasSwiGluClampedScaleRowsBySigmoid) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int n = 7, cols = 96;
    const HostWeight hb = MakeWeight(rng_, dt, 1, cols, 1.0f);
    auto cb = cpu_.Upload(hb.View(), "bias");
    auto gb = gpu_->Upload(hb.View(), "bias");
    ASSERT_TRUE(cb.ok() && gb.ok()) << gb.status();
    Pair y = MakePair(n, cols, Normal(rng_, n * cols));
    ASSERT_TRUE(cpu_.AddBias(**cb, y.cpu.get()).ok());
    ASSERT_TRUE(gpu_->AddBias(**gb, y.gpu.get()).ok());
    ExpectAllClose(Gpu(y), Cpu(y), 0.0, 0.0, std::string("AddBias ") + std::string(Name(dt)));
    Pair short_row = MakePair(n, cols / 2, Normal(rng_, n * cols / 2));
    EXPECT_FALSE(gpu_->AddBias(**gb, short_row.gpu.get()).ok());
  }
  // Activations of sd 3 against a limit of 1.5: most elements clamped on one side or the other.
  for (int n : {1, 13}) {
    const int cols = 160;
    const auto gv = Normal(rng_, n * cols, 3.f), uv = Normal(rng_, n * cols, 3.f);
    Pair gate = MakePair(n, cols, gv), up = MakePair(n, cols, uv), out = Poisoned(n, cols);
    ASSERT_TRUE(cpu_.SwiGluClamped(*gate.cpu, *up.cpu, 1.702f, 1.5f, out.cpu.get()).ok());
    ASSERT_TRUE(gpu_->SwiGluClamped(*gate.gpu, *up.gpu, 1.702f, 1.5f, out.gpu.get()).ok());
    const auto ref = Cpu(out);
    ExpectAllWithin(Gpu(out), ref, [&](size_t i) { return 16 * kU * std::fabs(ref[i]) + 1e-37; },
                    "SwiGluClamped n=" + std::to_string(n));
    // In place (out = gate), as RunRoutedExperts calls it.
    ASSERT_TRUE(gpu_->SwiGluClamped(*gate.gpu, *up.gpu, 1.702f, 1.5f, gate.gpu.get()).ok());
    ExpectAllWithin(Gpu(gate), ref, [&](size_t i) { return 16 * kU * std::fabs(ref[i]) + 1e-37; },
                    "SwiGluClamped in place");
    size_t clamped = 0;
    for (int i = 0; i < n * cols; ++i) clamped += gv[i] > 1.5f || std::fabs(uv[i]) > 1.5f;
    EXPECT_GT(clamped, 0u);

    const auto yv = Normal(rng_, n * cols);
    Pair g = MakePair(n, 1, Normal(rng_, n, 3.f)), y = MakePair(n, cols, yv);
    ASSERT_TRUE(cpu_.ScaleRowsBySigmoid(*g.cpu, y.cpu.get()).ok());
    ASSERT_TRUE(gpu_->ScaleRowsBySigmoid(*g.gpu, y.gpu.get()).ok());
    const auto ref2 = Cpu(y);
    ExpectAllWithin(Gpu(y), ref2, [&](size_t i) { return 16 * kU * std::fabs(ref2[i]) + 1e-37; },
                    "ScaleRowsBySigmoid n=" + std::to_string(n));
    Pair g2 = MakePair(n, 2, Normal(rng_, 2 * n));
    EXPECT_FALSE(gpu_->ScaleRowsBySigmoid(*g2.gpu, y.gpu.get()).ok());
  }
}

// A YaRN-like table: theta^(−2j/rot_dim), each scaled by a factor in [1/8, 1].
std::vector<float> ScaledFrequencies(std::mt19937_64& rng, int rot_dim, float theta) {
  std::uniform_real_distribution<float> s(0.125f, 1.0f);
  std::vector<float> f(rot_dim / 2);
  for (int j = 0; j < rot_dim / 2; ++j) {
    f[j] = std::pow(theta, -2.0f * j / rot_dim) * s(rng);
  }
  return f;
}

// RopePartial / RopeWithFrequencies: both form the angle as one fp32 product of the same values (equal),
// then cos and sin: the GPU's are correctly rounded (from double), the CPU's libm cosf/sinf within an ulp
// of them, so |Δcos|, |Δsin| ≤ u (the values are at most 1). Times the factor (one rounding each side,
// possibly to neighbours: + 2u·factor), then x0·c − x1·s with two products and a sum rounded (the CPU
// may fuse one product into an FMA): each output differs by at most ≈ 5u·factor·(|x0| + |x1|); 8u·factor
// of it is allowed. The dims past rope_dim are untouched on both sides: equal.
TEST_P(CudaOps, RopePartialAndScaledFrequencies) {
  struct Case { int n, heads, d, rot; float factor; RopeStyle style; bool partial_api; };
  for (const Case c : {Case{5, 4, 64, 32, 1.3466f, RopeStyle::kRotateHalf, true},
                       Case{3, 2, 16, 16, 1.0f, RopeStyle::kInterleaved, false},
                       Case{1, 8, 128, 64, 1.0f, RopeStyle::kInterleaved, true},
                       Case{17, 2, 16, 8, 1.2079f, RopeStyle::kRotateHalf, true},
                       Case{4, 4, 128, 128, 1.1f, RopeStyle::kRotateHalf, true}}) {
    const int cols = c.heads * c.d;
    const auto xv = Normal(rng_, c.n * cols, 2.f);
    std::vector<int32_t> pos(c.n);
    for (int i = 0; i < c.n; ++i) pos[i] = static_cast<int32_t>(rng_() % 5000);
    const auto inv_freq = ScaledFrequencies(rng_, c.rot, 150000.f);
    Pair x = MakePair(c.n, cols, xv);
    const std::string what = "Rope d=" + std::to_string(c.d) + " rot=" + std::to_string(c.rot) +
                             " factor=" + std::to_string(c.factor) + (c.partial_api ? " RopePartial" : " RopeWithFrequencies");
    if (c.partial_api) {
      ASSERT_TRUE(cpu_.RopePartial(pos, c.d, c.rot, inv_freq, c.factor, c.style, x.cpu.get()).ok());
      const absl::Status st = gpu_->RopePartial(pos, c.d, c.rot, inv_freq, c.factor, c.style, x.gpu.get());
      ASSERT_TRUE(st.ok()) << what << ": " << st;
    } else {
      ASSERT_TRUE(cpu_.RopeWithFrequencies(pos, c.d, inv_freq, c.style, x.cpu.get()).ok());
      const absl::Status st = gpu_->RopeWithFrequencies(pos, c.d, inv_freq, c.style, x.gpu.get());
      ASSERT_TRUE(st.ok()) << what << ": " << st;
    }
    std::vector<double> tol(c.n * cols, 0.0);
    const int half = c.rot / 2;
    for (int i = 0; i < c.n; ++i) {
      for (int h = 0; h < c.heads; ++h) {
        for (int j = 0; j < half; ++j) {
          const int a = h * c.d + (c.style == RopeStyle::kRotateHalf ? j : 2 * j);
          const int b = h * c.d + (c.style == RopeStyle::kRotateHalf ? j + half : 2 * j + 1);
          const double t = 8.0 * kU * c.factor * (std::fabs(xv[i * cols + a]) + std::fabs(xv[i * cols + b])) + 1e-37;
          tol[i * cols + a] = tol[i * cols + b] = t;
        }
      }
    }
    ExpectAllWithin(Gpu(x), Cpu(x), tol, what);
  }
  // Bad tables and rotations are errors, as on the CPU.
  Pair x = MakePair(2, 64, Normal(rng_, 128));
  const std::vector<int32_t> pos = {0, 1};
  const std::vector<float> f8(8, 0.5f);
  EXPECT_FALSE(gpu_->RopePartial(pos, 64, 32, f8, 1.0f, RopeStyle::kRotateHalf, x.gpu.get()).ok());  // 8 for 16 pairs
  EXPECT_FALSE(gpu_->RopePartial(pos, 64, 15, f8, 1.0f, RopeStyle::kRotateHalf, x.gpu.get()).ok());  // odd
  EXPECT_FALSE(gpu_->RopePartial(pos, 64, 80, f8, 1.0f, RopeStyle::kRotateHalf, x.gpu.get()).ok());  // > head_dim
}

// NormRopeStore with a frequency table, a partial rotation and YaRN's factor (GLM-4.5, gpt-oss): the one
// kernel against the Backend default on the same GPU (RmsNorm, RopePartial / RopeWithFrequencies,
// CopyRows, each checked against the CPU above): the same bits in q, k and both caches.
TEST_P(CudaOps, NormRopeStoreWithFrequenciesEqualsItsOpsBitForBit) {
  struct Case { int n, heads, kv_heads, d, rot; float factor; bool norm; RopeStyle style; DType cache; };
  for (const Case c : {Case{1, 4, 2, 16, 8, 1.2079f, true, RopeStyle::kRotateHalf, DType::kF32},
                       Case{5, 4, 2, 64, 64, 1.3466f, false, RopeStyle::kRotateHalf, DType::kF16},
                       Case{3, 8, 8, 128, 64, 1.0f, true, RopeStyle::kInterleaved, DType::kBF16},
                       Case{16, 4, 1, 64, 64, 1.0f, false, RopeStyle::kRotateHalf, DType::kF32}}) {
    const int rows = 48, dst_row = 21, qd = c.heads * c.d, kvd = c.kv_heads * c.d;
    const std::string what = "NormRopeStore freq n=" + std::to_string(c.n) + " d=" + std::to_string(c.d) +
                             " rot=" + std::to_string(c.rot) + " factor=" + std::to_string(c.factor);
    const HostWeight qn = MakeWeight(rng_, DType::kF32, 1, c.d, 1.0f), kn = MakeWeight(rng_, DType::kF32, 1, c.d, 1.0f);
    auto gq = gpu_->Upload(qn.View(), "q_norm");
    auto gk = gpu_->Upload(kn.View(), "k_norm");
    ASSERT_TRUE(gq.ok() && gk.ok());
    const auto qv = Normal(rng_, size_t(c.n) * qd, 2.f), kv = Normal(rng_, size_t(c.n) * kvd, 2.f);
    const auto vv = Normal(rng_, size_t(c.n) * kvd);
    const auto inv_freq = ScaledFrequencies(rng_, c.rot, 10000.f);
    std::vector<int32_t> pos(c.n);
    for (int i = 0; i < c.n; ++i) pos[i] = dst_row + 700 * i;
    std::vector<std::vector<float>> got[2];
    for (int fused = 0; fused < 2; ++fused) {
      auto q = *gpu_->NewBuffer(c.n, qd), k = *gpu_->NewBuffer(c.n, kvd), v = *gpu_->NewBuffer(c.n, kvd);
      auto kc = *gpu_->NewCacheBuffer(rows, kvd, c.cache), vc = *gpu_->NewCacheBuffer(rows, kvd, c.cache);
      ASSERT_TRUE(gpu_->Write(qv, q.get()).ok() && gpu_->Write(kv, k.get()).ok() && gpu_->Write(vv, v.get()).ok());
      ASSERT_EQ(cudaMemsetAsync(CudaBackend::CacheData(*kc), 0, size_t(rows) * kvd * 4 / (c.cache == DType::kF32 ? 1 : 2),
                                gpu_->stream()), cudaSuccess);
      ASSERT_EQ(cudaMemsetAsync(CudaBackend::CacheData(*vc), 0, size_t(rows) * kvd * 4 / (c.cache == DType::kF32 ? 1 : 2),
                                gpu_->stream()), cudaSuccess);
      Backend::HeadNormRope p;
      if (c.norm) {
        p.q_norm = gq->get();
        p.k_norm = gk->get();
      }
      p.eps = 1e-5f;
      p.head_dim = c.d;
      p.positions = pos;
      p.theta = 10000.f;
      p.inv_freq = inv_freq;
      p.style = c.style;
      p.rope_dim = c.rot;
      p.rope_factor = c.factor;
      const absl::Status st = fused ? gpu_->NormRopeStore(p, q.get(), k.get(), *v, dst_row, kc.get(), vc.get())
                                    : gpu_->Backend::NormRopeStore(p, q.get(), k.get(), *v, dst_row, kc.get(), vc.get());
      ASSERT_TRUE(st.ok()) << what << ": " << st;
      for (Buffer* b : {q.get(), k.get()}) {
        std::vector<float> h(b->rows() * b->cols());
        ASSERT_TRUE(gpu_->Read(*b, h).ok());
        for (float x : h) ASSERT_TRUE(std::isfinite(x)) << what;
        got[fused].push_back(std::move(h));
      }
      for (Buffer* b : {kc.get(), vc.get()}) {  // the caches' raw bytes (16-bit ones are not Read)
        const size_t bytes = size_t(rows) * kvd * (c.cache == DType::kF32 ? 4 : 2);
        std::vector<float> h((bytes + 3) / 4);
        ASSERT_EQ(cudaStreamSynchronize(gpu_->stream()), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(h.data(), CudaBackend::CacheData(*b), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        got[fused].push_back(std::move(h));
      }
    }
    const char* names[] = {"q", "k", "K cache", "V cache"};
    for (int b = 0; b < 4; ++b) {
      ASSERT_EQ(got[0][b].size(), got[1][b].size());
      EXPECT_EQ(std::memcmp(got[0][b].data(), got[1][b].data(), sizeof(float) * got[0][b].size()), 0)
          << what << ": " << names[b] << " differs from RmsNorm + RopePartial + CopyRows";
    }
  }
}

// Attention with gpt-oss's sinks and sliding windows, against the CPU. The bound is the causal test's
// ((2δ + (keys + 8)·u)·max|v|, see the header) with 8 more u for the sink's own exp in the denominator.
// Each case is also run on the CPU without its window or sinks, and the difference must exceed the
// bound somewhere: a kernel ignoring them could not pass.
TEST_P(CudaOps, AttentionSinksAndSlidingWindow) {
  struct Case { int heads, kv_heads, d, n, prefix, window; bool sinks, tree; DType cache; };
  for (const Case c : {Case{4, 2, 16, 5, 3, 4, true, false, DType::kF32},     // window < n
                       Case{4, 2, 64, 1, 40, 8, true, false, DType::kF32},    // a decode step
                       Case{4, 2, 64, 1, 40, 0, true, false, DType::kBF16},   // sinks alone
                       Case{8, 2, 128, 16, 300, 128, false, false, DType::kF16},  // window alone, verify-sized
                       Case{4, 2, 64, 40, 0, 8, true, false, DType::kF32},    // prefill, window < n
                       Case{4, 4, 16, 8, 20, 3, true, true, DType::kF32},     // a tree with a window
                       Case{2, 1, 64, 70, 100, 64, true, false, DType::kF32},  // more than 64 queries
                       Case{4, 2, 32, 3, 10, 1, true, false, DType::kF32}}) {  // a window of one: itself
    const int n = c.n, rows = c.prefix + n, qc = c.heads * c.d, kc = c.kv_heads * c.d;
    const std::string what = "Attention H=" + std::to_string(c.heads) + " d=" + std::to_string(c.d) + " n=" +
                             std::to_string(n) + " prefix=" + std::to_string(c.prefix) + " window=" +
                             std::to_string(c.window) + (c.sinks ? " sinks" : "") + (c.tree ? " tree" : "") + " " +
                             std::string(Name(c.cache));
    std::vector<float> qv = Normal(rng_, n * qc, 0.5f), kv = Normal(rng_, rows * kc), vv = Normal(rng_, rows * kc);
    // Store K and V as the cache type holds them, so both backends attend over the same values.
    for (auto* t : {&kv, &vv}) {
      for (float& x : *t) x = c.cache == DType::kBF16 ? Bf16ToF32(F32ToBf16(x)) : c.cache == DType::kF16 ? F16ToF32(F32ToF16(x)) : x;
    }
    auto cache_pair = [&](const std::vector<float>& src) {
      Pair p{*cpu_.NewCacheBuffer(rows + 3, kc, c.cache), *gpu_->NewCacheBuffer(rows + 3, kc, c.cache)};
      auto tmp_c = *cpu_.NewBuffer(rows, kc);
      auto tmp_g = *gpu_->NewBuffer(rows, kc);
      EXPECT_TRUE(cpu_.Write(src, tmp_c.get()).ok() && gpu_->Write(src, tmp_g.get()).ok());
      EXPECT_TRUE(cpu_.CopyRows(*tmp_c, 0, p.cpu.get()).ok() && gpu_->CopyRows(*tmp_g, 0, p.gpu.get()).ok());
      return p;
    };
    Pair q = MakePair(n, qc, qv), k = cache_pair(kv), v = cache_pair(vv), out = Poisoned(n, qc);
    const HostWeight sw = MakeWeight(rng_, c.cache == DType::kBF16 ? DType::kBF16 : DType::kF32, 1, c.heads, 2.0f);
    auto cs = cpu_.Upload(sw.View(), "sinks");
    auto gs = gpu_->Upload(sw.View(), "sinks");
    ASSERT_TRUE(cs.ok() && gs.ok());
    std::vector<uint8_t> mask;
    std::vector<int32_t> positions(n);
    for (int i = 0; i < n; ++i) positions[i] = c.prefix + i;
    if (c.tree) {  // a random tree: node i's parent some j < i, its position its parent's + 1
      mask.assign(n * n, 0);
      std::vector<int> parent(n, -1);
      for (int i = 1; i < n; ++i) parent[i] = static_cast<int>(rng_() % i);
      for (int i = 0; i < n; ++i) {
        for (int j = i; j >= 0; j = parent[j]) mask[i * n + j] = 1;
        if (i > 0) positions[i] = positions[parent[i]] + 1;
      }
    }
    AttentionShape s{c.heads, c.kv_heads, c.d, c.prefix, 1.0f / std::sqrt(float(c.d))};
    AttentionShape cs_shape = s, gs_shape = s;
    cs_shape.sinks = c.sinks ? cs->get() : nullptr;
    gs_shape.sinks = c.sinks ? gs->get() : nullptr;
    cs_shape.window = gs_shape.window = c.window;
    cs_shape.positions = gs_shape.positions = positions;
    ASSERT_TRUE(cpu_.Attention(*q.cpu, *k.cpu, *v.cpu, cs_shape, mask, out.cpu.get()).ok());
    const absl::Status st = gpu_->Attention(*q.gpu, *k.gpu, *v.gpu, gs_shape, mask, out.gpu.get());
    ASSERT_TRUE(st.ok()) << what << ": " << st;
    std::vector<double> tol(n * qc);
    double vmax = 0;
    for (float x : vv) vmax = std::max<double>(vmax, std::fabs(x));
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < c.heads; ++h) {
        const int g = h / (c.heads / c.kv_heads);
        double delta = 0;
        for (int j = 0; j < rows; ++j) {
          double a = 0;
          for (int e = 0; e < c.d; ++e) a += std::fabs(double(qv[i * qc + h * c.d + e]) * kv[j * kc + g * c.d + e]);
          delta = std::max(delta, 2.0 * c.d * kU * a * s.scale);
        }
        for (int e = 0; e < c.d; ++e) tol[i * qc + h * c.d + e] = (2 * delta + (rows + 16) * kU) * vmax;
      }
    }
    const std::vector<float> ref = Cpu(out);
    ExpectAllWithin(Gpu(out), ref, tol, what);
    // Without the window and the sinks the CPU's result must leave the bound somewhere.
    Pair plain = Poisoned(n, qc);
    ASSERT_TRUE(cpu_.Attention(*q.cpu, *k.cpu, *v.cpu, s, mask, plain.cpu.get()).ok());
    const std::vector<float> unwindowed = Cpu(plain);
    bool matters = false;
    for (size_t i = 0; i < ref.size(); ++i) matters |= std::fabs(double(ref[i]) - unwindowed[i]) > tol[i];
    EXPECT_TRUE(matters) << what << ": the case does not exercise its window or sinks";
  }
  // A ring cache is refused with a message (the Transformer asks for none here: SupportsKvRing()).
  Pair q = MakePair(2, 64, Normal(rng_, 128)), out = Poisoned(2, 64);
  Pair k = MakePair(8, 32, Normal(rng_, 256)), v = MakePair(8, 32, Normal(rng_, 256));
  AttentionShape s{2, 1, 32, 5, 1.0f / std::sqrt(32.f)};
  const std::vector<int32_t> pos = {5, 6};
  s.window = 4;
  s.positions = pos;
  s.ring = 8;
  const absl::Status st = gpu_->Attention(*q.gpu, *k.gpu, *v.gpu, s, {}, out.gpu.get());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_NE(st.message().find("ring"), std::string::npos) << st;
}

// Logits of one token whose selection is decided by margins far above fp32 error: every pair of choices
// (σ(logit) + bias), and with groups every pair of group ranks, at least 1e-4 apart (float error here is
// ~1e-7), so the CPU and the GPU must pick identical ids.
std::vector<float> RouterRowWithoutNearTies(std::mt19937_64& rng, const std::vector<float>& bias, int groups) {
  const int e = static_cast<int>(bias.size()), gsize = e / groups;
  std::normal_distribution<float> d(0.f, 2.f);
  for (;;) {
    std::vector<float> l(e);
    std::vector<double> choice(e);
    for (int j = 0; j < e; ++j) {
      l[j] = d(rng);
      choice[j] = 1.0 / (1.0 + std::exp(-double(l[j]))) + bias[j];
    }
    auto far_apart = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      for (size_t i = 1; i < v.size(); ++i) {
        if (v[i] - v[i - 1] < 1e-4) return false;
      }
      return true;
    };
    if (!far_apart(choice)) continue;
    std::vector<double> group_rank(groups);
    for (int g = 0; g < groups; ++g) {
      std::vector<double> c(choice.begin() + g * gsize, choice.begin() + (g + 1) * gsize);
      std::sort(c.rbegin(), c.rend());
      group_rank[g] = c[0] + c[1];
    }
    if (groups == 1 || far_apart(group_rank)) return l;
  }
}

// RouteWith: sigmoid scores, a selection bias, groups and a routed scale. Ids identical (no near-ties, see
// above); weights: each score differs by the expf difference (≤ 3 ulp, through 1 + e and the division:
// ≤ 5u relative), the sum of k such scores by as much plus k roundings that may fall apart (k·u), the
// division and the scale one rounding each: within (12 + k)·u relative; 32u + k·u is allowed.
TEST_P(CudaOps, RouteWithSigmoidBiasGroupsAndScale) {
  struct Case { int n, e, k, groups, used; bool bias; RouterNorm norm; float scale; DType bias_type; };
  for (const Case c : {Case{9, 16, 4, 1, 1, true, RouterNorm::kSigmoidTopKRenormalize, 2.5f, DType::kF32},
                       Case{5, 64, 6, 8, 3, true, RouterNorm::kSigmoidTopKRenormalize, 2.5f, DType::kF32},
                       Case{17, 128, 8, 4, 2, true, RouterNorm::kSigmoidTopK, 1.0f, DType::kBF16},
                       Case{12, 8, 2, 2, 1, false, RouterNorm::kSigmoidTopKRenormalize, 1.5f, DType::kF32},
                       Case{1, 256, 8, 8, 4, true, RouterNorm::kSigmoidTopK, 2.827f, DType::kF32}}) {
    const std::string what = "RouteWith E=" + std::to_string(c.e) + " k=" + std::to_string(c.k) + " groups=" +
                             std::to_string(c.used) + "/" + std::to_string(c.groups) + (c.bias ? " bias" : "");
    const HostWeight hb = MakeWeight(rng_, c.bias_type, 1, c.e, 0.3f);
    std::vector<float> bias = c.bias ? hb.f32 : std::vector<float>(c.e, 0.f);
    auto cb = cpu_.Upload(hb.View(), "bias");
    auto gb = gpu_->Upload(hb.View(), "bias");
    ASSERT_TRUE(cb.ok() && gb.ok());
    std::vector<float> lv;
    for (int t = 0; t < c.n; ++t) {
      const auto row = RouterRowWithoutNearTies(rng_, bias, c.groups);
      lv.insert(lv.end(), row.begin(), row.end());
    }
    Pair logits = MakePair(c.n, c.e, lv);
    RouterParams pc{c.norm, c.bias ? cb->get() : nullptr, c.groups, c.used, c.scale};
    RouterParams pg{c.norm, c.bias ? gb->get() : nullptr, c.groups, c.used, c.scale};
    Routing rc, rg;
    ASSERT_TRUE(cpu_.RouteWith(*logits.cpu, c.k, pc, &rc).ok());
    const absl::Status st = gpu_->RouteWith(*logits.gpu, c.k, pg, &rg);
    ASSERT_TRUE(st.ok()) << what << ": " << st;
    EXPECT_EQ(rg.n_tokens, c.n);
    EXPECT_EQ(rg.k, c.k);
    EXPECT_EQ(rg.expert, rc.expert) << what;
    ExpectAllClose(rg.weight, rc.weight, 1e-30, (32.0 + c.k) * kU, what + " weights");
    // The groups and the bias must matter: without them the CPU picks other experts for some token.
    if (c.bias || c.groups > 1) {
      Routing plain;
      ASSERT_TRUE(cpu_.RouteWith(*logits.cpu, c.k, RouterParams{c.norm, nullptr, 1, 1, c.scale}, &plain).ok());
      EXPECT_NE(plain.expert, rc.expert) << what << ": neither the bias nor the groups changed a choice";
    }
    if (!c.bias && c.groups == 1 && c.scale == 1.0f) {  // Route with a sigmoid norm is RouteWith's
      Routing r2;
      ASSERT_TRUE(gpu_->Route(*logits.gpu, c.k, c.norm, &r2).ok());
      EXPECT_EQ(r2.expert, rg.expert);
    }
  }
  // A softmax norm with a routed scale: Route's weights times the scale; a bias or groups are refused.
  const int n = 6, e = 32, k = 4;
  Pair logits = MakePair(n, e, Normal(rng_, n * e, 2.f));
  Routing plain, scaled;
  ASSERT_TRUE(gpu_->Route(*logits.gpu, k, RouterNorm::kSoftmaxTopKRenormalize, &plain).ok());
  ASSERT_TRUE(gpu_->RouteWith(*logits.gpu, k, RouterParams{RouterNorm::kSoftmaxTopKRenormalize, nullptr, 1, 1, 2.5f},
                              &scaled).ok());
  EXPECT_EQ(plain.expert, scaled.expert);
  for (size_t i = 0; i < plain.weight.size(); ++i) EXPECT_EQ(scaled.weight[i], plain.weight[i] * 2.5f) << i;
  EXPECT_FALSE(gpu_->RouteWith(*logits.gpu, k, RouterParams{RouterNorm::kSoftmaxThenTopK, nullptr, 2, 1, 1.f}, &scaled).ok());
  // Groups that cannot hold k experts, or do not divide them, are errors, not a crash.
  EXPECT_FALSE(gpu_->RouteWith(*logits.gpu, k, RouterParams{RouterNorm::kSigmoidTopK, nullptr, 8, 1, 1.f}, &scaled).ok());
  EXPECT_FALSE(gpu_->RouteWith(*logits.gpu, k, RouterParams{RouterNorm::kSigmoidTopK, nullptr, 5, 2, 1.f}, &scaled).ok());
}

INSTANTIATE_TEST_SUITE_P(GemvOrders, CudaOps, ::testing::ValuesIn(kernels::kGemvOrders),
                         [](const ::testing::TestParamInfo<kernels::GemvOrder>& info) {
                           return std::string(kernels::GemvOrderName(info.param));
                         });

}  // namespace
}  // namespace specgen
