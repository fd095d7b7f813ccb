// Small-batch GEMV against a CPU loop, and its batch invariance (bit-exact rows for n = 1..16), in both
// reduction orders (GemvOrder: CUDA-core FMAs and tensor cores); the fused decode GEMV (RMSNorm prologue, several matrices, SwiGLU / residual epilogues) bit-identical to
// the separate kernels it replaces; the split-row residual GEMV against a CPU loop.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/decode_fused.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/gemv.cuh"
#include "kernels/norm.cuh"
#include "kernels/split_row_gemv.cuh"
#include "tests/common/compare.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;
using ::specgen::testing::ExpectAllWithin;

// Weights rounded to wtype (bf16 or f16): the bits the kernel reads and their exact fp32 values, which
// the references below multiply (so that only the kernels' accumulation order is under test).
struct RoundedWeights {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
RoundedWeights Round(const std::vector<float>& wf, ElemType wtype) {
  RoundedWeights w{std::vector<uint16_t>(wf.size()), std::vector<float>(wf.size())};
  for (size_t i = 0; i < wf.size(); ++i) {
    w.bits[i] = wtype == ElemType::kBF16 ? F32ToBf16(wf[i]) : F32ToF16(wf[i]);
    w.values[i] = wtype == ElemType::kBF16 ? Bf16ToF32(w.bits[i]) : F16ToF32(w.bits[i]);
  }
  return w;
}

// *sum += sum_k w[k] x[k] and *abs_sum += sum_k |w[k] x[k]| over k < in, in double.
void AddDot(const float* w, const float* x, int in, double* sum, double* abs_sum) {
  for (int k = 0; k < in; ++k) {
    const double p = double(w[k]) * x[k];
    *sum += p;
    *abs_sum += std::fabs(p);
  }
}

void CheckGemv(int n, int out, int in, ElemType wtype, GemvOrder order) {
  auto rng = testing::FreshRng();
  const auto wf = testing::RandomNormal(rng, size_t(out) * in, 0.05f);
  const auto x = testing::RandomNormal(rng, size_t(n) * in);
  const RoundedWeights w = Round(wf, wtype);
  std::vector<double> ref(size_t(n) * out), abs_sum(size_t(n) * out);
  for (int t = 0; t < n; ++t)
    for (int o = 0; o < out; ++o) {
      const size_t i = size_t(t) * out + o;
      AddDot(&w.values[size_t(o) * in], &x[size_t(t) * in], in, &ref[i], &abs_sum[i]);
    }
  DeviceBuffer<uint16_t> dw(w.bits);
  DeviceBuffer<float> dx(x), dy(size_t(n) * out);
  CUDA_OK(LaunchGemv(dw.get(), wtype, dx.get(), dy.get(), n, out, in, cudaStreamPerThread, order));
  // Tolerance: the reference uses the very same bf16/f16 weight values (the dtype's own rounding,
  // ~sqrt(in) 2^-8 |w||x| against fp32 weights, is the model's, not the kernel's), so what differs is
  // only the fp32 accumulation order: |error| <= in * 2^-24 * sum_k |w_k x_k| (rigorous, any order).
  // The tensor-core order adds two things: x enters as bf16 hi + lo, which leaves |x - hi - lo| <=
  // 2^-9 * 2^-9 |x| = 2^-18 |x| of each product out (the products themselves are exact in fp32), and
  // the mma unit may truncate rather than round its fp32 sums (one ulp, 2^-23, a step instead of half).
  // A wrong index or dropped chunk errs by ~|w||x| per term, far above either.
  const bool tensor = GemvTensorOrder(order, wtype, in);
  const double per_sum = tensor ? in * 0x1p-23 + 0x1p-18 : in * 0x1p-24;
  ExpectAllWithin(dy.Download(), ref, [&](size_t i) { return per_sum * abs_sum[i]; },
                  std::string("gemv ") + GemvOrderName(order) + " n=" + std::to_string(n));
}

TEST(GemvGpu, MatchesCpuAcrossBatchSizesAndTypes) {
  SPECGEN_SKIP_WITHOUT_GPU();
  for (GemvOrder order : kGemvOrders) {
    for (int n : {1, 2, 3, 5, 8, 9, 16}) CheckGemv(n, 1000, 4096, ElemType::kBF16, order);
    CheckGemv(4, 777, 2056, ElemType::kF16, order);  // in not a multiple of 256, out not of the block rows
    CheckGemv(16, 64, 8, ElemType::kBF16, order);    // in = one chunk (FMA in both orders: not a multiple of 32)
    // Few long rows (qwen3-1.7b's down projection; on a 132-multiprocessor device the kernels of 2 rows
    // a warp and 4 or 8 chunks a lane).
    for (int n : {2, 5, 9}) {
      CheckGemv(n, 2048, 6152, ElemType::kBF16, order);  // FMA in both orders (not a multiple of 32)
      CheckGemv(n, 2048, 6144, ElemType::kBF16, order);
    }
    // Tensor cores: a 16-row tile cut by the matrix's end (out % 16), 16 parts of a 4096-input row.
    for (int n : {1, 7, 16}) CheckGemv(n, 40, 4096, ElemType::kBF16, order);
  }
}

// The order is a real choice: the same product in the two orders differs in the last bits somewhere
// (x's hi + lo split and the mma's sums against the lanes' fmaf chains), so a backend that ignored it
// would fail here; and a product the tensor cores do not take (in % 32 != 0) is the FMA's in both.
TEST(GemvGpu, OrdersDifferWhereTensorCoresApply) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (int in : {4096, 4104}) {
    const int n = 5, out = 1000;
    DeviceBuffer<uint16_t> dw(testing::ToBf16(testing::RandomNormal(rng, size_t(out) * in, 0.05f)));
    DeviceBuffer<float> dx(testing::RandomNormal(rng, size_t(n) * in)), dy(size_t(n) * out);
    std::vector<float> y[2];
    for (int o = 0; o < 2; ++o) {
      dy.Poison();
      CUDA_OK(LaunchGemv(dw.get(), ElemType::kBF16, dx.get(), dy.get(), n, out, in, nullptr, kGemvOrders[o]));
      y[o] = dy.Download();
    }
    size_t differ = 0;
    for (size_t i = 0; i < y[0].size(); ++i) differ += std::memcmp(&y[0][i], &y[1][i], 4) != 0;
    EXPECT_EQ(GemvTensorOrder(GemvOrder::kTensorCores, ElemType::kBF16, in), in % 32 == 0);
    if (in % 32 == 0) {
      EXPECT_GT(differ, 0u) << "in=" << in << ": the tensor-core order gave the FMA order's bits everywhere";
    } else {
      EXPECT_EQ(differ, 0u) << "in=" << in << ": not a tensor-core shape, yet the orders differ";
    }
  }
}

// docs/design.md §6.6: a row's result must not depend on how many tokens share the call.
TEST(GemvGpu, BatchInvariantBitForBit) {
  SPECGEN_SKIP_WITHOUT_GPU();
  for (GemvOrder order : kGemvOrders) {
  SCOPED_TRACE(GemvOrderName(order));
  auto rng = testing::FreshRng();
  const int out = 1536, in = 4096;
  const auto wbits = testing::ToBf16(testing::RandomNormal(rng, size_t(out) * in, 0.05f));
  const auto x = testing::RandomNormal(rng, size_t(kGemvMaxTokens) * in);
  DeviceBuffer<uint16_t> dw(wbits);
  DeviceBuffer<float> dx(x), dy(size_t(kGemvMaxTokens) * out);
  CUDA_OK(LaunchGemv(dw.get(), ElemType::kBF16, dx.get(), dy.get(), kGemvMaxTokens, out, in, nullptr, order));
  const auto full = dy.Download();
  for (int n = 1; n <= kGemvMaxTokens; ++n) {
    // Rows t..t+n-1 of x as their own batch, for a few offsets t.
    for (int t0 : {0, kGemvMaxTokens - n}) {
      dy.Poison();
      CUDA_OK(LaunchGemv(dw.get(), ElemType::kBF16, dx.get() + size_t(t0) * in, dy.get(), n, out,
                         in, nullptr, order));
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
}

// The rows a warp takes (4, 2 or 1 from 3 tokens, by how many rows the matrix has; 2 at 2 tokens) and
// the chunks a lane keeps in flight (more for few long rows) must not change a row's bits: the first
// 1000 rows of a 4096-row product (4 a warp), of its first 2048 rows (2 on a GPU of up to 256
// multiprocessors; from 2048 inputs 4 or 8 chunks a lane, at 5 tokens with x staged in shared memory)
// and alone (1), at 2, 5, 9 and 16 tokens, for
// short rows and long ones (4104 inputs: a partial last chunk past 4096).
TEST(GemvGpu, RowsPerWarpDoNotChangeBits) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (GemvOrder order : kGemvOrders)
  for (int in : {2048, 4104}) {
    SCOPED_TRACE(GemvOrderName(order));
    const auto wbits = testing::ToBf16(testing::RandomNormal(rng, size_t(4096) * in, 0.05f));
    DeviceBuffer<uint16_t> dw(wbits);
    for (int n : {2, 5, 9, 16}) {
      const auto x = testing::RandomNormal(rng, size_t(n) * in);
      DeviceBuffer<float> dx(x);
      std::vector<std::vector<float>> firsts;
      for (int out : {4096, 2048, 1000}) {
        DeviceBuffer<float> dy(size_t(n) * out);
        dy.Poison();
        CUDA_OK(LaunchGemv(dw.get(), ElemType::kBF16, dx.get(), dy.get(), n, out, in, nullptr, order));
        const auto y = dy.Download();
        std::vector<float> first;
        for (int t = 0; t < n; ++t) first.insert(first.end(), y.begin() + size_t(t) * out, y.begin() + size_t(t) * out + 1000);
        for (float v : first) ASSERT_TRUE(std::isfinite(v));
        firsts.push_back(std::move(first));
      }
      // In the tensor-core order the row count picks the parts a row is split over (GemvOrderParts),
      // and so its bits: launches are compared where their parts agree (in the FMA order, all).
      const int outs[3] = {4096, 2048, 1000};
      int compared = 0;
      for (size_t i = 0; i < firsts.size(); ++i)
        for (size_t j = i + 1; j < firsts.size(); ++j) {
          if (GemvOrderParts(order, ElemType::kBF16, outs[i], in) !=
              GemvOrderParts(order, ElemType::kBF16, outs[j], in)) {
            continue;
          }
          ++compared;
          EXPECT_EQ(std::memcmp(firsts[i].data(), firsts[j].data(), sizeof(float) * firsts[0].size()), 0)
              << "in=" << in << " n=" << n << ": the first 1000 rows differ between the " << outs[i] << "- and "
              << outs[j] << "-row launches";
        }
      // At least one pair shares its parts in each order (else the test would check nothing).
      EXPECT_GE(compared, 1) << "in=" << in;
    }
  }
}

// LaunchGemvSegments against LaunchGemv per matrix (+ LaunchAdd / LaunchSwiGlu): the same bits for
// every n, so the Backend's fused q/k/v, residual and gate/up products keep batch invariance and equal
// the ops they replace.
// in: 1032 (not a multiple of 256: a partial last chunk; FMA in both orders) or 1024 (a multiple of 32:
// tensor cores in GemvOrder::kTensorCores). rows: the segments' (default: q/k/v-, residual- or
// gate/up-like).
void CheckGemvSegments(int n, GemvEpilogue epi, ElemType wtype, GemvOrder order, int in = 1032,
                       std::vector<int> rows = {}) {
  auto rng = testing::FreshRng();
  if (rows.empty()) {
    rows = epi == GemvEpilogue::kSwiGlu ? std::vector<int>{300, 300}
           : epi == GemvEpilogue::kAddTo ? std::vector<int>{257}
                                         : std::vector<int>{256, 129, 64};
  }
  const auto x = testing::RandomNormal(rng, size_t(n) * in);
  DeviceBuffer<float> dx(x);
  std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> dw;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> got, ref;
  std::vector<GemvSegment> segs;
  for (int r : rows) {
    const auto w = Round(testing::RandomNormal(rng, size_t(r) * in, 0.05f), wtype);
    dw.push_back(std::make_unique<DeviceBuffer<uint16_t>>(w.bits));
    const auto y0 = testing::RandomNormal(rng, size_t(n) * r);  // the residual kAddTo adds to
    got.push_back(std::make_unique<DeviceBuffer<float>>(y0));
    ref.push_back(std::make_unique<DeviceBuffer<float>>(y0));
    if (epi != GemvEpilogue::kAddTo) got.back()->Poison();
    segs.push_back(GemvSegment{dw.back()->get(), got.back()->get(), r});
  }
  CUDA_OK(LaunchGemvSegments(segs.data(), int(segs.size()), wtype, dx.get(), n, in, epi, nullptr, order));
  // The separate kernels.
  DeviceBuffer<float> prod(size_t(n) * rows[0]), up(size_t(n) * rows[0]);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (epi == GemvEpilogue::kStore) {
      CUDA_OK(LaunchGemv(dw[i]->get(), wtype, dx.get(), ref[i]->get(), n, rows[i], in, nullptr, order));
    } else if (epi == GemvEpilogue::kAddTo) {
      CUDA_OK(LaunchGemv(dw[i]->get(), wtype, dx.get(), prod.get(), n, rows[i], in, nullptr, order));
      CUDA_OK(LaunchAdd(ref[i]->get(), prod.get(), ref[i]->get(), int64_t(n) * rows[i], nullptr));
    }
  }
  if (epi == GemvEpilogue::kSwiGlu) {
    CUDA_OK(LaunchGemv(dw[0]->get(), wtype, dx.get(), prod.get(), n, rows[0], in, nullptr, order));
    CUDA_OK(LaunchGemv(dw[1]->get(), wtype, dx.get(), up.get(), n, rows[1], in, nullptr, order));
    CUDA_OK(LaunchSwiGlu(prod.get(), up.get(), ref[0]->get(), int64_t(n) * rows[0], nullptr));
  }
  const size_t outputs = epi == GemvEpilogue::kSwiGlu ? 1 : rows.size();
  for (size_t i = 0; i < outputs; ++i) {
    const auto a = got[i]->Download(), b = ref[i]->Download();
    for (float v : a) ASSERT_TRUE(std::isfinite(v)) << "segment " << i;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()), 0)
        << "gemv segments " << GemvOrderName(order) << " n=" << n << " in=" << in << " epilogue " << int(epi)
        << " segment " << i << " differs";
  }
}

TEST(GemvGpu, SegmentsAndEpiloguesEqualSeparateKernels) {
  SPECGEN_SKIP_WITHOUT_GPU();
  for (GemvOrder order : kGemvOrders) {
    for (int n : {1, 2, 3, 5, 9, 16}) {
      // q, k, v in one launch; O / down + the residual; gate/up + SwiGLU; each at both input lengths.
      for (GemvEpilogue epi : {GemvEpilogue::kStore, GemvEpilogue::kAddTo, GemvEpilogue::kSwiGlu}) {
        CheckGemvSegments(n, epi, ElemType::kBF16, order);
        CheckGemvSegments(n, epi, ElemType::kBF16, order, 1024);
      }
    }
    CheckGemvSegments(4, GemvEpilogue::kSwiGlu, ElemType::kF16, order);
    // Segments of very different row counts: in the tensor-core order their parts differ (1024 vs 16
    // tiles of 16 rows), so the launch must reduce each as LaunchGemv on it alone would.
    CheckGemvSegments(5, GemvEpilogue::kStore, ElemType::kBF16, order, 1024, {16384, 256});
  }
}

// LaunchFusedGemv against LaunchRmsNorm + LaunchGemv in the FMA order (the draft's fused decode has no
// other) (+ LaunchSwiGlu / LaunchAdd) for one token: the same bits, whatever the grid bound (rows are walked grid-stride). `in` not a multiple of 256 covers a
// partial last batch of the staged activation.
void CheckFusedGemv(int in, std::vector<int> rows, GemvEpilogue epi, bool norm, int max_blocks) {
  auto rng = testing::FreshRng();
  const auto x = testing::RandomNormal(rng, size_t(in));
  const auto norm_w = testing::ToBf16(testing::RandomNormal(rng, size_t(in)));
  DeviceBuffer<float> dx(x), dxn(static_cast<size_t>(in));
  DeviceBuffer<uint16_t> dnorm(norm_w);
  std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> w;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> y_ref, y_fused;
  std::vector<std::vector<float>> start;  // kAddTo: the residual both start from
  for (int r : rows) {
    w.push_back(std::make_unique<DeviceBuffer<uint16_t>>(
        testing::ToBf16(testing::RandomNormal(rng, size_t(r) * in, 0.05f))));
    start.push_back(testing::RandomNormal(rng, size_t(r)));
    y_ref.push_back(std::make_unique<DeviceBuffer<float>>(start.back()));
    y_fused.push_back(std::make_unique<DeviceBuffer<float>>(start.back()));
  }
  const float eps = 1e-6f;
  const float* xin = dx.get();
  if (norm) {
    CUDA_OK(LaunchRmsNorm(dx.get(), dnorm.get(), ElemType::kBF16, dxn.get(), 1, in, eps, nullptr));
    xin = dxn.get();
  }
  std::vector<GemvSegment> segs;
  for (size_t i = 0; i < rows.size(); ++i) {
    DeviceBuffer<float> tmp(static_cast<size_t>(rows[i]));
    CUDA_OK(LaunchGemv(w[i]->get(), ElemType::kBF16, xin, tmp.get(), 1, rows[i], in, nullptr, GemvOrder::kFma));
    if (epi == GemvEpilogue::kAddTo) {
      CUDA_OK(LaunchAdd(y_ref[i]->get(), tmp.get(), y_ref[i]->get(), rows[i], nullptr));
    } else {
      CUDA_OK(cudaMemcpy(y_ref[i]->get(), tmp.get(), sizeof(float) * rows[i], cudaMemcpyDeviceToDevice));
    }
    segs.push_back({w[i]->get(), y_fused[i]->get(), rows[i]});
  }
  if (epi == GemvEpilogue::kSwiGlu) {
    CUDA_OK(LaunchSwiGlu(y_ref[0]->get(), y_ref[1]->get(), y_ref[0]->get(), rows[0], nullptr));
    segs[1].y = y_fused[0]->get();  // the product lands in the gate's output
  }
  CUDA_OK(LaunchFusedGemv(dx.get(), norm ? dnorm.get() : nullptr, ElemType::kBF16, eps, segs.data(),
                          static_cast<int>(segs.size()), ElemType::kBF16, in, epi, max_blocks, nullptr));
  const std::string what = "fused gemv in=" + std::to_string(in) + " epi=" + std::to_string(int(epi)) +
                           (norm ? " norm" : "") + " max_blocks=" + std::to_string(max_blocks);
  const size_t outputs = epi == GemvEpilogue::kSwiGlu ? 1 : rows.size();
  for (size_t i = 0; i < outputs; ++i) {
    const auto a = y_ref[i]->Download(), b = y_fused[i]->Download();
    for (float v : b) ASSERT_TRUE(std::isfinite(v)) << what;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()), 0) << what << " segment " << i;
  }
}

TEST(GemvGpu, FusedDecodeGemvEqualsSeparateKernels) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckFusedGemv(1024, {2048, 1024, 1024}, GemvEpilogue::kStore, true, 1056);  // qwen3-0.6b QKV
  CheckFusedGemv(2048, {1024}, GemvEpilogue::kAddTo, false, 1056);             // O + residual
  CheckFusedGemv(1024, {3072, 3072}, GemvEpilogue::kSwiGlu, true, 1056);       // gate/up + SwiGLU
  CheckFusedGemv(3072, {1024}, GemvEpilogue::kAddTo, false, 7);                // down, few blocks
  CheckFusedGemv(1000, {333, 77}, GemvEpilogue::kStore, true, 3);              // partial last batch
  CheckFusedGemv(4104, {100}, GemvEpilogue::kStore, false, 50);                // past 12 loads a row
  CheckFusedGemv(8192, {40, 40}, GemvEpilogue::kSwiGlu, true, 3);               // x + norm: 64 KB of smem
  CheckFusedGemv(1024, {3000}, GemvEpilogue::kAddTo, true, 5);                 // many rows a warp, norm
  // Grid bounds below a row per warp: 2 to 4 rows (3 row pairs) a warp loaded ahead, then the rest as
  // reached; a warp's rows past the end (uneven grids) must store nothing.
  CheckFusedGemv(1024, {2048, 1024, 1024}, GemvEpilogue::kStore, true, 264);    // 2 rows a warp
  CheckFusedGemv(1024, {2048, 1024, 1024}, GemvEpilogue::kStore, true, 132);    // 4 rows, some 3
  CheckFusedGemv(1024, {2048, 1024, 1024}, GemvEpilogue::kStore, true, 128);    // 4 rows a warp
  CheckFusedGemv(1024, {2048, 1024, 1024}, GemvEpilogue::kStore, true, 100);    // 4 ahead, 1-2 after
  CheckFusedGemv(1024, {2000}, GemvEpilogue::kStore, false, 84);               // 3 rows, some 2
  CheckFusedGemv(1024, {3072, 3072}, GemvEpilogue::kSwiGlu, true, 132);         // 3 row pairs, some 2
  CheckFusedGemv(1024, {3072, 3072}, GemvEpilogue::kSwiGlu, true, 128);         // 3 row pairs a warp
  CheckFusedGemv(1024, {3072, 3072}, GemvEpilogue::kSwiGlu, true, 64);          // 3 ahead, 3 after
}

// y = prior + W x with each row split over warps (split_row_gemv.cuh), against a double loop over the
// same bf16/f16 weight values; y holds the prior, which must be added exactly once.
void CheckSplitRow(int rows, int in, ElemType wtype) {
  auto rng = testing::FreshRng();
  const auto wf = testing::RandomNormal(rng, size_t(rows) * in, 0.05f);
  const auto x = testing::RandomNormal(rng, size_t(in));
  const auto prior = testing::RandomNormal(rng, size_t(rows));
  const RoundedWeights w = Round(wf, wtype);
  std::vector<double> ref(rows), abs_sum(rows);
  for (int o = 0; o < rows; ++o) {
    ref[o] = prior[o];
    abs_sum[o] = std::fabs(prior[o]);
    AddDot(&w.values[size_t(o) * in], x.data(), in, &ref[o], &abs_sum[o]);
  }
  DeviceBuffer<uint16_t> dw(w.bits);
  DeviceBuffer<float> dx(x), dy(prior);
  ASSERT_TRUE(SplitRowAddGemvTakes(in, wtype));
  CUDA_OK(LaunchSplitRowAddGemv(dx.get(), dw.get(), wtype, dy.get(), rows, in, cudaStreamPerThread, false));
  // Tolerance: as CheckGemv's, fp32 accumulation in some order over in + 1 terms (the prior included):
  // |error| <= (in + 1) * 2^-24 * (|prior| + sum_k |w_k x_k|). A lost quarter of a row or a prior added
  // twice errs by ~|w||x| sqrt(in / 4) or |prior|, far above it.
  ExpectAllWithin(dy.Download(), ref, [&](size_t i) { return (in + 1) * 0x1p-24 * abs_sum[i]; },
                  "split-row gemv rows=" + std::to_string(rows) + " in=" + std::to_string(in));
  // Deterministic: a second launch from the same prior gives the same bits.
  const std::vector<float> first = dy.Download();
  DeviceBuffer<float> dy2(prior);
  CUDA_OK(LaunchSplitRowAddGemv(dx.get(), dw.get(), wtype, dy2.get(), rows, in, cudaStreamPerThread, false));
  const std::vector<float> second = dy2.Download();
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}

TEST(GemvGpu, SplitRowAddGemvMatchesCpu) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckSplitRow(1024, 2048, ElemType::kBF16);  // qwen3-0.6b O
  CheckSplitRow(1024, 3072, ElemType::kBF16);  // qwen3-0.6b down
  CheckSplitRow(1023, 1024, ElemType::kF16);   // an odd row count: the last block's second row absent
  CheckSplitRow(64, 4096, ElemType::kBF16);    // four loads a lane
  EXPECT_FALSE(SplitRowAddGemvTakes(3000, ElemType::kBF16));
  EXPECT_FALSE(SplitRowAddGemvTakes(5120, ElemType::kBF16));
  EXPECT_FALSE(SplitRowAddGemvTakes(1024, ElemType::kF32));
  DeviceBuffer<uint16_t> w(8 * 1000);
  DeviceBuffer<float> x(1000), y(8);
  EXPECT_EQ(LaunchSplitRowAddGemv(x.get(), w.get(), ElemType::kBF16, y.get(), 8, 1000, nullptr, false),
            cudaErrorInvalidValue);
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
