// The acceptance statistics test of tests/sampling/acceptance_distribution_test.cc with the GPU
// sampler: drafts drawn on the device (LaunchSampleTokens, keyed Philox) and accepted by the
// acceptance kernel; over 10^5 seeded trials the first emitted token must be distributed as p
// (Pearson chi-square, p-value threshold 1e-6 = the false-failure rate; every cell expects ≥ 5000
// draws), in rejection and coupled modes. The same counts must be rejected against q (the test has
// power), and an acceptor fed the wrong q (q := p, so it accepts every draft) must fail.
#include <cuda_runtime.h>

#include <vector>

#include "engine/sampling/keyed_random.h"
#include "gtest/gtest.h"
#include "kernels/acceptance.cuh"
#include "kernels/cuda_check.h"
#include "kernels/sampling.cuh"
#include "tests/common/gpu_test_env.h"
#include "tests/common/chi_square.h"

namespace specgen {
namespace {

using kernels::AcceptanceResult;
using kernels::AcceptKernelMode;
using ::specgen::testing::ChiSquareResult;
using ::specgen::testing::ChiSquareTest;
using ::specgen::testing::kFalseFailureRate;

constexpr int kTrials = 100000;
constexpr int kV = 6;
constexpr int64_t kPosition = 17;
const std::vector<float> kP1 = {0.30f, 0.25f, 0.20f, 0.10f, 0.10f, 0.05f};
const std::vector<float> kQ1 = {0.05f, 0.10f, 0.15f, 0.20f, 0.20f, 0.30f};

template <typename T>
T* DeviceCopy(const std::vector<T>& v) {
  T* p = nullptr;
  if (cudaMalloc(&p, v.size() * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}

// First emitted token of 10^5 passes drafting k = 1 from q_draw, judged by the kernel with q_claimed.
std::vector<int64_t> FirstTokenCounts(AcceptKernelMode mode, const std::vector<float>& q_draw,
                                      const std::vector<float>& q_claimed) {
  std::vector<float> p = kP1;
  p.insert(p.end(), kV, 1.0f / kV);  // row 2: the bonus distribution (unused for the first token)
  float* d_p = DeviceCopy(p);
  float* d_qd = DeviceCopy(q_draw);
  float* d_qc = DeviceCopy(q_claimed);
  int32_t* d_drafts = nullptr;
  AcceptanceResult* d_results = nullptr;
  void *ws = nullptr, *sws = nullptr;
  const size_t ws_bytes = kernels::AcceptanceWorkspaceBytes(1);
  const size_t sws_bytes = kernels::SampleWorkspaceBytes(1);
  EXPECT_EQ(cudaMalloc(&d_drafts, kTrials * sizeof(int32_t)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&d_results, kTrials * sizeof(AcceptanceResult)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 16)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&sws, std::max<size_t>(sws_bytes, 16)), cudaSuccess);
  const uint32_t purpose = static_cast<uint32_t>(mode == AcceptKernelMode::kCoupled
                                                     ? RandomPurpose::kTargetSample
                                                     : RandomPurpose::kDraftSample);
  for (int t = 0; t < kTrials; ++t) {
    const uint64_t seed = 1000003ull * t + 11;
    EXPECT_EQ(kernels::LaunchSampleTokens(d_qd, 1, kV, false, seed, kPosition, purpose, d_drafts + t, sws,
                                          sws_bytes, nullptr),
              cudaSuccess);
    EXPECT_EQ(kernels::LaunchAcceptance(d_qc, d_p, d_drafts + t, 1, kV, mode, seed, kPosition,
                                        d_results + t, ws, ws_bytes, nullptr),
              cudaSuccess);
  }
  std::vector<AcceptanceResult> results(kTrials);
  EXPECT_EQ(cudaMemcpy(results.data(), d_results, kTrials * sizeof(AcceptanceResult), cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::vector<int64_t> counts(kV, 0);
  for (const AcceptanceResult& r : results) {
    if (r.tokens[0] >= 0 && r.tokens[0] < kV) ++counts[r.tokens[0]];
  }
  for (void* ptr : {static_cast<void*>(d_p), static_cast<void*>(d_qd), static_cast<void*>(d_qc),
                    static_cast<void*>(d_drafts), static_cast<void*>(d_results), ws, sws}) {
    cudaFree(ptr);
  }
  return counts;
}

std::vector<double> AsDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

TEST(GpuAcceptanceStatistics, RejectionFirstTokenIsDistributedAsP) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const auto counts = FirstTokenCounts(AcceptKernelMode::kRejection, kQ1, kQ1);
  const ChiSquareResult fit = ChiSquareTest(counts, AsDouble(kP1));
  EXPECT_GT(fit.p_value, kFalseFailureRate) << "chi2 " << fit.statistic << " dof " << fit.dof;
  const ChiSquareResult vs_q = ChiSquareTest(counts, AsDouble(kQ1));
  EXPECT_LT(vs_q.p_value, kFalseFailureRate) << "the test cannot tell p from q";
}

TEST(GpuAcceptanceStatistics, CoupledFirstTokenIsDistributedAsP) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const auto counts = FirstTokenCounts(AcceptKernelMode::kCoupled, kQ1, kQ1);
  const ChiSquareResult fit = ChiSquareTest(counts, AsDouble(kP1));
  EXPECT_GT(fit.p_value, kFalseFailureRate) << "chi2 " << fit.statistic << " dof " << fit.dof;
}

TEST(GpuAcceptanceStatistics, AcceptorGivenTheWrongQFails) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  // Drafts drawn from q1 but judged as if drawn from p1: every draft passes min(1, p/q) = 1, so the
  // output follows q1, and the same chi-square test must reject it.
  const auto counts = FirstTokenCounts(AcceptKernelMode::kRejection, kQ1, kP1);
  const ChiSquareResult fit = ChiSquareTest(counts, AsDouble(kP1));
  EXPECT_LT(fit.p_value, kFalseFailureRate) << "a wrong acceptor passed: chi2 " << fit.statistic;
}

}  // namespace
}  // namespace specgen
