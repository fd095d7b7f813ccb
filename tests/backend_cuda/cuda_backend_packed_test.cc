// CudaBackend with weights kept packed (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K matrices uploaded as their blocks)
// against the CPU reference (CpuBackend, which dequantizes them to fp32 with the same bits), on fresh
// random blocks every run (tests/common/random_blocks.h). Tolerances, u = 2^-24:
//  - MatMul of 1..16 rows: both backends multiply the same dequantized values, each summing in its own
//    fp32 order, so they differ by at most 2·K·u·Σ|w x| (each within K·u·Σ|w x| of the exact sum).
//  - MatMul of more rows (the prefill path): weights and x rounded to bf16 (2^-9 relative each, so
//    2^-8 + 2^-18 a product) before cuBLAS sums in fp32: (2^-8 + 2^-18 + 2·K·u)·Σ|w x|.
//  - Embed: exact.
// Bit for bit: a row's product alone and inside 16 rows, the fused ops against their Backend
// defaults, and device-routed experts against host routing with per-role types (Q4_K gate/up with a
// Q6_K down, as Q4_K_M files have them). NaN fails everywhere.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/routed_experts.h"
#include "engine/core/dtype.h"
#include "engine/core/quant.h"
#include "gtest/gtest.h"
#include "tests/common/compare.h"
#include "tests/common/gpu_test_env.h"
#include "tests/common/random_blocks.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen {
namespace {

using testing::ExpectAllWithin;

constexpr double kU = 0x1p-24;
constexpr DType kPacked[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

struct HostBlocks {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  TensorView View() const {
    TensorView t;
    t.dtype = dtype;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.data = bytes.data();
    t.bytes = bytes.size();
    return t;
  }
  std::vector<float> Values() const {
    std::vector<float> v(static_cast<size_t>(rows * cols));
    EXPECT_TRUE(DequantizeRows(dtype, bytes.data(), rows, cols, v.data()).ok());
    return v;
  }
};

class CudaPacked : public ::testing::Test {
 protected:
  void SetUp() override {
    SPECGEN_SKIP_WITHOUT_CUDA();
    gpu_ = testing::TestCudaBackend(size_t{1} << 30);
    ASSERT_NE(gpu_, nullptr);
    rng_ = kernels::testing::FreshRng();
  }
  HostBlocks Blocks(DType t, int64_t rows, int64_t cols) {
    return HostBlocks{t, rows, cols, testing::RandomBlocks(rng_, t, rows, cols)};
  }
  std::unique_ptr<Buffer> GpuBuffer(int64_t rows, int64_t cols, const std::vector<float>& v) {
    auto b = *gpu_->NewBuffer(rows, cols);
    EXPECT_TRUE(gpu_->Write(v, b.get()).ok());
    return b;
  }
  std::vector<float> Read(const Buffer& b) {
    std::vector<float> v(b.rows() * b.cols());
    EXPECT_TRUE(gpu_->Read(b, v).ok());
    return v;
  }
  std::vector<float> Normal(size_t n, float sd = 1.f) {
    std::normal_distribution<float> d(0.f, sd);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }

  CpuBackend cpu_{1};
  std::unique_ptr<CudaBackend> gpu_;
  std::mt19937_64 rng_;
};

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << what << " element " << i;
    ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST_F(CudaPacked, UploadKeepsThePackedBytes) {
  for (DType t : kPacked) {
    const HostBlocks h = Blocks(t, 64, 512);
    const size_t before = gpu_->arena().used();
    auto w = gpu_->Upload(h.View(), "w");
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(CudaBackend::Type(**w), t == DType::kQ8_0   ? kernels::ElemType::kQ8_0
                                      : t == DType::kQ4_0 ? kernels::ElemType::kQ4_0
                                      : t == DType::kQ4_K ? kernels::ElemType::kQ4_K
                                      : t == DType::kQ5_K ? kernels::ElemType::kQ5_K
                                      : t == DType::kQ6_K ? kernels::ElemType::kQ6_K
                                                          : kernels::ElemType::kMXFP4);
    // The arena rounds blocks up to its alignment, never to the bf16 size (twice Q8_0's and more).
    EXPECT_GE(gpu_->arena().used() - before, h.bytes.size()) << Name(t);
    EXPECT_LT(gpu_->arena().used() - before, h.bytes.size() + 4096) << Name(t);
  }
}

TEST_F(CudaPacked, MatMulAndEmbedMatchCpu) {
  struct Shape { int n, out, in; };
  for (DType t : kPacked) {
    for (Shape s : {Shape{1, 150, 512}, Shape{5, 64, 768}, Shape{16, 70, 2048}, Shape{17, 40, 256},
                    Shape{40, 300, 1024}}) {
      const std::string what = std::string(Name(t)) + " n=" + std::to_string(s.n) + " out=" + std::to_string(s.out) +
                               " in=" + std::to_string(s.in);
      const HostBlocks h = Blocks(t, s.out, s.in);
      const std::vector<float> w = h.Values();
      auto cw = cpu_.Upload(h.View(), "w");
      auto gw = gpu_->Upload(h.View(), "w");
      ASSERT_TRUE(cw.ok() && gw.ok()) << gw.status();
      const std::vector<float> xv = Normal(size_t(s.n) * s.in);
      auto xc = *cpu_.NewBuffer(s.n, s.in), yc = *cpu_.NewBuffer(s.n, s.out);
      ASSERT_TRUE(cpu_.Write(xv, xc.get()).ok());
      auto xg = GpuBuffer(s.n, s.in, xv);
      auto yg = GpuBuffer(s.n, s.out, std::vector<float>(size_t(s.n) * s.out, std::nanf("")));
      ASSERT_TRUE(cpu_.MatMul(*xc, **cw, yc.get()).ok());
      ASSERT_TRUE(gpu_->MatMul(*xg, **gw, yg.get()).ok()) << what;
      // Up to 16 rows both sides compute the packed product's one definition (equal bits: the bound
      // below is not needed there). The prefill (more rows) multiplies the dequantized weights on bf16
      // activations by cuBLAS, while the CPU quantizes each 32-block of x to int8 (step d_b = max|x| /
      // 127): each side's rounding of x bounds its error, 2^-8 relative for bf16, d_b / 2 (+ 2^-15 d_b)
      // an element for the int8 codes.
      const bool prefill = s.n > 16;
      std::vector<double> tol(size_t(s.n) * s.out);
      for (int tok = 0; tok < s.n; ++tok)
        for (int o = 0; o < s.out; ++o) {
          double a = 0, q = 0;
          for (int b = 0; b < s.in / 32; ++b) {
            double amax = 0, wabs = 0;
            for (int k = 32 * b; k < 32 * b + 32; ++k) {
              amax = std::max(amax, std::fabs(double(xv[size_t(tok) * s.in + k])));
              wabs += std::fabs(double(w[size_t(o) * s.in + k]));
              a += std::fabs(double(w[size_t(o) * s.in + k]) * xv[size_t(tok) * s.in + k]);
            }
            q += amax / 127 * (0.5 + 0x1p-15) * wabs;
          }
          tol[size_t(tok) * s.out + o] = ((prefill ? 0x1p-8 + 0x1p-18 : 0.0) + 2.0 * s.in * kU) * a + (prefill ? q : 0) + 1e-30;
        }
      const float* c = CpuBackend::Data(*yc);
      ExpectAllWithin(Read(*yg), std::vector<float>(c, c + size_t(s.n) * s.out), tol, "MatMul " + what);
    }
    // Embed: rows of the packed table, the CPU's fp32 values exactly.
    const HostBlocks table = Blocks(t, 97, 512);
    auto ct = cpu_.Upload(table.View(), "table");
    auto gt = gpu_->Upload(table.View(), "table");
    ASSERT_TRUE(ct.ok() && gt.ok());
    const std::vector<int32_t> ids = {3, 96, 0, 3, 50};
    auto ec = *cpu_.NewBuffer(5, 512);
    auto eg = GpuBuffer(5, 512, std::vector<float>(5 * 512, std::nanf("")));
    ASSERT_TRUE(cpu_.Embed(**ct, ids, ec.get()).ok());
    ASSERT_TRUE(gpu_->Embed(**gt, ids, eg.get()).ok());
    const float* c = CpuBackend::Data(*ec);
    ExpectSameBits(Read(*eg), std::vector<float>(c, c + 5 * 512), std::string("Embed ") + std::string(Name(t)));
  }
}

TEST_F(CudaPacked, MatMulIsBatchInvariantAndFusedOpsEqualTheirOps) {
  for (DType t : kPacked) {
    const int in = 512, out = 96, ffn = 256;
    const HostBlocks hq = Blocks(t, out, in), hk = Blocks(t, 32, in), hv = Blocks(t, 32, in), hg = Blocks(t, ffn, in),
                     hu = Blocks(t, ffn, in), ho = Blocks(t, in, ffn);
    std::vector<std::unique_ptr<Weight>> w;
    for (const HostBlocks* h : {&hq, &hk, &hv, &hg, &hu, &ho}) {
      auto u = gpu_->Upload(h->View(), "w");
      ASSERT_TRUE(u.ok()) << u.status();
      w.push_back(std::move(u).value());
    }
    // A row alone equals the same row inside 16.
    const std::vector<float> xv = Normal(16 * in);
    auto x16 = GpuBuffer(16, in, xv), y16 = *gpu_->NewBuffer(16, out);
    ASSERT_TRUE(gpu_->MatMul(*x16, *w[0], y16.get()).ok());
    const std::vector<float> full = Read(*y16);
    for (int r : {0, 9, 15}) {
      auto x1 = GpuBuffer(1, in, std::vector<float>(xv.begin() + r * in, xv.begin() + (r + 1) * in));
      auto y1 = *gpu_->NewBuffer(1, out);
      ASSERT_TRUE(gpu_->MatMul(*x1, *w[0], y1.get()).ok());
      ExpectSameBits(Read(*y1), std::vector<float>(full.begin() + r * out, full.begin() + (r + 1) * out),
                     std::string(Name(t)) + " row " + std::to_string(r));
    }
    // The fused ops in one launch against the Backend's defaults (MatMul, SwiGlu, Add).
    for (int n : {1, 6, 16}) {
      const auto xs = Normal(size_t(n) * in), hs = Normal(size_t(n) * in);
      std::vector<std::vector<float>> got[2];
      for (int fused = 0; fused < 2; ++fused) {
        auto x = GpuBuffer(n, in, xs), h = GpuBuffer(n, in, hs), scratch = *gpu_->NewBuffer(n, in);
        auto q = *gpu_->NewBuffer(n, out), k = *gpu_->NewBuffer(n, 32), v = *gpu_->NewBuffer(n, 32);
        auto g = *gpu_->NewBuffer(n, ffn), u = *gpu_->NewBuffer(n, ffn);
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
        got[fused] = {Read(*q), Read(*k), Read(*v), Read(*g), Read(*h)};
      }
      const char* names[] = {"q", "k", "v", "SwiGLU", "residual"};
      for (int i = 0; i < 5; ++i) {
        ExpectSameBits(got[1][i], got[0][i], std::string(Name(t)) + " " + names[i] + " n=" + std::to_string(n));
      }
    }
  }
}

// Device routing (RouteAndRunExperts) against host routing (RunRoutedExperts: Route, then MatMul on each
// expert's gathered rows), bit for bit, with gate/up and down of their own packed types.
TEST_F(CudaPacked, RoutedExpertsWithPerRoleTypesEqualHostRouting) {
  const int experts = 10, hidden = 512, ffn = 256;
  struct Roles { DType gate_up, down; };
  for (Roles roles : {Roles{DType::kQ4_K, DType::kQ6_K}, Roles{DType::kQ8_0, DType::kQ8_0}, Roles{DType::kMXFP4, DType::kMXFP4},
                      Roles{DType::kQ5_K, DType::kQ4_0}}) {
    const std::string types = std::string(Name(roles.gate_up)) + "/" + std::string(Name(roles.down));
    std::vector<std::unique_ptr<Weight>> uploaded;
    ExpertWeights refs;
    for (int e = 0; e < experts; ++e) {
      for (int part = 0; part < 3; ++part) {
        const HostBlocks h = part < 2 ? Blocks(roles.gate_up, ffn, hidden) : Blocks(roles.down, hidden, ffn);
        auto w = gpu_->Upload(h.View(), "expert");
        ASSERT_TRUE(w.ok()) << w.status();
        (part == 0 ? refs.gate : part == 1 ? refs.up : refs.down).push_back(w->get());
        uploaded.push_back(std::move(*w));
      }
    }
    auto set = gpu_->PrepareExperts(refs);
    ASSERT_TRUE(set.ok()) << set.status();
    ASSERT_NE(*set, nullptr) << types << ": per-role packed types must stay on the device path";
    for (int n : {1, 3, 6, 16}) {  // each kernel size: 1, up to 4, up to 8 (x staged), 16
      const int k = 4;
      const std::string what = types + " n=" + std::to_string(n);
      const std::vector<float> nan(size_t(n) * hidden, std::nanf(""));
      auto x = GpuBuffer(n, hidden, Normal(size_t(n) * hidden));
      auto logits = GpuBuffer(n, experts, Normal(size_t(n) * experts, 2.f));
      auto host_out = GpuBuffer(n, hidden, nan), dev_out = GpuBuffer(n, hidden, nan);
      auto xe = *gpu_->NewBuffer(n, hidden), ye = *gpu_->NewBuffer(n, hidden);
      auto ge = *gpu_->NewBuffer(n, ffn), ue = *gpu_->NewBuffer(n, ffn);
      ASSERT_TRUE(RunRoutedExperts(*gpu_, *x, *logits, k, RouterNorm::kSoftmaxTopKRenormalize, refs,
                                   {xe.get(), ye.get(), ge.get(), ue.get()}, host_out.get())
                      .ok());
      auto ran = gpu_->RouteAndRunExperts(*x, *logits, k, RouterNorm::kSoftmaxTopKRenormalize, **set, dev_out.get(),
                                          false);
      ASSERT_TRUE(ran.ok()) << ran.status();
      ASSERT_TRUE(*ran) << what;
      ExpectSameBits(Read(*dev_out), Read(*host_out), what);
    }
  }
  // Packed gate/up with a plain down: no device set (host routing), not a wrong launch.
  const HostBlocks g = Blocks(DType::kQ4_K, ffn, hidden);
  auto wg = *gpu_->Upload(g.View(), "g");
  std::vector<uint16_t> bf(size_t(hidden) * ffn, 0x3f80);
  TensorView dv;
  dv.dtype = DType::kBF16;
  dv.ndim = 2;
  dv.shape[0] = hidden;
  dv.shape[1] = ffn;
  dv.data = bf.data();
  dv.bytes = bf.size() * 2;
  auto wd = *gpu_->Upload(dv, "d");
  auto mixed = gpu_->PrepareExperts({{wg.get()}, {wg.get()}, {wd.get()}});
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(*mixed, nullptr);
}

}  // namespace
}  // namespace specgen
