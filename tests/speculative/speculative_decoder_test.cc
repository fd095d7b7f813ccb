// The speculative loop over test doubles: greedy and `coupled` outputs equal plain decoding token for
// token, every pass emits 1..k+1 tokens and the stats add up, caches end holding exactly the accepted
// prefix, the first two tokens of `rejection` sampling are distributed as the target's, and stops
// (-n, end ids, context end) and bad input behave.
#include "engine/speculative/speculative_decoder.h"

#include <chrono>
#include <numeric>
#include <random>
#include <thread>

#include "draft/model_proposer.h"
#include "engine/core/str_cat.h"
#include "engine/sampling/distribution.h"
#include "gtest/gtest.h"
#include "tests/common/chi_square.h"
#include "tests/speculative/fake_lm.h"
#include "tests/common/speculative_options.h"

namespace specgen {
namespace {

using ::specgen::testing::ChiSquareTest;
using ::specgen::testing::FakeLm;
using ::specgen::testing::kFalseFailureRate;

constexpr int64_t kVocab = 50;
constexpr int64_t kContext = 256;

std::vector<std::vector<int32_t>> Prompts(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts(n);
  for (auto& p : prompts) {
    p.resize(1 + rng() % 12);
    for (auto& t : p) t = rng() % kVocab;
  }
  return prompts;
}

// Runs one generation with a fresh target (and draft when draft_max > 0 or adaptive).
struct RunResult {
  std::vector<int32_t> tokens;
  SpeculativeStats stats;
};
RunResult Generate(const std::vector<int32_t>& prompt, SpeculativeOptions options, double draft_perturbation,
             bool with_draft = true) {
  FakeLm target(kVocab, kContext);
  FakeLm draft(kVocab, kContext, 4.0, draft_perturbation);
  ModelProposer proposer(&draft, kVocab, options.sampling, options.accept);
  SpeculativeDecoder decoder(&target, with_draft ? &proposer : nullptr, options);
  auto out = decoder.Generate(prompt);
  EXPECT_TRUE(out.ok()) << out.status();
  return {out.ok() ? *out : std::vector<int32_t>{}, decoder.stats()};
}

SpeculativeOptions Options(SamplingParams sampling, int draft_max, bool adaptive = false,
                           AcceptMode mode = AcceptMode::kRejection, int64_t n = 40) {
  return testing::MakeSpeculativeOptions(sampling, draft_max, adaptive, mode, n);
}

TEST(SpeculativeDecoder, GreedyEqualsTargetOnlyGreedyForEveryDraftLength) {
  const auto greedy = SamplingParams::Greedy();
  for (const auto& prompt : Prompts(12, 1)) {
    const RunResult plain = Generate(prompt, Options(greedy, 0), 0.0, /*with_draft=*/false);
    ASSERT_EQ(plain.tokens.size(), 40u);
    for (double perturbation : {0.3, 1.0}) {  // a close draft and a poor one
      int64_t accepted = 0;
      for (int k = 1; k <= 8; ++k) {
        const RunResult spec = Generate(prompt, Options(greedy, k), perturbation);
        EXPECT_EQ(spec.tokens, plain.tokens) << "k=" << k << " perturbation=" << perturbation;
        accepted += spec.stats.accepted;
      }
      // Equality alone holds if every draft is rejected; the close draft's tokens must be used.
      if (perturbation < 0.5) {
        EXPECT_GT(accepted, 0) << "perturbation=" << perturbation;
      }
      EXPECT_EQ(Generate(prompt, Options(greedy, 8, /*adaptive=*/true), perturbation).tokens,
                plain.tokens)
          << "adaptive, perturbation=" << perturbation;
    }
  }
}

TEST(SpeculativeDecoder, CoupledOutputPerSeedEqualsPlainDecoding) {
  std::vector<SamplingParams> settings;
  for (float t : {0.5f, 1.0f, 1.5f}) settings.push_back(SamplingParams::Plain(t, 0));
  SamplingParams filtered;  // top-k 40, top-p 0.95, min-p 0.05
  filtered.temperature = 1.2f;
  settings.push_back(filtered);
  SamplingParams top_k = SamplingParams::Plain(1.0f, 0);
  top_k.top_k = 5;
  settings.push_back(top_k);
  SamplingParams top_p = SamplingParams::Plain(0.9f, 0);
  top_p.top_p = 0.7f;
  settings.push_back(top_p);
  for (auto params : settings) {
    for (uint64_t seed : {1ull, 2ull, 99ull}) {
      params.seed = seed;
      const auto prompt = Prompts(1, static_cast<uint32_t>(seed))[0];
      const RunResult plain = Generate(prompt, Options(params, 0, false, AcceptMode::kCoupled), 0.0, false);
      // Plain decoding does not depend on the mode: both sample with the target's keyed noise.
      EXPECT_EQ(Generate(prompt, Options(params, 0), 0.0, false).tokens, plain.tokens);
      for (int k : {1, 3, 6}) {
        const RunResult spec = Generate(prompt, Options(params, k, false, AcceptMode::kCoupled), 0.5);
        EXPECT_EQ(spec.tokens, plain.tokens) << ToString(params) << " k=" << k;
        EXPECT_GT(spec.stats.accepted, 0) << ToString(params) << " k=" << k;
      }
      EXPECT_EQ(Generate(prompt, Options(params, 6, true, AcceptMode::kCoupled), 0.5).tokens,
                plain.tokens);
    }
  }
}

TEST(SpeculativeDecoder, PassesEmitOneToKPlusOneTokensAndStatsAddUp) {
  for (auto mode : {AcceptMode::kRejection, AcceptMode::kCoupled}) {
    for (bool adaptive : {false, true}) {
      auto options = Options(SamplingParams::Plain(1.0f, 5), 5, adaptive, mode, 100);
      int64_t passes = 0, drafted = 0, accepted = 0, emitted = 0;
      std::vector<int64_t> accepted_at(5, 0);
      options.on_pass = [&](int k, const AcceptResult& r) {
        EXPECT_GE(k, 0);
        EXPECT_LE(k, 5);
        EXPECT_GE(r.n_accepted, 0);
        EXPECT_LE(r.n_accepted, k);
        EXPECT_EQ(r.tokens.size(), static_cast<size_t>(r.n_accepted) + 1);
        ++passes;
        drafted += k;
        accepted += r.n_accepted;
        emitted += static_cast<int64_t>(r.tokens.size());
        for (int i = 0; i < r.n_accepted; ++i) ++accepted_at[i];
      };
      const RunResult run = Generate({3, 1, 4}, options, 0.5);
      EXPECT_EQ(run.tokens.size(), 100u);
      EXPECT_EQ(run.stats.tokens, 100);
      EXPECT_EQ(emitted, 100);  // drafting is capped so -n never cuts a pass short
      EXPECT_EQ(run.stats.passes, passes);
      EXPECT_EQ(run.stats.drafted, drafted);
      EXPECT_EQ(run.stats.accepted, accepted);
      EXPECT_DOUBLE_EQ(run.stats.mean_accepted_length(), 1.0 + double(accepted) / passes);
      EXPECT_DOUBLE_EQ(run.stats.mean_accepted_length(), double(emitted) / passes);
      for (size_t i = 0; i < run.stats.accepted_at.size(); ++i) {
        EXPECT_EQ(run.stats.accepted_at[i], accepted_at[i]) << i;
      }
      EXPECT_GT(run.stats.accepted, 0);
    }
  }
}

TEST(SpeculativeDecoder, CachesHoldExactlyTheAcceptedPrefixAfterRejections) {
  FakeLm target(kVocab, kContext);
  FakeLm draft(kVocab, kContext, 4.0, 1.0);  // poor draft: many rejections
  auto options = Options(SamplingParams::Plain(1.0f, 3), 4);
  int64_t rejections = 0;
  options.on_pass = [&](int k, const AcceptResult& r) { rejections += r.n_accepted < k; };
  ModelProposer proposer(&draft, kVocab, options.sampling, options.accept);
  SpeculativeDecoder decoder(&target, &proposer, options);
  const std::vector<int32_t> prompt = {7, 8, 9};
  auto out = decoder.Generate(prompt);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_GT(rejections, 5);
  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), out->begin(), out->end());
  // Target: every committed token but the last (which the next pass would feed).
  EXPECT_EQ(target.cache(), std::vector<int32_t>(sequence.begin(), sequence.end() - 1));
  // Draft: a prefix of the committed sequence, nothing rejected left in it.
  ASSERT_LE(draft.cache().size(), sequence.size());
  EXPECT_EQ(draft.cache(), std::vector<int32_t>(sequence.begin(), sequence.begin() + draft.cache().size()));
  EXPECT_EQ(proposer.cached(), draft.cache());
  // ONE target forward per pass, plus the prompt prefill.
  EXPECT_EQ(target.forward_calls(), decoder.stats().passes + 1);
}

TEST(SpeculativeDecoder, RejectionSamplingFirstTwoTokensAreDistributedAsTheTarget) {
  // The whole loop (draft decode, rollback, re-draft at the same positions) must sample the target's
  // joint of the first two tokens. V = 5 keeps 25 cells at ≥ 10^5 · (min joint prob) ≥ 100 draws.
  constexpr int64_t kV = 5;
  constexpr int kTrials = 100000;
  const std::vector<int32_t> prompt = {2};
  FakeLm target(kV, 16, 1.5), draft(kV, 16, 1.5, 1.5, 7);
  auto params = SamplingParams::Plain(1.0f, 0);
  std::vector<int64_t> counts(kV * kV, 0);
  int64_t accepted = 0;
  for (int t = 0; t < kTrials; ++t) {
    params.seed = 7919ull * t + 1;
    auto options = Options(params, 2, false, AcceptMode::kRejection, 2);
    ModelProposer proposer(&draft, kV, params, AcceptMode::kRejection);
    SpeculativeDecoder decoder(&target, &proposer, options);
    auto out = decoder.Generate(prompt);
    ASSERT_TRUE(out.ok());
    ++counts[(*out)[0] * kV + (*out)[1]];
    accepted += decoder.stats().accepted;
  }
  std::vector<float> logits(kV), p1, p2;
  target.NextLogits(prompt[0], 0, logits.data());
  ProcessLogits(logits, params, &p1);
  std::vector<double> expected(kV * kV);
  for (int a = 0; a < kV; ++a) {
    target.NextLogits(a, 1, logits.data());
    ProcessLogits(logits, params, &p2);
    for (int b = 0; b < kV; ++b) expected[a * kV + b] = double(p1[a]) * p2[b];
  }
  const auto r = ChiSquareTest(counts, expected);
  EXPECT_GT(r.p_value, kFalseFailureRate) << "chi2 " << r.statistic << " dof " << r.dof;
  EXPECT_GT(accepted, kTrials / 4);  // the draft is used, not always rejected
}

// --n-probs: every emitted token's log-probabilities, in order, one entry per token, and the very
// figures the target alone gives: each is read from the pass row that chose the token, whose earlier
// rows hold accepted tokens. FakeLm's rows do not depend on the batch, so the equality is exact.
struct LogprobRun {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
};
LogprobRun GenerateWithLogprobs(const std::vector<int32_t>& prompt, SpeculativeOptions options, bool with_draft) {
  LogprobRun run;
  options.n_probs = 3;
  options.on_logprobs = [&](std::span<const TokenLogprobs> step) {
    run.logprobs.insert(run.logprobs.end(), step.begin(), step.end());
  };
  FakeLm target(kVocab, kContext);
  FakeLm draft(kVocab, kContext, 4.0, 0.3);
  ModelProposer proposer(&draft, kVocab, options.sampling, options.accept);
  SpeculativeDecoder decoder(&target, with_draft ? &proposer : nullptr, options);
  auto out = decoder.Generate(prompt);
  EXPECT_TRUE(out.ok()) << out.status();
  if (out.ok()) run.tokens = *out;
  return run;
}

void ExpectSameLogprobs(const std::vector<TokenLogprobs>& a, const std::vector<TokenLogprobs>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].chosen.token, b[i].chosen.token) << what << " token " << i;
    EXPECT_EQ(a[i].chosen.logprob, b[i].chosen.logprob) << what << " token " << i;
    ASSERT_EQ(a[i].top.size(), b[i].top.size()) << what << " token " << i;
    for (size_t j = 0; j < a[i].top.size(); ++j) {
      EXPECT_EQ(a[i].top[j].token, b[i].top[j].token) << what << " token " << i << " top " << j;
      EXPECT_EQ(a[i].top[j].logprob, b[i].top[j].logprob) << what << " token " << i << " top " << j;
    }
  }
}

TEST(SpeculativeDecoder, LogprobsAreTheTargetsOwnWithOrWithoutADraft) {
  SamplingParams sampled = SamplingParams::Plain(1.0f, 7);
  for (const auto& [params, mode] : {std::pair{SamplingParams::Greedy(), AcceptMode::kRejection},
                                     std::pair{sampled, AcceptMode::kCoupled}}) {
    for (const auto& prompt : Prompts(4, 11)) {
      const LogprobRun plain = GenerateWithLogprobs(prompt, Options(params, 0, false, mode), false);
      ASSERT_EQ(plain.logprobs.size(), plain.tokens.size());
      for (size_t i = 0; i < plain.tokens.size(); ++i) {
        const TokenLogprobs& t = plain.logprobs[i];
        EXPECT_EQ(t.chosen.token, plain.tokens[i]);
        ASSERT_EQ(t.top.size(), 3u);
        EXPECT_GE(t.top[0].logprob, t.top[1].logprob);
        EXPECT_GE(t.top[1].logprob, t.top[2].logprob);
        EXPECT_LE(t.chosen.logprob, t.top[0].logprob);
        if (params.greedy()) {
          EXPECT_EQ(t.top[0].token, plain.tokens[i]);  // greedy takes the most probable
        }
      }
      for (int k : {1, 3, 6}) {
        const LogprobRun spec = GenerateWithLogprobs(prompt, Options(params, k, false, mode), true);
        EXPECT_EQ(spec.tokens, plain.tokens) << "k=" << k;
        ExpectSameLogprobs(spec.logprobs, plain.logprobs, Cat("k=", k));
      }
    }
  }
}

TEST(SpeculativeDecoder, LogprobsStopWithTheTokensAtAnEndToken) {
  const auto greedy = SamplingParams::Greedy();
  const LogprobRun plain = GenerateWithLogprobs({1, 2}, Options(greedy, 0), false);
  auto options = Options(greedy, 4);
  options.end_ids = {plain.tokens[5]};
  // The end token comes mid-pass: the pass's later rows are not the sequence's and are not reported.
  const LogprobRun run = GenerateWithLogprobs({1, 2}, options, true);
  ASSERT_LT(run.tokens.size(), plain.tokens.size());
  ExpectSameLogprobs(run.logprobs, std::vector<TokenLogprobs>(plain.logprobs.begin(),
                                                              plain.logprobs.begin() + run.tokens.size()),
                     "cut at the end token");
}

TEST(SpeculativeDecoder, StopsAtAnEndToken) {
  const auto greedy = SamplingParams::Greedy();
  const RunResult plain = Generate({1, 2}, Options(greedy, 0), 0, false);
  auto options = Options(greedy, 4);
  options.end_ids = {plain.tokens[5]};
  const RunResult run = Generate({1, 2}, options, 0.3);
  const auto first_end = std::find(plain.tokens.begin(), plain.tokens.end(), plain.tokens[5]);
  EXPECT_EQ(run.tokens, std::vector<int32_t>(plain.tokens.begin(), first_end + 1));
  EXPECT_EQ(run.stats.stop_reason, StopReason::kEndToken);
  EXPECT_EQ(plain.stats.stop_reason, StopReason::kMaxTokens);
}

TEST(SpeculativeDecoder, StopsAtTheContextEnd) {
  FakeLm target(kVocab, 20), draft(kVocab, 20, 4.0, 0.3);
  const auto options = Options(SamplingParams::Greedy(), 8, false, AcceptMode::kRejection, 100);
  ModelProposer proposer(&draft, kVocab, options.sampling, options.accept);
  SpeculativeDecoder decoder(&target, &proposer, options);
  auto out = decoder.Generate(std::vector<int32_t>{1, 2, 3});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->size(), 17u);  // the sequence fills the 20 positions
  EXPECT_EQ(decoder.stats().stop_reason, StopReason::kContextFull);
}

// SpeculativeOptions::stop (the chat's Ctrl-C): generation ends before the step after it says so,
// with what was committed so far, the prefix of the uninterrupted output.
TEST(SpeculativeDecoder, StopsWhenAsked) {
  const auto greedy = SamplingParams::Greedy();
  const RunResult full = Generate({1, 2}, Options(greedy, 3), 0.3);
  auto options = Options(greedy, 3);
  int passes = 0;
  options.on_pass = [&](int, const AcceptResult&) { ++passes; };
  options.stop = [&] { return passes >= 2; };
  const RunResult stopped = Generate({1, 2}, options, 0.3);
  EXPECT_EQ(stopped.stats.stop_reason, StopReason::kStopped);
  EXPECT_EQ(stopped.stats.passes, 2);
  ASSERT_LT(stopped.tokens.size(), full.tokens.size());
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + stopped.tokens.size()));
}

// A negative -n generates until an end token or, failing one, until the context is full.
TEST(SpeculativeDecoder, NegativeMaxTokensRunsToTheContextEnd) {
  for (int k : {0, 3}) {
    FakeLm target(kVocab, 30), draft(kVocab, 30, 4.0, 0.3);
    const auto options = Options(SamplingParams::Greedy(), k, false, AcceptMode::kRejection, -1);
    ModelProposer proposer(&draft, kVocab, options.sampling, options.accept);
    SpeculativeDecoder decoder(&target, k > 0 ? &proposer : nullptr, options);
    auto out = decoder.Generate(std::vector<int32_t>{1, 2});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->size(), 28u) << "k=" << k;
    EXPECT_EQ(decoder.stats().stop_reason, StopReason::kContextFull) << "k=" << k;
  }
}

// keep_cache: a second prompt that extends the first call's sequence feeds only what the target's
// cache lacks, and generates what a fresh loop generates from that prompt.
TEST(SpeculativeDecoder, KeptCacheFeedsOnlyTheNewPartOfTheNextPrompt) {
  FakeLm target(kVocab, kContext), draft(kVocab, kContext, 4.0, 0.3);
  auto options = Options(SamplingParams::Greedy(), 3, false, AcceptMode::kRejection, 10);
  options.keep_cache = true;
  ModelProposer proposer(&draft, kVocab, options.sampling, options.accept);
  SpeculativeDecoder kept(&target, &proposer, options);
  const std::vector<int32_t> turn1 = {4, 8, 15, 16};
  auto first = kept.Generate(turn1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(kept.last_prefill_fed(), 3);
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), first->begin(), first->end());
  turn2.insert(turn2.end(), {23, 42});
  auto second = kept.Generate(turn2);
  ASSERT_TRUE(second.ok()) << second.status();
  // The cache held turn1 and the reply but the reply's last token: that token and 23 are fed (42 goes
  // with the first step).
  EXPECT_EQ(kept.last_prefill_fed(), 2);
  options.keep_cache = false;
  EXPECT_EQ(*second, Generate(turn2, options, 0.3).tokens);
}

TEST(SpeculativeDecoder, RejectsBadPrompts) {
  FakeLm target(kVocab, 8);
  SpeculativeDecoder decoder(&target, nullptr, Options(SamplingParams::Greedy(), 0));
  EXPECT_FALSE(decoder.Generate(std::vector<int32_t>{}).ok());
  EXPECT_NE(decoder.Generate(std::vector<int32_t>{1, kVocab}).status().message().find("vocabulary"),
            std::string::npos);
  EXPECT_NE(decoder.Generate(std::vector<int32_t>(8, 1)).status().message().find("context"),
            std::string::npos);
}

TEST(SpeculativeDecoder, StreamsEachPassesTokensInOrder) {
  FakeLm target(kVocab, kContext), draft(kVocab, kContext, 4.0, 0.3);
  const auto options = Options(SamplingParams::Greedy(), 4);
  ModelProposer proposer(&draft, kVocab, options.sampling, options.accept);
  SpeculativeDecoder decoder(&target, &proposer, options);
  std::vector<int32_t> streamed;
  auto out = decoder.Generate(std::vector<int32_t>{5},
                              [&](std::span<const int32_t> t) { streamed.insert(streamed.end(), t.begin(), t.end()); });
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(streamed, *out);
}


// A FakeLm that logs each pass's size and, like a model whose weights stream, takes time per position
// (and reports the streamed prefill chunk when asked to).
class TimedLm : public FakeLm {
 public:
  TimedLm(int64_t vocab, int64_t max_context, double perturbation, std::chrono::microseconds per_position,
          size_t prefill_chunk = kPrefillChunk)
      : FakeLm(vocab, max_context, 4.0, perturbation, 77), per_position_(per_position), chunk_(prefill_chunk) {}
  absl::Status Forward(std::span<const int32_t> tokens, std::vector<float>* logits) override {
    passes_.push_back(static_cast<int64_t>(tokens.size()));
    if (per_position_.count() > 0) std::this_thread::sleep_for(per_position_ * tokens.size());
    return FakeLm::Forward(tokens, logits);
  }
  size_t prefill_chunk() const override { return chunk_; }
  const std::vector<int64_t>& passes() const { return passes_; }

 private:
  std::chrono::microseconds per_position_;
  size_t chunk_;
  std::vector<int64_t> passes_;
};

// The prompt goes to the target in its prefill_chunk() (larger when its weights stream), all but the
// last token, logits unread; the first token's time (TTFT) covers the prefill and the first step.
TEST(SpeculativeDecoder, PrefillFollowsTheTargetsChunkAndReportsTimeToFirstToken) {
  std::vector<int32_t> prompt(700);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7 + 3) % kVocab);
  for (const size_t chunk : {kPrefillChunk, size_t{1024}}) {  // the default, and a streamed plan's
    TimedLm target(kVocab, 2048, 0.0, std::chrono::microseconds(0), chunk);
    SpeculativeDecoder decoder(&target, nullptr, Options(SamplingParams::Greedy(), 0, false, AcceptMode::kRejection, 3));
    ASSERT_TRUE(decoder.Generate(prompt).ok());
    const size_t fed = prompt.size() - 1;
    const size_t chunks = (fed + chunk - 1) / chunk;
    ASSERT_EQ(target.passes().size(), chunks + 3) << "chunk " << chunk;  // then one pass per token
    for (size_t i = 0; i < chunks; ++i) {
      EXPECT_EQ(target.passes()[i], static_cast<int64_t>(std::min(chunk, fed - i * chunk))) << "chunk " << chunk;
    }
    const SpeculativeStats& s = decoder.stats();
    EXPECT_GE(s.ttft_seconds, s.prefill_seconds);
    EXPECT_LE(s.ttft_seconds, s.prefill_seconds + s.total_seconds);
    EXPECT_GT(s.ttft_seconds, 0.0);
  }
}

// Speculation that does not pay turns itself off, and then the draft does not decode: a draft that is
// never right, beside a target whose passes cost time per position, makes the adaptive controller
// choose k = 0. Steps at k = 0 run no draft pass; a step that drafts again feeds the draft everything
// it lacks in ONE pass (then k - 1 single-token decodes), and greedy output stays the target's.
TEST(SpeculativeDecoder, AtKZeroTheDraftIdlesAndCatchesUpInOnePass) {
  const std::chrono::microseconds cost(2000);
  TimedLm target(kVocab, kContext, 0.0, cost);
  // A draft with its own random logits: its argmax agrees with the target's about once in kVocab.
  TimedLm draft(kVocab, kContext, 50.0, cost);
  auto options = Options(SamplingParams::Greedy(), 4, /*adaptive=*/true, AcceptMode::kRejection, 48);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  struct Pass {
    int k;
    int64_t len;         // the sequence's length when the step began
    int64_t draft_held;  // positions the draft's cache held then
    std::vector<int64_t> draft_passes;
  };
  std::vector<Pass> passes;
  int64_t len = static_cast<int64_t>(prompt.size());
  int64_t held = 0;
  size_t seen = 0;
  ModelProposer proposer(&draft, kVocab, options.sampling, options.accept);
  options.stop = [&] {  // asked before every step: the draft's state as the step begins
    held = draft.n_past();
    seen = draft.passes().size();
    return false;
  };
  options.on_pass = [&](int k, const AcceptResult& r) {
    passes.push_back({k, len, held, std::vector<int64_t>(draft.passes().begin() + seen, draft.passes().end())});
    len += static_cast<int64_t>(r.tokens.size());
  };
  SpeculativeDecoder decoder(&target, &proposer, options);
  auto out = decoder.Generate(prompt);
  ASSERT_TRUE(out.ok()) << out.status();

  int zero = 0, resumed = 0;
  for (size_t i = 0; i < passes.size(); ++i) {
    const Pass& p = passes[i];
    if (p.k == 0) {
      ++zero;
      EXPECT_TRUE(p.draft_passes.empty()) << "pass " << i << " at k = 0 ran the draft";
      continue;
    }
    // One pass feeds what the draft lacks of the sequence, then one decode per further draft.
    ASSERT_EQ(p.draft_passes.size(), static_cast<size_t>(p.k)) << "pass " << i;
    EXPECT_EQ(p.draft_passes[0], p.len - std::min(p.draft_held, p.len - 1)) << "pass " << i;
    for (size_t j = 1; j < p.draft_passes.size(); ++j) EXPECT_EQ(p.draft_passes[j], 1) << "pass " << i;
    if (i > 0 && passes[i - 1].k == 0) {
      ++resumed;
      EXPECT_GE(p.draft_passes[0], 2) << "pass " << i << " follows a step without the draft";
    }
  }
  // The controller measures k = 4 and k = 0 first; after that plain decoding wins every choice but
  // the explorations (one in 16 passes).
  EXPECT_GE(zero, static_cast<int>(passes.size()) / 2);
  EXPECT_GE(resumed, 1);
  EXPECT_LT(std::accumulate(draft.passes().begin(), draft.passes().end(), int64_t{0}),
            static_cast<int64_t>(prompt.size() + out->size()) + 4 * static_cast<int64_t>(passes.size() - zero));
  // Exact all the same.
  EXPECT_EQ(*out, Generate(prompt, Options(SamplingParams::Greedy(), 0, false, AcceptMode::kRejection, 48), 0.0,
                           /*with_draft=*/false)
                      .tokens);
}
}  // namespace
}  // namespace specgen
