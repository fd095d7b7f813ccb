// The benchmarks' acceptance regimes (bench/acceptance): the keyed script's decisions follow the
// profile, the loop under a script accepts exactly what the script decided at each (position, depth),
// the measured acceptance per depth is the profile's within sampling error, and the output is the
// target's own greedy text. Real CPU forward passes of synth:tiny-moe (target) and synth:tiny-dense
// (draft, the same vocabulary).
#include <cmath>
#include <memory>
#include <vector>

#include "bench/acceptance/acceptance_script.h"
#include "bench/acceptance/scripted_draft.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "tests/common/cpu_lm.h"

namespace specgen::bench {
namespace {

// Every statistical check below compares a count of n Bernoulli(a) outcomes with n·a. A correct
// script's frequency f has standard deviation sqrt(a(1 − a) / n); |f − a| > 5.5 of them has a normal
// two-sided probability of 3.8e-8, so the at most 20 such checks of this file fail together with a
// probability below 1e-6 (the binomial tails at these n and a are within a factor 2 of the normal's).
constexpr double kSigmas = 5.5;

double Bound(double a, int64_t n) { return kSigmas * std::sqrt(a * (1 - a) / static_cast<double>(n)); }

TEST(ScriptedDraftTokenTest, HitsFollowTheChanceAndMissesAreAnotherToken) {
  constexpr int32_t kVocab = 300;
  constexpr int64_t kDraws = 200000;
  for (const double a : {0.55, 0.6, 0.8, 0.9}) {
    for (const int depth : {0, 3}) {
      int64_t hits = 0;
      for (int64_t pos = 0; pos < kDraws; ++pos) {
        const int32_t target = static_cast<int32_t>(pos % kVocab);
        const int32_t t = ScriptedDraftToken(7, pos, depth, a, target, kVocab);
        ASSERT_GE(t, 0);
        ASSERT_LT(t, kVocab);
        hits += t == target;
      }
      EXPECT_NEAR(static_cast<double>(hits) / kDraws, a, Bound(a, kDraws)) << "a=" << a << " depth=" << depth;
    }
  }
  // Always and never at the ends; depth and seed change the draw.
  EXPECT_EQ(ScriptedDraftToken(1, 5, 0, 1.0, 17, kVocab), 17);
  EXPECT_NE(ScriptedDraftToken(1, 5, 0, 0.0, 17, kVocab), 17);
  int differ = 0;
  for (int64_t pos = 0; pos < 64; ++pos) {
    differ += ScriptedDraftToken(1, pos, 0, 0.5, 0, kVocab) != ScriptedDraftToken(1, pos, 1, 0.5, 0, kVocab);
    differ += ScriptedDraftToken(1, pos, 0, 0.5, 0, kVocab) != ScriptedDraftToken(2, pos, 0, 0.5, 0, kVocab);
  }
  EXPECT_GT(differ, 16);
}

class ScriptedLoopTest : public ::testing::Test {
 protected:
  static constexpr int64_t kContext = 256;
  static constexpr int64_t kNew = 200;

  void SetUp() override {
    target_ = testing::LoadCpuLm("synth:tiny-moe", &backend_, kContext);
    draft_ = testing::LoadCpuLm("synth:tiny-dense", &backend_, kContext);
    ASSERT_TRUE(target_ && draft_);
  }

  SpeculativeOptions Options(int k, bool adaptive = false) const {
    SpeculativeOptions o;
    o.sampling = SamplingParams::Greedy();
    o.max_new_tokens = kNew;
    o.draft_max = k;
    o.adaptive = adaptive;
    return o;
  }

  CpuBackend backend_{1};
  std::unique_ptr<Transformer> target_, draft_;
};

// Eight hand-picked prompts and as many made from their index: enough passes that each depth's
// frequency is tested against a bound a few hundredths wide.
std::vector<std::vector<int32_t>> Prompts() {
  std::vector<std::vector<int32_t>> p = {{1, 17, 42},   {1, 250, 3, 99, 7}, {5},    {299, 0, 150},
                                         {12, 12, 12},  {200, 100},         {8, 7, 6, 5, 4}, {33}};
  for (int32_t i = 0; i < 8; ++i) p.push_back({(37 * i + 11) % 300, (91 * i + 5) % 300});
  return p;
}
const std::vector<std::vector<int32_t>> kPrompts = Prompts();

// Per profile: drafted and accepted tokens at each depth, summed over the prompts at fixed k = 6.
TEST_F(ScriptedLoopTest, AcceptsExactlyWhatTheScriptDecidedAndFollowsTheProfile) {
  constexpr int kK = 6;
  for (const char* name : {"typical", "flat:0.6", "flat:0.9"}) {
    const moe::AcceptanceProfile profile = *moe::ParseAcceptance(name);
    AcceptanceScript script(profile, 11, static_cast<int32_t>(target_->vocab_size()));
    std::vector<int64_t> tested(kK, 0), accepted(kK, 0);
    for (size_t pi = 0; pi < kPrompts.size(); ++pi) {
      const std::vector<int32_t>& prompt = kPrompts[pi];
      absl::StatusOr<std::vector<int32_t>> plain = GreedyContinuation(nullptr, target_.get(), prompt, kNew);
      ASSERT_TRUE(plain.ok()) << plain.status();
      ASSERT_TRUE(script.SetContinuation(static_cast<int64_t>(prompt.size()), *plain, pi).ok());
      SpeculativeOptions o = Options(kK);
      int64_t emitted = 0;
      o.on_pass = [&](int k, const AcceptResult& r) {
        // The pass's first draft sits at the position after everything committed so far.
        const int64_t first = static_cast<int64_t>(prompt.size()) + emitted;
        int expected = 0;
        while (expected < k &&
               ScriptedDraftToken(script.key_seed(), first + expected, expected, profile.at(expected),
                                  (*plain)[static_cast<size_t>(emitted + expected)],
                                  static_cast<int32_t>(target_->vocab_size())) ==
                   (*plain)[static_cast<size_t>(emitted + expected)]) {
          ++expected;
        }
        EXPECT_EQ(r.n_accepted, expected) << name << " at position " << first;
        for (int j = 0; j < k && j <= r.n_accepted; ++j) {
          ++tested[static_cast<size_t>(j)];
          accepted[static_cast<size_t>(j)] += j < r.n_accepted;
        }
        emitted += static_cast<int64_t>(r.tokens.size());
      };
      absl::StatusOr<std::unique_ptr<SpeculativeLoop>> loop =
          MakeScriptedLoop(nullptr, target_.get(), draft_.get(), o, &script);
      ASSERT_TRUE(loop.ok()) << loop.status();
      absl::StatusOr<std::vector<int32_t>> out = (*loop)->Generate(prompt);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(*out, *plain) << name;  // the target's own greedy text
    }
    // Depths tested often enough for the normal bound (n·a·(1 − a) >= 9).
    for (int j = 0; j < kK; ++j) {
      const double a = profile.at(j);
      const int64_t n = tested[static_cast<size_t>(j)];
      if (static_cast<double>(n) * a * (1 - a) < 9) continue;
      EXPECT_NEAR(static_cast<double>(accepted[static_cast<size_t>(j)]) / static_cast<double>(n), a, Bound(a, n))
          << name << " depth " << j + 1 << " over " << n << " drafts";
    }
    EXPECT_GT(tested[0], 100) << name;
  }
}

TEST_F(ScriptedLoopTest, GreedyOutputIsTheTargetsWithAdaptiveLength) {
  for (const char* name : {"typical", "0.3"}) {
    AcceptanceScript script(*moe::ParseAcceptance(name), 3, static_cast<int32_t>(target_->vocab_size()));
    for (size_t i = 0; i < 3; ++i) {
      absl::StatusOr<std::vector<int32_t>> plain = GreedyContinuation(nullptr, target_.get(), kPrompts[i], kNew);
      ASSERT_TRUE(plain.ok());
      ASSERT_TRUE(script.SetContinuation(static_cast<int64_t>(kPrompts[i].size()), *plain).ok());
      auto loop = MakeScriptedLoop(nullptr, target_.get(), draft_.get(), Options(8, true), &script);
      ASSERT_TRUE(loop.ok()) << loop.status();
      absl::StatusOr<std::vector<int32_t>> out = (*loop)->Generate(kPrompts[i]);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(*out, *plain) << name;
    }
  }
}

TEST_F(ScriptedLoopTest, RefusesSampling) {
  AcceptanceScript script(moe::TypicalAcceptance(), 3, static_cast<int32_t>(target_->vocab_size()));
  SpeculativeOptions o = Options(4);
  o.sampling = SamplingParams::Plain(0.8f, 1);
  auto loop = MakeScriptedLoop(nullptr, target_.get(), draft_.get(), o, &script);
  ASSERT_FALSE(loop.ok());
  EXPECT_NE(std::string(loop.status().message()).find("greedy only"), std::string::npos) << loop.status();
}

}  // namespace
}  // namespace specgen::bench
