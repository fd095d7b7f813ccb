// Statistical exactness of the acceptance rule: the emitted tokens are distributed as the target's
// p whatever the draft's q (docs/design.md §11.5). Every trial uses its own seed, so draws
// are independent; counts are tested with Pearson's chi-square at a false-failure rate of 1e-6
// (tests/common/chi_square.h derives the p-value). Deliberately wrong acceptors run through the
// same harness and must fail it: proof that the test can see the bugs it is meant to catch.
#include <functional>
#include <numeric>

#include "engine/sampling/acceptance.h"
#include "engine/sampling/distribution.h"
#include "gtest/gtest.h"
#include "tests/common/chi_square.h"

namespace specgen {
namespace {

using ::specgen::testing::ChiSquareResult;
using ::specgen::testing::ChiSquareTest;
using ::specgen::testing::kFalseFailureRate;

constexpr int kTrials = 100000;
constexpr int64_t kFirstPosition = 17;  // any absolute position; the keys include it
constexpr int kV = 6;
using Row = std::vector<float>;

using Acceptor = std::function<AcceptResult(std::span<const int32_t> drafts, std::span<const float> q,
                                            std::span<const float> p, const SamplingParams& params,
                                            int64_t first_position)>;

Acceptor Correct(AcceptMode mode) {
  return [mode](auto drafts, auto q, auto p, const SamplingParams& params, int64_t pos) {
    return Accept(mode, drafts, q, p, kV, params, pos);
  };
}

// Bug 1: the ratio turned upside down, accept with min(1, q/p).
AcceptResult AcceptInvertedRatio(std::span<const int32_t> drafts, std::span<const float> q,
                                 std::span<const float> p, const SamplingParams& params,
                                 int64_t pos) {
  AcceptResult r;
  for (size_t i = 0; i < drafts.size(); ++i) {
    const auto pi = p.subspan(i * kV, kV), qi = q.subspan(i * kV, kV);
    const int32_t x = drafts[i];
    const double u = KeyedUniform(params.seed, pos + i, RandomPurpose::kAcceptUniform);
    if (!(u * pi[x] < qi[x])) {
      Row residual(kV);
      for (int j = 0; j < kV; ++j) residual[j] = std::max(0.0f, pi[j] - qi[j]);
      r.tokens.push_back(SampleGumbelMax(residual, params.seed, pos + i, RandomPurpose::kResidual));
      return r;
    }
    r.tokens.push_back(x);
    ++r.n_accepted;
  }
  r.tokens.push_back(SampleTarget(p.subspan(drafts.size() * kV, kV), params, pos + drafts.size()));
  return r;
}

// Bug 2: the right test, but the replacement drawn from p instead of norm(max(0, p - q)).
AcceptResult AcceptResampleFromP(std::span<const int32_t> drafts, std::span<const float> q,
                                 std::span<const float> p, const SamplingParams& params,
                                 int64_t pos) {
  AcceptResult r;
  for (size_t i = 0; i < drafts.size(); ++i) {
    const auto pi = p.subspan(i * kV, kV), qi = q.subspan(i * kV, kV);
    const int32_t x = drafts[i];
    const double u = KeyedUniform(params.seed, pos + i, RandomPurpose::kAcceptUniform);
    if (!(u * qi[x] < pi[x])) {
      r.tokens.push_back(SampleGumbelMax(pi, params.seed, pos + i, RandomPurpose::kResidual));
      return r;
    }
    r.tokens.push_back(x);
    ++r.n_accepted;
  }
  r.tokens.push_back(SampleTarget(p.subspan(drafts.size() * kV, kV), params, pos + drafts.size()));
  return r;
}

// Hand-built distributions far apart (TV = 0.45) so a wrong rule is off by a wide margin, each
// probability ≥ 0.05 so every chi-square cell expects ≥ 100 draws at 10^5 trials (joint cells:
// ≥ 0.05 · 0.02 · 10^5 = 100).
const Row kP1 = {0.30f, 0.25f, 0.20f, 0.10f, 0.10f, 0.05f};
const Row kQ1 = {0.05f, 0.10f, 0.15f, 0.20f, 0.20f, 0.30f};
// Second position, conditioned on the first token a: rotations, so p2 and q2 depend on a.
Row Rotate(const Row& r, int by) {
  Row out(kV);
  for (int i = 0; i < kV; ++i) out[(i + by) % kV] = r[i];
  return out;
}
Row P2(int a) { return Rotate({0.40f, 0.20f, 0.15f, 0.10f, 0.10f, 0.05f}, a); }
Row Q2(int a) { return Rotate({0.02f, 0.08f, 0.10f, 0.20f, 0.25f, 0.35f}, a + 1); }
const Row kUniform(kV, 1.0f / kV);

std::vector<double> AsDouble(const Row& r) { return {r.begin(), r.end()}; }

Row Concat(std::initializer_list<Row> rows) {
  Row out;
  for (const Row& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

SamplingParams TrialParams(int trial) { return SamplingParams::Plain(1.0f, 1000003ull * trial + 11); }

// First emitted token of a pass drafting k = 1 from q1 against p1.
ChiSquareResult FirstTokenFit(const Acceptor& accept, AcceptMode mode, const Row& p1, const Row& q1) {
  std::vector<int64_t> counts(kV, 0);
  const Row p = Concat({p1, kUniform});
  for (int t = 0; t < kTrials; ++t) {
    const auto params = TrialParams(t);
    const int32_t x = SampleDraft(mode, q1, params, kFirstPosition);
    const int32_t draft[1] = {x};
    ++counts[accept(draft, q1, p, params, kFirstPosition).tokens[0]];
  }
  return ChiSquareTest(counts, AsDouble(p1));
}

// First two emitted tokens as one joint draw: a pass drafting x1 ~ q1, x2 ~ q2(.|x1); if x1 was
// rejected the second token comes from the next pass, which drafts position 2 again given the
// correction (with the same position-keyed randomness, as the decoder does).
ChiSquareResult JointFit(const Acceptor& accept, AcceptMode mode) {
  std::vector<int64_t> counts(kV * kV, 0);
  for (int t = 0; t < kTrials; ++t) {
    const auto params = TrialParams(t);
    const int32_t x1 = SampleDraft(mode, kQ1, params, kFirstPosition);
    const Row q2 = Q2(x1);
    const int32_t x2 = SampleDraft(mode, q2, params, kFirstPosition + 1);
    const int32_t drafts[2] = {x1, x2};
    const AcceptResult r = accept(drafts, Concat({kQ1, q2}), Concat({kP1, P2(x1), kUniform}), params,
                                  kFirstPosition);
    int32_t first = r.tokens[0], second;
    if (r.tokens.size() >= 2) {
      second = r.tokens[1];
    } else {
      const Row q2b = Q2(first);
      const int32_t y[1] = {SampleDraft(mode, q2b, params, kFirstPosition + 1)};
      second = accept(y, q2b, Concat({P2(first), kUniform}), params, kFirstPosition + 1).tokens[0];
    }
    ++counts[first * kV + second];
  }
  std::vector<double> expected(kV * kV);
  for (int a = 0; a < kV; ++a) {
    const Row p2 = P2(a);
    for (int b = 0; b < kV; ++b) expected[a * kV + b] = double(kP1[a]) * p2[b];
  }
  return ChiSquareTest(counts, expected);
}

void ExpectFits(const ChiSquareResult& r) {
  EXPECT_GT(r.p_value, kFalseFailureRate) << "chi2 " << r.statistic << " dof " << r.dof;
}
void ExpectRejected(const ChiSquareResult& r) {
  EXPECT_LT(r.p_value, kFalseFailureRate) << "chi2 " << r.statistic << " dof " << r.dof;
}

TEST(RejectionAcceptance, FirstTokenIsDistributedAsP) {
  ExpectFits(FirstTokenFit(Correct(AcceptMode::kRejection), AcceptMode::kRejection, kP1, kQ1));
}

TEST(RejectionAcceptance, FirstTwoTokensAreDistributedAsTheTargetsJoint) {
  ExpectFits(JointFit(Correct(AcceptMode::kRejection), AcceptMode::kRejection));
}

TEST(RejectionAcceptance, OneHotDraftIsExact) {
  // q = δ_x (argmax drafting): accept with probability p(x), else p with x removed.
  Row q1(kV, 0.0f);
  q1[3] = 1.0f;
  ExpectFits(FirstTokenFit(Correct(AcceptMode::kRejection), AcceptMode::kRejection, kP1, q1));
}

TEST(RejectionAcceptance, FilteredTargetNeverEmitsAFilteredToken) {
  // p with zeros (as top-k/top-p leave it) against a q that puts mass there.
  const Row p1 = {0.5f, 0.0f, 0.3f, 0.0f, 0.2f, 0.0f};
  ExpectFits(FirstTokenFit(Correct(AcceptMode::kRejection), AcceptMode::kRejection, p1, kQ1));
}

TEST(CoupledAcceptance, FirstTwoTokensAreDistributedAsTheTargetsJoint) {
  ExpectFits(JointFit(Correct(AcceptMode::kCoupled), AcceptMode::kCoupled));
}

TEST(WrongAcceptorsFail, InvertedRatio) {
  ExpectRejected(FirstTokenFit(AcceptInvertedRatio, AcceptMode::kRejection, kP1, kQ1));
  ExpectRejected(JointFit(AcceptInvertedRatio, AcceptMode::kRejection));
}

TEST(WrongAcceptorsFail, ResampleFromPInsteadOfTheResidual) {
  ExpectRejected(FirstTokenFit(AcceptResampleFromP, AcceptMode::kRejection, kP1, kQ1));
  ExpectRejected(JointFit(AcceptResampleFromP, AcceptMode::kRejection));
}

TEST(RejectionAcceptance, AcceptanceRateIsOneMinusTotalVariation) {
  // P(accept) = Σ min(p, q) = 0.55 here; a binomial count over 10^5 trials has sd
  // √(N·0.55·0.45) = 157, so ±5.3 sd (two-sided p ≈ 1e-7) is 835.
  int64_t accepted = 0;
  const Row p = Concat({kP1, kUniform});
  for (int t = 0; t < kTrials; ++t) {
    const auto params = TrialParams(t);
    const int32_t x[1] = {SampleDraft(AcceptMode::kRejection, kQ1, params, kFirstPosition)};
    accepted += Accept(AcceptMode::kRejection, x, kQ1, p, kV, params, kFirstPosition).n_accepted;
  }
  EXPECT_NEAR(accepted, 0.55 * kTrials, 835);
}

TEST(GreedyAcceptance, AcceptsIffTheDraftIsTheArgmaxAndEmitsTheArgmax) {
  const auto greedy = SamplingParams::Greedy();
  Row p;
  ProcessLogits(std::vector<float>{0, 1, 5, 2, 5, 0}, greedy, &p);  // argmax 2 (tie with 4)
  const Row p_rows = Concat({p, p, p});
  const Row q(2 * kV, 0.0f);  // unused by the greedy rule
  const int32_t good[2] = {2, 2};
  auto r = Accept(AcceptMode::kRejection, good, q, p_rows, kV, greedy, 0);
  EXPECT_EQ(r.n_accepted, 2);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 2, 2}));
  const int32_t bad[2] = {2, 4};
  r = Accept(AcceptMode::kCoupled, bad, q, p_rows, kV, greedy, 0);
  EXPECT_EQ(r.n_accepted, 1);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 2}));
}

}  // namespace
}  // namespace specgen
