// Small-batch GEMV against a CPU loop, and its batch invariance (bit-exact rows for n = 1..16).
#include <cmath>
#include <cstring>

#include "kernels/gemv.cuh"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;
using testing::ExpectAllClose;

void CheckGemv(int n, int out, int in, ElemType wtype) {
  auto rng = testing::FreshRng();
  const auto wf = testing::RandomNormal(rng, size_t(out) * in, 0.05f);
  const auto x = testing::RandomNormal(rng, size_t(n) * in);
  std::vector<uint16_t> wbits(wf.size());
  std::vector<float> wv(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    wbits[i] = wtype == ElemType::kBF16 ? F32ToBf16(wf[i]) : F32ToF16(wf[i]);
    wv[i] = wtype == ElemType::kBF16 ? Bf16ToF32(wbits[i]) : F16ToF32(wbits[i]);
  }
  std::vector<double> ref(size_t(n) * out), abs_sum(size_t(n) * out);
  for (int t = 0; t < n; ++t)
    for (int o = 0; o < out; ++o) {
      double s = 0, a = 0;
      for (int k = 0; k < in; ++k) {
        const double p = double(wv[size_t(o) * in + k]) * x[size_t(t) * in + k];
        s += p;
        a += std::fabs(p);
      }
      ref[size_t(t) * out + o] = s;
      abs_sum[size_t(t) * out + o] = a;
    }
  DeviceBuffer<uint16_t> dw(wbits);
  DeviceBuffer<float> dx(x), dy(size_t(n) * out);
  CUDA_OK(LaunchGemv(dw.get(), wtype, dx.get(), dy.get(), n, out, in, cudaStreamPerThread));
  // Tolerance: the reference uses the very same bf16/f16 weight values (the dtype's own rounding,
  // ~sqrt(in) 2^-8 |w||x| against fp32 weights, is the model's, not the kernel's), so what differs is
  // only the fp32 accumulation order: |error| <= in * 2^-24 * sum_k |w_k x_k| (rigorous, any order).
  // A wrong index or dropped chunk errs by ~|w||x| per term, far above it.
  ExpectAllClose(dy.Download(), ref, [&](size_t i) { return in * 0x1p-24 * abs_sum[i]; },
                 "gemv n=" + std::to_string(n));
}

TEST(GemvGpu, MatchesCpuAcrossBatchSizesAndTypes) {
  SPECGEN_SKIP_WITHOUT_GPU();
  for (int n : {1, 2, 3, 5, 8, 9, 16}) CheckGemv(n, 1000, 4096, ElemType::kBF16);
  CheckGemv(4, 777, 2056, ElemType::kF16);  // in not a multiple of 256, out not of the block rows
  CheckGemv(16, 64, 8, ElemType::kBF16);    // in = one chunk
}

// DESIGN.md §6: a row's result must not depend on how many tokens share the call.
TEST(GemvGpu, BatchInvariantBitForBit) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  const int out = 1536, in = 4096;
  const auto wbits = testing::ToBf16(testing::RandomNormal(rng, size_t(out) * in, 0.05f));
  const auto x = testing::RandomNormal(rng, size_t(kGemvMaxTokens) * in);
  DeviceBuffer<uint16_t> dw(wbits);
  DeviceBuffer<float> dx(x), dy(size_t(kGemvMaxTokens) * out);
  CUDA_OK(LaunchGemv(dw.get(), ElemType::kBF16, dx.get(), dy.get(), kGemvMaxTokens, out, in, nullptr));
  const auto full = dy.Download();
  for (int n = 1; n <= kGemvMaxTokens; ++n) {
    // Rows t..t+n-1 of x as their own batch, for a few offsets t.
    for (int t0 : {0, kGemvMaxTokens - n}) {
      dy.Poison();
      CUDA_OK(LaunchGemv(dw.get(), ElemType::kBF16, dx.get() + size_t(t0) * in, dy.get(), n, out,
                         in, nullptr));
      const auto part = dy.Download();
      for (int t = 0; t < n; ++t)
        for (int o = 0; o < out; ++o) {
          const float a = part[size_t(t) * out + o], b = full[size_t(t0 + t) * out + o];
          ASSERT_EQ(std::memcmp(&a, &b, 4), 0)
              << "n=" << n << " row " << t0 + t << " out " << o << ": " << a << " vs " << b;
        }
    }
  }
}

TEST(GemvGpu, RejectsBadShapes) {
  SPECGEN_SKIP_WITHOUT_GPU();
  DeviceBuffer<uint16_t> w(64 * 16);
  DeviceBuffer<float> x(17 * 16), y(17 * 64);
  EXPECT_EQ(LaunchGemv(w.get(), ElemType::kBF16, x.get(), y.get(), 17, 64, 16, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchGemv(w.get(), ElemType::kBF16, x.get(), y.get(), 1, 64, 12, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchGemv(w.get(), ElemType::kF32, x.get(), y.get(), 1, 64, 16, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace specgen::kernels
