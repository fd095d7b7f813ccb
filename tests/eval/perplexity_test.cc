// Perplexity windows and statistics on models whose distributions are known exactly, and the
// log-prob encoding the KL comparison reads.
#include "engine/eval/perplexity.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/eval/log_probs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

using ::testing::HasSubstr;

// A CausalLm whose logits come from a function of the token fed; it records what it was fed and
// checks that positions are consecutive from its cache.
class FakeLm : public CausalLm {
 public:
  FakeLm(int64_t vocab, int64_t context, std::function<void(int32_t, float*)> logits)
      : logits_(std::move(logits)), context_(context) {
    spec_.vocab_size = vocab;
  }
  const ModelSpec& spec() const override { return spec_; }
  int64_t n_past() const override { return n_past_; }
  int64_t max_context() const override { return context_; }
  absl::Status Forward(std::span<const int32_t> tokens, std::vector<float>* logits) override {
    if (n_past_ + static_cast<int64_t>(tokens.size()) > context_) return absl::OutOfRangeError("full");
    logits->assign(tokens.size() * spec_.vocab_size, 0.0f);
    for (size_t i = 0; i < tokens.size(); ++i) {
      fed.push_back({n_past_ + static_cast<int64_t>(i), tokens[i]});
      logits_(tokens[i], logits->data() + i * spec_.vocab_size);
    }
    n_past_ += static_cast<int64_t>(tokens.size());
    return absl::OkStatus();
  }
  absl::Status Truncate(int64_t n) override {
    n_past_ = std::min(n_past_, n);
    return absl::OkStatus();
  }
  std::vector<std::pair<int64_t, int32_t>> fed;  // (position, token)

 private:
  ModelSpec spec_;
  std::function<void(int32_t, float*)> logits_;
  int64_t context_;
  int64_t n_past_ = 0;
};

std::vector<int32_t> Tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(gen() % vocab);
  return t;
}

TEST(PlanWindows, LlamaCppConvention) {
  const WindowPlan p = PlanWindows(1100, 512).value();
  EXPECT_EQ(p.window, 512);
  EXPECT_EQ(p.n_windows, 2);  // the last 76 tokens are a partial window
  EXPECT_EQ(p.first, 256);
  EXPECT_EQ(p.scored_per_window(), 255);  // positions 256..510 predict tokens 257..511
  const WindowPlan shorter = PlanWindows(100, 512).value();
  EXPECT_EQ(shorter.window, 100);
  EXPECT_EQ(shorter.n_windows, 1);
  EXPECT_EQ(shorter.scored(), 49);
  const WindowPlan two = PlanWindows(2, 512).value();
  EXPECT_EQ(two.scored(), 1);  // position 0 predicts token 1
  EXPECT_EQ(two.first, 0);
  EXPECT_THAT(std::string(PlanWindows(1, 512).status().message()), HasSubstr("1 token"));
  EXPECT_THAT(std::string(PlanWindows(0, 512).status().message()), HasSubstr("0 tokens"));
  EXPECT_FALSE(PlanWindows(100, 1).ok());
}

// Uniform logits over V tokens: every next token has probability 1/V, so the perplexity is V.
TEST(Perplexity, UniformModelHasPerplexityOfTheVocabulary) {
  for (int64_t vocab : {2, 300, 4096}) {
    FakeLm lm(vocab, 64, [](int32_t, float*) {});
    const std::vector<int32_t> tokens = Tokens(200, vocab, 1);
    const WindowPlan plan = PlanWindows(200, 64).value();
    PerplexityStats stats;
    ASSERT_TRUE(ScoreWindows(lm, tokens, plan, -1, 16, [&](const ScoredPosition& p) {
                  stats.Add(NegLogLikelihood(p.logits, p.next));
                  return absl::OkStatus();
                }).ok());
    EXPECT_EQ(stats.count(), plan.scored());
    // Each nll is log(V) to double rounding; the mean of equal terms and exp keep a few ulps.
    EXPECT_NEAR(stats.perplexity(), static_cast<double>(vocab), 1e-12 * vocab) << vocab;
    EXPECT_NEAR(stats.perplexity_error(), 0.0, 1e-9 * vocab);
  }
}

// A model that puts probability 3/4 on (token + 1) mod V and the rest spread evenly: perplexity
// exp(mean nll) with nll = log(4/3) where the text follows that rule and log(4(V − 1)) elsewhere.
TEST(Perplexity, ScoresTheSecondHalfOfEachWindowFromAnEmptyCache) {
  const int64_t vocab = 10, ctx = 8;
  const double hit = std::log(3.0);  // logit of the favoured token; the other 9 have logit log(1/9)
  FakeLm lm(vocab, ctx, [&](int32_t tok, float* l) {
    for (int64_t i = 0; i < vocab; ++i) l[i] = static_cast<float>(std::log(1.0 / 9.0));
    l[(tok + 1) % vocab] = static_cast<float>(hit);
  });
  std::vector<int32_t> tokens = Tokens(21, vocab, 3);  // 2 windows of 8, 5 tokens left over
  for (int i = 0; i + 1 < 21; i += 3) tokens[i + 1] = (tokens[i] + 1) % vocab;  // some follow the rule
  const WindowPlan plan = PlanWindows(21, ctx).value();
  ASSERT_EQ(plan.n_windows, 2);
  ASSERT_EQ(plan.first, 4);
  const int32_t bos = 9;
  std::vector<std::pair<int64_t, int64_t>> scored;
  PerplexityStats stats;
  double want_sum = 0.0;
  ASSERT_TRUE(ScoreWindows(lm, tokens, plan, bos, 3, [&](const ScoredPosition& p) {
                scored.push_back({p.window, p.position});
                const int32_t fed = p.position == 0 ? bos : tokens[p.window * ctx + p.position];
                EXPECT_EQ(p.next, tokens[p.window * ctx + p.position + 1]);
                want_sum += p.next == (fed + 1) % vocab ? std::log(4.0 / 3.0) : std::log(4.0 * 9.0);
                stats.Add(NegLogLikelihood(p.logits, p.next));
                return absl::OkStatus();
              }).ok());
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 4}, {0, 5}, {0, 6}, {1, 4}, {1, 5}, {1, 6}};
  EXPECT_EQ(scored, want);
  // Each window from position 0 (an empty cache), BOS first, the last token never fed.
  ASSERT_EQ(lm.fed.size(), 14u);
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(lm.fed[w * 7], std::make_pair(int64_t{0}, bos));
    for (int j = 1; j < 7; ++j) EXPECT_EQ(lm.fed[w * 7 + j], std::make_pair(int64_t{j}, tokens[w * ctx + j]));
  }
  // fp32 logits of log 3 and log(1/9): probabilities off by a few fp32 ulps, ~1e-7 relative.
  EXPECT_NEAR(stats.mean_nll(), want_sum / 6, 1e-6);
}

// llama.cpp's ±: the standard error of the mean nll (population variance over n − 1), through exp.
TEST(Perplexity, ErrorIsTheStandardErrorThroughExp) {
  PerplexityStats s;
  for (double nll : {1.0, 2.0, 3.0, 4.0}) s.Add(nll);
  EXPECT_DOUBLE_EQ(s.mean_nll(), 2.5);
  EXPECT_NEAR(s.mean_nll_error(), std::sqrt(1.25 / 3), 1e-15);
  EXPECT_NEAR(s.perplexity(), std::exp(2.5), 1e-12);
  EXPECT_NEAR(s.perplexity_error(), std::exp(2.5) * std::sqrt(1.25 / 3), 1e-12);
}

TEST(Perplexity, NonFiniteLogitsAreAnErrorNamingThePosition) {
  FakeLm lm(4, 16, [](int32_t tok, float* l) { l[0] = tok == 2 ? NAN : 0.0f; });
  const std::vector<int32_t> tokens = {0, 1, 1, 1, 2, 1, 1, 1};
  absl::Status s = ScoreWindows(lm, tokens, PlanWindows(8, 8).value(), -1, 4,
                                [](const ScoredPosition&) { return absl::OkStatus(); });
  EXPECT_THAT(std::string(s.message()), HasSubstr("position 4"));
  FakeLm small(4, 4, [](int32_t, float*) {});
  EXPECT_FALSE(ScoreWindows(small, tokens, PlanWindows(8, 8).value(), -1, 4,
                            [](const ScoredPosition&) { return absl::OkStatus(); })
                   .ok());
}

TEST(LogProbs, EncodingIsWithinHalfAStepAboveTheFloor) {
  std::mt19937 gen(7);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  std::vector<float> l(1000);
  for (float& x : l) x = logit(gen);
  EncodedLogProbs e;
  EncodeLogProbs(l, &e);
  double max = -INFINITY, sum = 0;
  for (float x : l) max = std::max(max, double(x));
  for (float x : l) sum += std::exp(x - max);
  const double lse = max + std::log(sum);
  const double floor = max - kLogProbRange - lse;
  for (size_t i = 0; i < l.size(); ++i) {
    const double exact = l[i] - lse;
    // Half a step, plus float rounding of the stored min and scale (a few 1e-7 of 16 nats).
    const double tol = e.scale / 2 + 1e-5;
    if (exact >= floor) {
      EXPECT_NEAR(e.LogProb(i), exact, tol) << i;
    } else {
      EXPECT_NEAR(e.LogProb(i), floor, tol) << i;
    }
  }
  EXPECT_EQ(KlDivergence(e, e), 0.0);
  EXPECT_EQ(ArgMax(l), std::max_element(l.begin(), l.end()) - l.begin());
}

TEST(LogProbs, UniformAndKnownDivergence) {
  EncodedLogProbs u;
  EncodeLogProbs(std::vector<float>(8, 1.5f), &u);
  EXPECT_EQ(u.scale, 0.0f);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(u.LogProb(i), -std::log(8.0), 1e-6);
  // KL((1/2, 1/2) ‖ (3/4, 1/4)) = ½ log(2/3) + ½ log 2.
  EncodedLogProbs p, q;
  EncodeLogProbs(std::vector<float>{0.0f, 0.0f}, &p);
  EncodeLogProbs(std::vector<float>{static_cast<float>(std::log(3.0)), 0.0f}, &q);
  const double want = 0.5 * std::log(2.0 / 3.0) + 0.5 * std::log(2.0);
  // Each decoded log-prob is within half a step (log 3 / 65535 / 2) of its value.
  EXPECT_NEAR(KlDivergence(p, q), want, 2 * std::log(3.0) / 65535);
  EXPECT_EQ(ArgMax(std::vector<float>{1.0f, 3.0f, 3.0f}), 1);  // lowest id on ties
  EXPECT_NEAR(NegLogLikelihood(std::vector<float>{0.0f, static_cast<float>(std::log(3.0))}, 1),
              std::log(4.0 / 3.0), 1e-7);
}

TEST(KlStats, QuantilesAndAgreement) {
  KlStats s;
  for (int i = 0; i <= 100; ++i) s.Add(i * 0.01, i % 4 != 0);  // 0.00 .. 1.00; 26 of 101 disagree
  EXPECT_NEAR(s.mean(), 0.5, 1e-12);
  EXPECT_NEAR(s.Quantile(0.5), 0.5, 1e-12);
  EXPECT_NEAR(s.Quantile(0.99), 0.99, 1e-12);
  EXPECT_NEAR(s.Quantile(0.995), 0.995, 1e-12);  // between ranks 99 and 100
  EXPECT_EQ(s.max(), 1.0);
  EXPECT_NEAR(s.same_top(), 75.0 / 101.0, 1e-12);
  EXPECT_NEAR(s.same_top_error(), std::sqrt((75.0 / 101) * (26.0 / 101) / 100), 1e-12);
  // Standard error of the mean of 0, 0.01, …, 1: sample sd / sqrt(n).
  double ss = 0;
  for (int i = 0; i <= 100; ++i) ss += (i * 0.01 - 0.5) * (i * 0.01 - 0.5);
  EXPECT_NEAR(s.mean_error(), std::sqrt(ss / 100 / 101), 1e-12);
}

}  // namespace
}  // namespace specgen
