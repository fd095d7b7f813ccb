// GPU logits processing, keyed sampling and acceptance against the CPU reference in engine/sampling
// (ProcessLogits, SampleGumbelMax, Accept): same distributions, and the same tokens for the same keys.
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <numeric>
#include <span>

#include "engine/sampling/acceptance.h"
#include "engine/sampling/distribution.h"
#include "kernels/acceptance.cuh"
#include "kernels/sampling.cuh"
#include "tests/common/compare.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;
using ::specgen::testing::ExpectAllClose;

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

// Whether a row's kept set is decided by a margin smaller than the GPU's rounding, so that either
// answer is right (a numeric tie, which the issue allows to differ): the GPU's weights are fp32 exps,
// each within 68 u of the reference's double (see CheckProcess), and its top-p sums them in 2^-40
// fixed point (truncation: at most 2^-40 an id, weights in units of the largest, which is 1 on both).
// Exact ties are not ambiguous (both break them by the lower id).
bool AmbiguousCut(std::span<const float> logits, const SamplingParams& p) {
  if (p.greedy()) return false;  // an argmax over the same floats
  const size_t v = logits.size();
  const double rel = 68 * 0x1p-24;
  const float max_logit = logits[Argmax(logits)];
  std::vector<double> w(v);
  for (size_t i = 0; i < v; ++i) w[i] = std::exp((double(logits[i]) - max_logit) / p.temperature);
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
  size_t kept = v;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < v) {
    kept = p.top_k;
    const double gap = w[order[kept - 1]] - w[order[kept]];
    if (gap > 0 && gap <= 2 * rel * w[order[kept - 1]]) return true;
  }
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for (size_t r = 0; r < kept; ++r) total += w[order[r]];
    const double target = double(p.top_p) * total;
    const double tol = rel * total + double(v + 2) * 0x1p-40;
    double before = 0.0, acc = 0.0;
    size_t r = 0;
    while (r < kept) {
      before = acc;
      acc += w[order[r++]];
      if (acc >= target) break;
    }
    if (acc - target <= tol || target - before <= tol) return true;
    kept = r;
  }
  if (p.min_p > 0.0f) {
    const double threshold = double(p.min_p) * w[order[0]];
    for (size_t r = 1; r < kept; ++r) {
      if (std::fabs(w[order[r]] - threshold) <= rel * threshold) return true;
    }
  }
  return false;
}

using ProcessLauncher = cudaError_t (*)(const float*, int, int, SamplingConfig, float*, cudaStream_t);

// LaunchProcessLogitsSplit (top-k first or temperature only, where either applies) with a workspace of its
// own, in the launcher shape of the other paths.
cudaError_t LaunchSplit(const float* logits, int rows, int vocab, SamplingConfig config, float* probs,
                            cudaStream_t stream) {
  DeviceBuffer<uint8_t> ws(std::max<size_t>(ProcessSplitWorkspaceBytes(rows, vocab), 16));
  const cudaError_t e = LaunchProcessLogitsSplit(logits, rows, vocab, config, probs, ws.get(), ws.size(), stream);
  return e != cudaSuccess ? e : cudaStreamSynchronize(stream);  // before the workspace goes
}

void CheckProcess(int rows, int vocab, const SamplingParams& params, bool ties,
                  ProcessLauncher launch = &LaunchProcessLogits) {
  auto rng = testing::FreshRng();
  // Inputs whose kept set is a numeric tie (AmbiguousCut) are drawn again: the check below is exact
  // about the kept set everywhere else (a top-p cut over the full vocabulary is a tie in ~1% of rows).
  std::vector<float> logits;
  for (int draws = 0;; ++draws) {
    ASSERT_LT(draws, 50) << "no input without a numeric tie at a cut: " << ToString(params);
    logits = RandomLogits(rng, rows, vocab, ties);
    bool ambiguous = false;
    for (int r = 0; r < rows && !ambiguous; ++r) {
      ambiguous = AmbiguousCut(std::span<const float>(&logits[size_t(r) * vocab], vocab), params);
    }
    if (!ambiguous) break;
    std::printf("[ redraw ] a numeric tie at a cut (%s)\n", ToString(params).c_str());
  }
  DeviceBuffer<float> dl(logits), dp(logits.size());
  CUDA_OK(launch(dl.get(), rows, vocab, ToConfig(params), dp.get(), nullptr));
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
  ExpectAllClose(got, ref, 0.0, rtol,
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

// The top-k-first path where it applies (a top-k of up to kTopKMaxCandidates / slices ids).
TEST(SamplingGpu, TopKFirstMatchesCpuReference) {
  SPECGEN_SKIP_WITHOUT_GPU();
  const int v = 151936;
  for (const SamplingParams& p : {Params(0.8f, 40, 0.95f, 0.05f, 0), Params(1.0f, 50, 1.0f, 0.0f, 0),
                                  Params(0.7f, 20, 0.5f, 0.1f, 0), Params(1.2f, 1, 1.0f, 0.0f, 0),
                                  Params(0.9f, 54, 0.9f, 0.0f, 0), Params(0.8f, 64, 0.95f, 0.05f, 0)}) {
    ASSERT_TRUE(ProcessTopKApplies(v, ToConfig(p))) << ToString(p);
    CheckProcess(3, v, p, false, &LaunchSplit);
  }
  EXPECT_FALSE(ProcessTopKApplies(v, ToConfig(Params(0.8f, 1000, 0.95f, 0.0f, 0))));  // too many candidates
  EXPECT_FALSE(ProcessTopKApplies(v, ToConfig(Params(0.8f, 65, 0.95f, 0.0f, 0))));    // past its sort of 64
  EXPECT_FALSE(ProcessTopKApplies(v, ToConfig(Params(0.0f, 40, 1.0f, 0.0f, 0))));     // greedy
  EXPECT_FALSE(ProcessTopKApplies(v, ToConfig(Params(0.8f, 0, 0.95f, 0.0f, 0))));     // no top-k
  CheckProcess(3, 5000, Params(0.9f, 37, 0.8f, 0.0f, 0), true, &LaunchSplit);   // ties at the cuts
  CheckProcess(4, 2049, Params(1.0f, 3, 0.9f, 0.0f, 0), true, &LaunchSplit);   // a one-id last slice
  CheckProcess(2, 100, Params(1.0f, 99, 1.0f, 0.2f, 0), false, &LaunchSplit);  // top-k drops one id
}

// The temperature-only split path where it applies (no top-k, no top-p; min-p or not).
TEST(SamplingGpu, PlainSplitMatchesCpuReference) {
  SPECGEN_SKIP_WITHOUT_GPU();
  const int v = 151936;
  for (const SamplingParams& p : {Params(1.0f, 0, 1.0f, 0.0f, 0), Params(0.7f, 0, 1.0f, 0.05f, 0),
                                  Params(1.3f, v, 1.0f, 0.0f, 0), Params(0.5f, 0, 1.0f, 0.5f, 0)}) {
    ASSERT_TRUE(ProcessPlainApplies(v, ToConfig(p))) << ToString(p);
    CheckProcess(3, v, p, false, &LaunchSplit);
  }
  EXPECT_FALSE(ProcessPlainApplies(v, ToConfig(Params(0.8f, 0, 0.95f, 0.0f, 0))));  // top-p
  EXPECT_FALSE(ProcessPlainApplies(v, ToConfig(Params(0.8f, 40, 1.0f, 0.0f, 0))));  // top-k
  EXPECT_FALSE(ProcessPlainApplies(v, ToConfig(Params(0.0f, 0, 1.0f, 0.0f, 0))));   // greedy
  CheckProcess(3, 5000, Params(0.9f, 0, 1.0f, 0.1f, 0), true, &LaunchSplit);   // ties at the min-p cut
  CheckProcess(4, 2049, Params(1.0f, 0, 1.0f, 0.0f, 0), true, &LaunchSplit);   // a one-id last slice
  CheckProcess(2, 7, Params(2.0f, 0, 1.0f, 0.0f, 0), false, &LaunchSplit);     // one partial slice
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

// The greedy draft's shortcut (DeviceProposer::Propose): the argmax draw over the raw
// logits (negative, -inf, exact ties) is the token that processing + the draw over the one-hot rows
// gives, and the CPU reference's argmax.
TEST(SamplingGpu, GreedyDrawOverRawLogitsEqualsDrawOverProcessedRows) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (int v : {151936, 1001, 3}) {
    const int rows = 5;
    auto logits = RandomLogits(rng, rows, v, /*ties=*/true);  // many exact ties at the maximum
    for (int i = 0; i < v; ++i) logits[size_t(1) * v + i] = -INFINITY;  // row 1: no finite logit
    for (int i = 0; i < v; i += 2) logits[size_t(2) * v + i] = -INFINITY;
    for (int i = 0; i < v; ++i) logits[size_t(3) * v + i] = -3.f - 1e-3f * static_cast<float>(i % 7);
    DeviceBuffer<float> dl(logits), dp(logits.size());
    DeviceBuffer<int32_t> direct(rows), processed(rows);
    DeviceBuffer<uint8_t> ws(SampleWorkspaceBytes(rows));
    const SamplingParams greedy = Params(0.0f, 0, 1.0f, 0.0f, 9);
    direct.Poison();
    processed.Poison();
    CUDA_OK(LaunchSampleTokens(dl.get(), rows, v, true, 9, 100, 2, direct.get(), ws.get(), ws.size(), nullptr));
    CUDA_OK(LaunchProcessLogits(dl.get(), rows, v, ToConfig(greedy), dp.get(), nullptr));
    CUDA_OK(LaunchSampleTokens(dp.get(), rows, v, true, 9, 100, 2, processed.get(), ws.get(), ws.size(),
                               nullptr));
    const auto a = direct.Download(), b = processed.Download();
    for (int r = 0; r < rows; ++r) {
      const std::span<const float> row(&logits[size_t(r) * v], v);
      EXPECT_EQ(a[r], b[r]) << "vocab " << v << " row " << r;
      EXPECT_EQ(a[r], Argmax(row)) << "vocab " << v << " row " << r;
    }
  }
}

// The draft's one-call step: the same probabilities as LaunchProcessLogitsSplit and the same tokens as
// LaunchSampleTokens over them, whether the draw is made inside the top-k path or by the two calls.
TEST(SamplingGpu, ProcessAndSampleDrawsAsTheTwoCalls) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (int v : {151936, 5000}) {
    const int rows = 4;
    const auto logits = RandomLogits(rng, rows, v, /*ties=*/v == 5000);
    DeviceBuffer<float> dl(logits), p1(logits.size()), p2(logits.size());
    DeviceBuffer<int32_t> t1(rows), t2(rows);
    DeviceBuffer<uint8_t> ws(ProcessAndSampleWorkspaceBytes(rows, v));
    for (const SamplingParams& params :
         {Params(0.8f, 40, 0.95f, 0.05f, rng()), Params(1.0f, 64, 1.0f, 0.0f, rng()), Params(1.0f, 0, 1.0f, 0.0f, rng()),
          Params(0.7f, 0, 1.0f, 0.05f, rng()), Params(0.7f, 1000, 0.9f, 0.0f, rng()),
          Params(0.0f, 40, 1.0f, 0.0f, rng())}) {
      const int64_t pos0 = static_cast<int64_t>(rng() % 100000);
      const uint32_t purpose = static_cast<uint32_t>(RandomPurpose::kDraftSample);
      t1.Poison();
      t2.Poison();
      CUDA_OK(LaunchProcessAndSample(dl.get(), rows, v, ToConfig(params), p1.get(), params.seed, pos0, purpose,
                                     t1.get(), ws.get(), ws.size(), nullptr));
      CUDA_OK(LaunchProcessLogitsSplit(dl.get(), rows, v, ToConfig(params), p2.get(), ws.get(), ws.size(), nullptr));
      CUDA_OK(LaunchSampleTokens(p2.get(), rows, v, params.greedy(), params.seed, pos0, purpose, t2.get(), ws.get(),
                                 ws.size(), nullptr));
      const auto a = p1.Download(), b = p2.Download();
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << ToString(params);
      const auto ta = t1.Download(), tb = t2.Download();
      for (int r = 0; r < rows; ++r) {
        EXPECT_EQ(ta[r], tb[r]) << ToString(params) << " vocab " << v << " row " << r;
        const std::span<const float> row(&b[size_t(r) * v], v);
        EXPECT_EQ(ta[r], params.greedy() ? Argmax(row)
                                         : SampleGumbelMax(row, params.seed, pos0 + r, RandomPurpose::kDraftSample))
            << ToString(params) << " row " << r;
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

// Greedy acceptance over the target's raw logits (DeviceSpeculativeDecoder skips their processing)
// decides exactly as over the processed one-hot rows: the same counts, tokens and logprobs (0).
TEST(AcceptanceGpu, GreedyOverRawLogitsEqualsGreedyOverProcessedRows) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  const int v = 151936;
  for (int k : {0, 1, 4, 8}) {
    const auto logits = RandomLogits(rng, k + 1, v, /*ties=*/true);
    std::vector<int32_t> drafts(k);
    const int agree = k == 0 ? 0 : static_cast<int>(rng() % (k + 1));  // drafts that match the argmax
    for (int i = 0; i < k; ++i) {
      const int32_t top = Argmax(std::span<const float>(&logits[size_t(i) * v], v));
      drafts[i] = i < agree ? top : (top + 1 + static_cast<int32_t>(rng() % 1000)) % v;
    }
    DeviceBuffer<float> dl(logits), dp(logits.size());
    DeviceBuffer<int32_t> dd(drafts.empty() ? std::vector<int32_t>{0} : drafts);
    DeviceBuffer<AcceptanceResult> raw(1), processed(1);
    DeviceBuffer<uint8_t> ws(AcceptanceWorkspaceBytes(k));
    CUDA_OK(LaunchProcessLogits(dl.get(), k + 1, v, ToConfig(Params(0.f, 0, 1.f, 0.f, 3)), dp.get(), nullptr));
    CUDA_OK(LaunchAcceptance(nullptr, dl.get(), dd.get(), k, v, AcceptKernelMode::kGreedy, 3, 500, raw.get(),
                             ws.get(), ws.size(), nullptr));
    CUDA_OK(LaunchAcceptance(nullptr, dp.get(), dd.get(), k, v, AcceptKernelMode::kGreedy, 3, 500,
                             processed.get(), ws.get(), ws.size(), nullptr));
    const AcceptanceResult a = raw.Download()[0], b = processed.Download()[0];
    EXPECT_EQ(a.n_accepted, agree) << "k " << k;
    EXPECT_EQ(a.n_accepted, b.n_accepted) << "k " << k;
    ASSERT_EQ(a.n_tokens, b.n_tokens) << "k " << k;
    for (int i = 0; i <= kAcceptMaxDraft; ++i) {
      EXPECT_EQ(a.tokens[i], b.tokens[i]) << "k " << k << " token " << i;
      EXPECT_EQ(a.logprobs[i], b.logprobs[i]) << "k " << k << " logprob " << i;
    }
    // The token after the accepted drafts is the argmax of its row.
    EXPECT_EQ(a.tokens[a.n_accepted], Argmax(std::span<const float>(&logits[size_t(a.n_accepted) * v], v)));
  }
}

// A row holding a NaN or an infinity emits no token (-1; the loop reports non-finite logits), even
// where its finite values have a clear winner, in every mode; a row after the first rejection is not
// reached, so a NaN there changes nothing.
TEST(AcceptanceGpu, ARowWithANanOrInfinityEmitsNoToken) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  const int v = 1000, k = 2;
  for (int mode_i = 0; mode_i < 3; ++mode_i) {
    const AcceptKernelMode kmode = static_cast<AcceptKernelMode>(mode_i);
    for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
      // Row r's winner is token 7 + r by a wide margin (probabilities for the sampled modes, logits for
      // greedy), and q = p, so every draft of a clean row is accepted.
      std::vector<float> p(size_t(k + 1) * v);
      for (int r = 0; r <= k; ++r) {
        for (int i = 0; i < v; ++i) p[size_t(r) * v + i] = kmode == AcceptKernelMode::kGreedy ? -5.f : 0.f;
        p[size_t(r) * v + 7 + r] = kmode == AcceptKernelMode::kGreedy ? 20.f : 1.f;
      }
      const std::vector<float> q(p.begin(), p.begin() + size_t(k) * v);
      for (int bad_row = -1; bad_row <= k; ++bad_row) {
        for (bool reject_first : {false, true}) {
          std::vector<float> pr = p;
          if (bad_row >= 0) pr[size_t(bad_row) * v + 500] = bad;
          std::vector<int32_t> drafts = {7, 8};
          if (reject_first) drafts[0] = 3;  // not the row's winner: rejected (q = p puts nothing on 3)
          DeviceBuffer<float> dq(q), dp(pr);
          DeviceBuffer<int32_t> dd(drafts);
          DeviceBuffer<AcceptanceResult> res(1);
          DeviceBuffer<uint8_t> ws(AcceptanceWorkspaceBytes(k));
          CUDA_OK(LaunchAcceptance(dq.get(), dp.get(), dd.get(), k, v, kmode, rng(), 100, res.get(), ws.get(),
                                   ws.size(), nullptr));
          const AcceptanceResult got = res.Download()[0];
          SCOPED_TRACE("mode " + std::to_string(mode_i) + " bad " + std::to_string(bad) + " row " +
                       std::to_string(bad_row) + (reject_first ? " first rejected" : ""));
          // The rows the step reaches: 0 when the first draft is rejected, else all three.
          const int reached = reject_first ? 0 : k;
          if (bad_row < 0 || bad_row > reached) {
            ASSERT_EQ(got.n_accepted, reject_first ? 0 : k);
            for (int i = 0; i < got.n_tokens; ++i) EXPECT_EQ(got.tokens[i], 7 + i);
          } else {
            EXPECT_EQ(got.n_accepted, bad_row);
            ASSERT_EQ(got.n_tokens, bad_row + 1);
            EXPECT_EQ(got.tokens[bad_row], -1);
          }
        }
      }
    }
  }
}

// ---- The two processing paths (a cluster of blocks per row on sm_90+, one block per row elsewhere)
// on the inputs where their branches differ: cuts inside long runs of ties (which the cluster path
// splits across blocks), one finite logit, filters that are off, vocabularies shorter than the
// cluster or not a multiple of 4.

struct ProcessPath {
  ProcessLauncher launch;
  const char* name;
};
constexpr ProcessPath kPaths[] = {{&LaunchProcessLogits, "default"},
                                  {&detail::LaunchProcessLogitsOneBlock, "one-block"},
                                  {&LaunchSplit, "split"}};

std::vector<float> RunProcess(const ProcessPath& path, const std::vector<float>& logits, int rows,
                              int vocab, const SamplingParams& params) {
  DeviceBuffer<float> dl(logits), dp(logits.size());
  EXPECT_EQ(path.launch(dl.get(), rows, vocab, ToConfig(params), dp.get(), nullptr), cudaSuccess)
      << path.name;
  return dp.Download();
}

void CheckProcessAgainstCpu(const ProcessPath& path, const std::vector<float>& logits, int rows,
                            int vocab, const SamplingParams& params, const std::string& what) {
  const auto got = RunProcess(path, logits, rows, vocab, params);
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
  // Tolerance as in CheckProcess: fp32 exponent argument and expf, |arg| <= 64 → (64 + 4) u; exact
  // zeros where the reference has none (tol 0 there); -inf logits give exact zeros on both sides.
  const double rtol = 68 * 0x1p-24;
  ExpectAllClose(got, ref, 0.0, rtol,
                 std::string(path.name) + " " + what + " " + ToString(params));
  EXPECT_EQ(kept_gpu, kept_cpu) << path.name << " " << what << " " << ToString(params);
}

TEST(SamplingGpu, ProcessLogitsEdgeCasesOnBothPaths) {
  SPECGEN_SKIP_WITHOUT_GPU();
  int device = 0;
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaGetDeviceProperties(&prop, device), cudaSuccess);
  const int v = 151936;
  if (prop.major >= 9) {
    EXPECT_TRUE(detail::ProcessLogitsUsesClusters(v)) << "sm_90+ must take the cluster path";
  }
  auto rng = testing::FreshRng();
  const std::vector<float> flat(v, 0.25f);
  std::vector<float> one_finite(v, -INFINITY);
  one_finite[v - 7] = 3.f;  // in the last chunk
  const auto random = RandomLogits(rng, 2, v, false);
  const auto ties = RandomLogits(rng, 2, v, true);
  for (const ProcessPath& path : kPaths) {
    // Every logit equal: each cut falls inside one run of 151936 ties, deep into the row.
    CheckProcessAgainstCpu(path, flat, 1, v, Params(1.0f, 100000, 1.0f, 0.0f, 0), "flat");
    CheckProcessAgainstCpu(path, flat, 1, v, Params(0.8f, 0, 0.5f, 0.0f, 0), "flat");
    CheckProcessAgainstCpu(path, flat, 1, v, Params(0.8f, 40, 0.95f, 0.05f, 0), "flat");
    CheckProcessAgainstCpu(path, flat, 1, v, Params(1.0f, 0, 1.0f, 0.5f, 0), "flat");
    CheckProcessAgainstCpu(path, flat, 1, v, Params(0.0f, 0, 1.0f, 0.0f, 0), "flat");
    // One finite logit: one-hot there whatever the filters (top-k keeps zero-weight ids).
    CheckProcessAgainstCpu(path, one_finite, 1, v, Params(0.8f, 40, 0.95f, 0.05f, 0), "one finite");
    CheckProcessAgainstCpu(path, one_finite, 1, v, Params(1.0f, 0, 1.0f, 0.0f, 0), "one finite");
    CheckProcessAgainstCpu(path, one_finite, 1, v, Params(0.0f, 0, 1.0f, 0.0f, 0), "one finite");
    // Filters off (top-k >= vocab, top-p 1, min-p 0), and top-k dropping exactly one id.
    CheckProcessAgainstCpu(path, random, 2, v, Params(1.0f, v + 5, 1.0f, 0.0f, 0), "random");
    CheckProcessAgainstCpu(path, random, 2, v, Params(0.9f, v, 1.0f, 0.0f, 0), "random");
    CheckProcessAgainstCpu(path, random, 2, v, Params(0.9f, v - 1, 1.0f, 0.0f, 0), "random");
    // Many exact ties at every cut over the full vocabulary.
    CheckProcessAgainstCpu(path, ties, 2, v, Params(0.8f, 40, 0.95f, 0.05f, 0), "ties");
    CheckProcessAgainstCpu(path, ties, 2, v, Params(0.7f, 5000, 0.6f, 0.0f, 0), "ties");
    CheckProcessAgainstCpu(path, ties, 2, v, Params(1.2f, 0, 0.3f, 0.02f, 0), "ties");
    // Vocabularies shorter than the cluster (empty chunks) or not a multiple of 4.
    for (int small : {1, 3, 5, 33, 1001}) {
      const auto l = RandomLogits(rng, 3, small, true);
      CheckProcessAgainstCpu(path, l, 3, small, Params(0.9f, 2, 0.8f, 0.0f, 0), "small");
      CheckProcessAgainstCpu(path, l, 3, small, Params(1.0f, 0, 1.0f, 0.0f, 0), "small");
      CheckProcessAgainstCpu(path, l, 3, small, Params(0.0f, 0, 1.0f, 0.0f, 0), "small");
    }
  }
}

TEST(SamplingGpu, ProcessLogitsBatchInvariantAndPathsAgree) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  const int rows = 9, v = 151936;
  const auto logits = RandomLogits(rng, rows, v, false);
  for (const SamplingParams& params :
       {Params(0.8f, 40, 0.95f, 0.05f, 0), Params(1.0f, 0, 1.0f, 0.0f, 0),
        Params(0.7f, 0, 0.9f, 0.0f, 0)}) {
    std::vector<std::vector<float>> by_path;
    for (const ProcessPath& path : kPaths) {
      const auto all = RunProcess(path, logits, rows, v, params);
      // A row processed alone is bit-for-bit the row processed among 9.
      for (int r : {0, 4, 8}) {
        const std::vector<float> one(logits.begin() + size_t(r) * v,
                                     logits.begin() + size_t(r + 1) * v);
        const auto alone = RunProcess(path, one, 1, v, params);
        EXPECT_EQ(0, std::memcmp(alone.data(), &all[size_t(r) * v], v * sizeof(float)))
            << path.name << " row " << r << " " << ToString(params);
      }
      by_path.push_back(all);
    }
    // The paths keep the same ids; they add the final double sum in different fixed orders (relative
    // difference <= V 2^-53 ~ 2e-11), so a quotient's fp32 rounding may differ by one ulp (2^-23).
    for (size_t other = 1; other < by_path.size(); ++other) {
      size_t kept_differ = 0, value_differ = 0;
      for (size_t i = 0; i < by_path[0].size(); ++i) {
        const float a = by_path[0][i], b = by_path[other][i];
        kept_differ += (a > 0) != (b > 0);
        value_differ += !(std::fabs(double(a) - double(b)) <= 0x1p-23 * double(b));
      }
      EXPECT_EQ(kept_differ, 0u) << kPaths[other].name << " " << ToString(params);
      EXPECT_EQ(value_differ, 0u) << kPaths[other].name << " " << ToString(params);
    }
  }
}

}  // namespace
}  // namespace specgen::kernels
