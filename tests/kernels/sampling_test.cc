// GPU logits processing, keyed sampling and acceptance against the CPU reference in engine/sampling
// (ProcessLogits, SampleGumbelMax, Accept): same distributions, and the same tokens for the same keys.
#include <cmath>

#include "engine/sampling/acceptance.h"
#include "engine/sampling/distribution.h"
#include "kernels/acceptance.cuh"
#include "kernels/sampling.cuh"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;
using testing::ExpectAllClose;

SamplingConfig ToConfig(const SamplingParams& p) {
  return SamplingConfig{p.temperature, p.top_k, p.top_p, p.min_p};
}

SamplingParams Params(float t, int k, float p, float m, uint64_t seed) {
  SamplingParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.min_p = m;
  s.seed = seed;
  return s;
}

std::vector<float> RandomLogits(std::mt19937_64& rng, int rows, int vocab, bool ties) {
  auto l = testing::RandomNormal(rng, size_t(rows) * vocab, 3.f);
  if (ties) {
    for (auto& x : l) x = std::round(x * 2) / 2;  // many exactly equal logits
  }
  return l;
}

void CheckProcess(int rows, int vocab, const SamplingParams& params, bool ties) {
  auto rng = testing::FreshRng();
  const auto logits = RandomLogits(rng, rows, vocab, ties);
  DeviceBuffer<float> dl(logits), dp(logits.size());
  CUDA_OK(LaunchProcessLogits(dl.get(), rows, vocab, ToConfig(params), dp.get(), nullptr));
  const auto got = dp.Download();
  std::vector<double> ref(logits.size());
  std::vector<float> row;
  size_t kept_cpu = 0, kept_gpu = 0;
  for (int r = 0; r < rows; ++r) {
    ProcessLogits(std::span<const float>(&logits[size_t(r) * vocab], vocab), params, &row);
    for (int i = 0; i < vocab; ++i) {
      ref[size_t(r) * vocab + i] = row[i];
      kept_cpu += row[i] > 0;
      kept_gpu += got[size_t(r) * vocab + i] > 0;
    }
  }
  // Tolerance: the GPU exponentiates in fp32 what the reference does in double: the argument
  // (logit - max) / T, rounded to fp32, errs by |arg| u, expf by 2u; renormalization in double adds
  // nothing visible. |arg| <= 64 for these logits (sd 3, T >= 0.5) → rtol (64 + 4) u. A zero where
  // the reference has mass (or vice versa) is a kept-set mismatch and fails (tol 0 there).
  const double rtol = 68 * 0x1p-24;
  ExpectAllClose(got, ref, [&](size_t i) { return rtol * ref[i]; },
                 "probs " + ToString(params) + (ties ? " (ties)" : ""));
  EXPECT_EQ(kept_gpu, kept_cpu);
}

TEST(SamplingGpu, ProcessLogitsMatchesCpuReference) {
  SPECGEN_SKIP_WITHOUT_GPU();
  const int v = 151936;
  CheckProcess(2, v, Params(0.8f, 40, 0.95f, 0.05f, 0), false);  // the CLI defaults
  CheckProcess(2, v, Params(1.0f, 0, 1.0f, 0.0f, 0), false);     // plain softmax
  CheckProcess(2, v, Params(0.7f, 0, 0.9f, 0.0f, 0), false);     // top-p alone over the full vocab
  CheckProcess(2, v, Params(1.3f, 1000, 1.0f, 0.01f, 0), false);
  CheckProcess(2, v, Params(0.0f, 40, 0.9f, 0.1f, 0), false);    // greedy: one-hot
  CheckProcess(3, 5000, Params(0.9f, 37, 0.8f, 0.0f, 0), true);  // ties at the top-k/top-p cuts
  CheckProcess(3, 5000, Params(0.0f, 0, 1.0f, 0.0f, 0), true);   // greedy ties → lowest id
}

TEST(SamplingGpu, KeyedDrawsMatchCpuTokenForToken) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  const int rows = 6, v = 151936;
  const auto logits = RandomLogits(rng, rows, v, false);
  DeviceBuffer<float> dl(logits), dp(logits.size());
  DeviceBuffer<int32_t> tok(rows);
  DeviceBuffer<uint8_t> ws(SampleWorkspaceBytes(rows));
  for (const SamplingParams& params :
       {Params(1.0f, 0, 1.0f, 0.0f, 1234), Params(0.8f, 40, 0.95f, 0.05f, 77),
        Params(0.0f, 0, 1.0f, 0.0f, 5)}) {
    CUDA_OK(LaunchProcessLogits(dl.get(), rows, v, ToConfig(params), dp.get(), nullptr));
    const auto probs = dp.Download();
    for (RandomPurpose purpose : {RandomPurpose::kTargetSample, RandomPurpose::kDraftSample}) {
      const int64_t pos0 = 1000 + static_cast<int64_t>(rng() % 100000);
      tok.Poison();
      CUDA_OK(LaunchSampleTokens(dp.get(), rows, v, params.greedy(), params.seed, pos0,
                                 static_cast<uint32_t>(purpose), tok.get(), ws.get(), ws.size(),
                                 nullptr));
      const auto got = tok.Download();
      for (int r = 0; r < rows; ++r) {
        std::span<const float> row(&probs[size_t(r) * v], v);
        const int32_t want = params.greedy()
                                 ? Argmax(row)
                                 : SampleGumbelMax(row, params.seed, pos0 + r, purpose);
        EXPECT_EQ(got[r], want) << ToString(params) << " row " << r;
      }
    }
  }
}

// Rows of q and p with real overlap: softmaxes of correlated logits, processed like the engine does.
struct AcceptCase {
  std::vector<float> q, p;
  std::vector<int32_t> drafts;
};

AcceptCase MakeCase(std::mt19937_64& rng, int k, int v, const SamplingParams& params,
                    AcceptMode mode, int64_t pos0) {
  AcceptCase c;
  const auto base = testing::RandomNormal(rng, size_t(k + 1) * v, 2.f);
  auto noise = testing::RandomNormal(rng, size_t(k + 1) * v, 0.7f);
  std::vector<float> lq(size_t(k) * v), lp(base);
  for (size_t i = 0; i < lq.size(); ++i) lq[i] = base[i] + noise[i];
  std::vector<float> row;
  for (int i = 0; i <= k; ++i) {
    ProcessLogits(std::span<const float>(&lp[size_t(i) * v], v), params, &row);
    c.p.insert(c.p.end(), row.begin(), row.end());
  }
  for (int i = 0; i < k; ++i) {
    ProcessLogits(std::span<const float>(&lq[size_t(i) * v], v), params, &row);
    c.q.insert(c.q.end(), row.begin(), row.end());
    c.drafts.push_back(SampleDraft(mode, row, params, pos0 + i));
  }
  return c;
}

TEST(AcceptanceGpu, MatchesCpuAcceptTokenForToken) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  int total_accepted = 0, cases = 0;
  for (int v : {1000, 151936}) {
    for (int k : {0, 1, 4, 8}) {
      for (int mode_i = 0; mode_i < 3; ++mode_i) {
        const AcceptKernelMode kmode = static_cast<AcceptKernelMode>(mode_i);
        const AcceptMode mode =
            kmode == AcceptKernelMode::kCoupled ? AcceptMode::kCoupled : AcceptMode::kRejection;
        SamplingParams params = kmode == AcceptKernelMode::kGreedy
                                    ? Params(0.f, 0, 1.f, 0.f, rng())
                                    : Params(1.0f, 0, v == 1000 ? 0.9f : 1.f, 0.f, rng());
        const int seeds = v == 1000 ? 8 : 1;
        for (int s = 0; s < seeds; ++s) {
          params.seed = rng();
          const int64_t pos0 = static_cast<int64_t>(rng() % 50000);
          const AcceptCase c = MakeCase(rng, k, v, params, mode, pos0);
          const AcceptResult want = Accept(mode, c.drafts, c.q, c.p, v, params, pos0);
          DeviceBuffer<float> dq(c.q), dp(c.p);
          DeviceBuffer<int32_t> dd(c.drafts);
          DeviceBuffer<AcceptanceResult> res(1);
          DeviceBuffer<uint8_t> ws(AcceptanceWorkspaceBytes(k));
          CUDA_OK(LaunchAcceptance(dq.get(), dp.get(), dd.get(), k, v, kmode, params.seed, pos0,
                                   res.get(), ws.get(), ws.size(), nullptr));
          const AcceptanceResult got = res.Download()[0];
          ASSERT_EQ(got.n_accepted, want.n_accepted)
              << "mode " << mode_i << " k " << k << " v " << v << " seed " << params.seed;
          ASSERT_EQ(got.n_tokens, static_cast<int>(want.tokens.size()));
          for (int i = 0; i < got.n_tokens; ++i) {
            EXPECT_EQ(got.tokens[i], want.tokens[i]) << "token " << i << " mode " << mode_i;
            const float pt = c.p[size_t(i) * v + want.tokens[i]];
            EXPECT_FLOAT_EQ(got.logprobs[i], std::log(pt)) << "logprob " << i;
          }
          for (int i = got.n_tokens; i <= kAcceptMaxDraft; ++i) EXPECT_EQ(got.tokens[i], -1);
          total_accepted += got.n_accepted;
          ++cases;
        }
      }
    }
  }
  std::printf("[ acceptance ] %d cases, %d drafts accepted\n", cases, total_accepted);
  EXPECT_GT(total_accepted, 0);  // the cases exercise acceptance, not only rejection
}

}  // namespace
}  // namespace specgen::kernels
