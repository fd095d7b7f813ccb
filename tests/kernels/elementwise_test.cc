// RMSNorm, RoPE, SwiGLU, residual add and embedding lookup against plain CPU loops (double).
#include <cmath>
#include <cstring>

#include "kernels/elementwise.cuh"
#include "kernels/norm.cuh"
#include "kernels/rope.cuh"
#include "tests/common/compare.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;
using ::specgen::testing::ExpectAllClose;
using ::specgen::testing::ExpectAllWithin;
constexpr double kEps32 = 0x1p-24;  // fp32 unit roundoff

void CheckRmsNorm(int rows, int dim, ElemType wtype) {
  auto rng = testing::FreshRng();
  const auto x = testing::RandomNormal(rng, size_t(rows) * dim, 2.f);
  const auto w_bits = testing::ToBf16(testing::RandomNormal(rng, dim));
  const auto w = testing::Bf16Values(w_bits);
  std::vector<uint16_t> w_f16(dim);
  for (int i = 0; i < dim; ++i) w_f16[i] = F32ToF16(w[i]);
  std::vector<double> ref(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
    for (int i = 0; i < dim; ++i) {
      const double wi = wtype == ElemType::kF16 ? F16ToF32(w_f16[i]) : w[i];
      ref[r * dim + i] = x[r * dim + i] * inv * wi;
    }
  }
  DeviceBuffer<float> dx(x), dy(x.size());
  DeviceBuffer<uint16_t> dw(wtype == ElemType::kF16 ? w_f16 : w_bits);
  CUDA_OK(LaunchRmsNorm(dx.get(), dw.get(), wtype, dy.get(), rows, dim, 1e-6f, nullptr));
  // Tolerance: the fp32 sum of squares over dim terms has relative error <= dim * u (u = 2^-24, any
  // order), halved through the square root; rsqrtf (2 ulp) and two products add ~4u. Weights are
  // the same bf16/f16 values on both sides, so nothing of the weight dtype enters.
  const double rtol = (dim / 2.0 + 8) * kEps32;
  const auto y = dy.Download();
  ExpectAllClose(y, ref, 1e-30, rtol, "rmsnorm");
  // In place (the q/k norms run so): the same bits as out of place.
  CUDA_OK(LaunchRmsNorm(dx.get(), dw.get(), wtype, dx.get(), rows, dim, 1e-6f, nullptr));
  const auto in_place = dx.Download();
  EXPECT_EQ(std::memcmp(in_place.data(), y.data(), sizeof(float) * y.size()), 0) << "in place, dim " << dim;
}

TEST(RmsNormGpu, RowsAndPerHead) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckRmsNorm(7, 4096, ElemType::kBF16);     // hidden rows
  CheckRmsNorm(5 * 32, 128, ElemType::kBF16); // q norm: tokens * heads rows of head_dim
  CheckRmsNorm(3, 1000, ElemType::kF16);      // dim not a multiple of the block
  CheckRmsNorm(1, 2048, ElemType::kBF16);     // one token's hidden row: 8 elements a thread
  CheckRmsNorm(2, 8192, ElemType::kBF16);     // past 16 a thread: the loop kernel
}

void CheckRope(RopeStyle style, int rot_dim) {
  auto rng = testing::FreshRng();
  const int tokens = 6, heads = 4, head_dim = 128;
  const double theta = 1e6;
  const auto x = testing::RandomNormal(rng, size_t(tokens) * heads * head_dim);
  std::vector<int32_t> pos(tokens);
  std::uniform_int_distribution<int32_t> pd(0, 40000);
  for (auto& p : pos) p = pd(rng);
  std::vector<double> ref(x.begin(), x.end());
  std::vector<double> tol(x.size(), 0.0);
  const int half = rot_dim / 2;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        const size_t base = (size_t(t) * heads + h) * head_dim;
        const size_t i0 = base + (style == RopeStyle::kRotateHalf ? i : 2 * i);
        const size_t i1 = base + (style == RopeStyle::kRotateHalf ? i + half : 2 * i + 1);
        const double a = pos[t] * std::pow(theta, -2.0 * i / rot_dim);
        const double c = std::cos(a), s = std::sin(a);
        ref[i0] = x[i0] * c - x[i1] * s;
        ref[i1] = x[i0] * s + x[i1] * c;
        // cos/sin rounded to fp32 (u each), two products and a sum (3u): <= 5u (|x0| + |x1|); the
        // angle itself is computed in double on both sides.
        tol[i0] = tol[i1] = 5 * kEps32 * (std::fabs(x[i0]) + std::fabs(x[i1]));
      }
  DeviceBuffer<float> dx(x);
  DeviceBuffer<int32_t> dp(pos);
  CUDA_OK(LaunchRope(dx.get(), dp.get(), tokens, heads, head_dim, rot_dim, theta, style, nullptr));
  ExpectAllWithin(dx.Download(), ref, tol,
                  style == RopeStyle::kRotateHalf ? "rope rotate-half" : "rope interleaved");
}

TEST(RopeGpu, RotateHalfAndInterleaved) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckRope(RopeStyle::kRotateHalf, 128);
  CheckRope(RopeStyle::kInterleaved, 128);
  CheckRope(RopeStyle::kRotateHalf, 64);  // partial rotary: the tail stays untouched (tol 0)
}

TEST(ElementwiseGpu, SwiGluAndAdd) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  const size_t n = 3 * 14336 + 5;
  const auto g = testing::RandomNormal(rng, n, 3.f), u = testing::RandomNormal(rng, n);
  std::vector<double> ref_s(n), ref_a(n);
  for (size_t i = 0; i < n; ++i) {
    ref_s[i] = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
    ref_a[i] = float(g[i] + u[i]);  // fp32 addition is exact-rounded: bit-identical expected
  }
  DeviceBuffer<float> dg(g), du(u), ds(n), da(n);
  CUDA_OK(LaunchSwiGlu(dg.get(), du.get(), ds.get(), n, nullptr));
  CUDA_OK(LaunchAdd(dg.get(), du.get(), da.get(), n, nullptr));
  // expf (<= 2 ulp), 1 + e, the division and two products: <= 8u relative.
  ExpectAllClose(ds.Download(), ref_s, 1e-30, 8 * kEps32, "swiglu");
  ExpectAllClose(da.Download(), ref_a, 0.0, 0.0, "add");
}

TEST(ElementwiseGpu, EmbeddingAllTableTypes) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  const int vocab = 1000, dim = 96, tokens = 9;
  const auto table = testing::RandomNormal(rng, size_t(vocab) * dim);
  std::vector<int32_t> ids(tokens);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  for (auto& i : ids) i = id(rng);
  std::vector<uint16_t> bf(table.size()), f16(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    bf[i] = F32ToBf16(table[i]);
    f16[i] = F32ToF16(table[i]);
  }
  DeviceBuffer<int32_t> dids(ids);
  for (ElemType t : {ElemType::kF32, ElemType::kF16, ElemType::kBF16}) {
    std::vector<double> ref(size_t(tokens) * dim);
    for (int k = 0; k < tokens; ++k)
      for (int d = 0; d < dim; ++d) {
        const size_t s = size_t(ids[k]) * dim + d;
        ref[k * dim + d] = t == ElemType::kF32 ? table[s]
                           : t == ElemType::kF16 ? F16ToF32(f16[s]) : Bf16ToF32(bf[s]);
      }
    DeviceBuffer<float> dt32(table), out(ref.size());
    DeviceBuffer<uint16_t> dt16(t == ElemType::kF16 ? f16 : bf);
    const void* tp = t == ElemType::kF32 ? static_cast<const void*>(dt32.get()) : dt16.get();
    CUDA_OK(LaunchEmbedding(tp, t, vocab, dim, dids.get(), tokens, out.get(), nullptr));
    // A gather and an exact widening: bit-identical.
    ExpectAllClose(out.Download(), ref, 0.0, 0.0, "embedding");
  }
}

TEST(ElementwiseGpu, BadShapesAreErrorsNotCrashes) {
  SPECGEN_SKIP_WITHOUT_GPU();
  EXPECT_EQ(LaunchRope(nullptr, nullptr, 1, 1, 128, 127, 1e4, RopeStyle::kRotateHalf, nullptr),
            cudaErrorInvalidValue);
  const absl::Status s = SPECGEN_CUDA_STATUS(LaunchRmsNorm(nullptr, nullptr, ElemType::kF32, nullptr,
                                                           1, 0, 1e-6f, nullptr));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("LaunchRmsNorm"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("elementwise_test.cc"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace specgen::kernels
