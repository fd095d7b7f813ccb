// The bundled trained pair (models/tiny-target drafted by models/tiny-draft) beyond what
// tests/speculative/bundled_pair_test.cc covers (its first 4 held-out prompts, greedy k = 1..8, and
// coupled at T = 0.8 unfiltered): the remaining held-out prompts with k rotating over 1..8 and the
// adaptive controller, `coupled` per-seed identity with top-k / top-p / min-p at two temperatures,
// the state both KV caches are left in after passes with rejections, and keep_cache (chat turns:
// the next prompt extends the last one, only the new tokens are prefilled, output unchanged). The
// pair is committed, so its absence fails.
#include <fstream>

#include "engine/core/status_macros.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/speculative/pair_harness.h"

namespace specgen::testing {
namespace {

const std::string kModels = std::string(SPECGEN_SOURCE_DIR) + "/models/";
constexpr size_t kCoveredElsewhere = 4;  // prompts bundled_pair_test.cc runs at every k
constexpr int64_t kContext = 160;

class BundledPairExtraTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The pair is committed (models/): a missing file fails the load below rather than skipping.
    target_ = LoadCpuLm(kModels + "tiny-target", &backend_, kContext);
    draft_ = LoadCpuLm(kModels + "tiny-draft", &backend_, kContext);
    ASSERT_TRUE(target_ && draft_);
    std::ifstream prompts_file(kModels + "pair_prompts.json");
    ASSERT_TRUE(prompts_file) << "committed file missing: " << kModels << "pair_prompts.json";
    const auto json = nlohmann::json::parse(prompts_file);
    prompts_ = json.at("prompts").get<std::vector<std::vector<int32_t>>>();
    ASSERT_GT(prompts_.size(), kCoveredElsewhere);
  }

  CpuBackend backend_{0};
  std::unique_ptr<Transformer> target_, draft_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(BundledPairExtraTest, GreedyEqualsTargetOnlyGreedyOnTheOtherHeldOutPrompts) {
  RunSpec spec;
  spec.new_tokens = 24;
  int64_t accepted = 0;
  for (size_t i = kCoveredElsewhere; i < prompts_.size(); ++i) {
    spec.k = 0;
    spec.adaptive = false;
    const auto plain = RunPair(target_.get(), nullptr, spec, prompts_[i]);
    ASSERT_EQ(plain.size(), 24u);
    // Two draft lengths per prompt, so that every k meets several prompts.
    for (int k : {static_cast<int>(1 + i % 8), static_cast<int>(1 + (i + 4) % 8)}) {
      spec.k = k;
      SpeculativeStats stats;
      EXPECT_EQ(RunPair(target_.get(), draft_.get(), spec, prompts_[i], &stats), plain)
          << "prompt " << i << " k=" << k;
      accepted += stats.accepted;
    }
    spec.k = 8;
    spec.adaptive = true;
    EXPECT_EQ(RunPair(target_.get(), draft_.get(), spec, prompts_[i]), plain)
        << "prompt " << i << " adaptive";
  }
  EXPECT_GT(accepted, 0);
}

TEST_F(BundledPairExtraTest, CoupledEqualsPlainSamplingPerSeedWithFilters) {
  for (float temp : {0.5f, 1.2f}) {
    SamplingParams params;
    params.temperature = temp;
    params.top_k = 40;
    params.top_p = 0.9f;
    params.min_p = 0.02f;
    for (uint64_t seed : {11ull, 12ull}) {
      params.seed = seed;
      RunSpec spec;
      spec.mode = AcceptMode::kCoupled;
      spec.sampling = params;
      spec.new_tokens = 24;
      const auto& prompt = prompts_[kCoveredElsewhere + seed % 8];
      const auto plain = RunPair(target_.get(), nullptr, spec, prompt);
      int64_t accepted = 0;
      for (int k : {2, 6}) {
        spec.k = k;
        SpeculativeStats stats;
        EXPECT_EQ(RunPair(target_.get(), draft_.get(), spec, prompt, &stats), plain)
            << "temp " << temp << " seed " << seed << " k " << k;
        accepted += stats.accepted;
      }
      EXPECT_GT(accepted, 0) << "temp " << temp << " seed " << seed;
    }
  }
}

// Next-token logits of `lm` after a cache built from scratch on `sequence` minus its last token.
std::vector<float> FreshLogits(CausalLm* lm, const std::vector<int32_t>& sequence) {
  std::vector<float> logits;
  EXPECT_TRUE(lm->Truncate(0).ok());
  EXPECT_TRUE(lm->Forward(std::span(sequence).first(sequence.size() - 1), &logits).ok());
  EXPECT_TRUE(lm->Forward(std::span(sequence).last(1), &logits).ok());
  return logits;
}

TEST_F(BundledPairExtraTest, CachesAfterRejectionsContinueLikeFreshOnes) {
  // After a run whose passes rejected drafts, the target's cache must hold exactly the committed
  // sequence but its last token, and the draft's a prefix of it; the next logits of both must equal
  // those of caches that never saw a rejected draft. Rows are reduced in one order whatever the
  // batch (docs/design.md §6.6), so the comparison is exact.
  SpeculativeOptions o;
  o.draft_max = 6;
  o.max_new_tokens = 40;
  o.sampling = SamplingParams::Greedy();
  int rejecting_passes = 0;
  o.on_pass = [&](int k, const AcceptResult& r) { rejecting_passes += r.n_accepted < k; };
  ModelProposer proposer(draft_.get(), target_->vocab_size(), o.sampling, o.accept);
  SpeculativeDecoder decoder(target_.get(), &proposer, o);
  // Some held-out files are tables the draft predicts perfectly: take the first prompt that
  // rejected a draft.
  size_t i = kCoveredElsewhere;
  absl::StatusOr<std::vector<int32_t>> generated;
  for (; i < prompts_.size(); ++i) {
    rejecting_passes = 0;
    generated = decoder.Generate(prompts_[i]);
    ASSERT_TRUE(generated.ok()) << generated.status();
    if (rejecting_passes > 0) break;
  }
  ASSERT_LT(i, prompts_.size()) << "no prompt had a rejected draft";
  const auto& prompt = prompts_[i];
  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), generated->begin(), generated->end());

  ASSERT_EQ(target_->n_past(), static_cast<int64_t>(sequence.size()) - 1);
  std::vector<float> target_next;
  ASSERT_TRUE(target_->Forward(std::span(sequence).last(1), &target_next).ok());

  const auto& cached = proposer.cached();
  ASSERT_EQ(static_cast<int64_t>(cached.size()), draft_->n_past());
  ASSERT_LE(cached.size(), sequence.size());
  ASSERT_TRUE(std::equal(cached.begin(), cached.end(), sequence.begin()));
  std::vector<float> draft_next;
  ASSERT_TRUE(draft_->Forward(std::span(sequence).subspan(cached.size()), &draft_next).ok());
  draft_next.erase(draft_next.begin(), draft_next.end() - draft_->vocab_size());

  EXPECT_EQ(target_next, FreshLogits(target_.get(), sequence));
  EXPECT_EQ(draft_next, FreshLogits(draft_.get(), sequence));
}

// Counts the positions the wrapped model is asked to run.
class CountingLm : public CausalLm {
 public:
  explicit CountingLm(CausalLm* inner) : inner_(inner) {}
  const ModelSpec& spec() const override { return inner_->spec(); }
  int64_t n_past() const override { return inner_->n_past(); }
  int64_t max_context() const override { return inner_->max_context(); }
  absl::Status Truncate(int64_t n) override { return inner_->Truncate(n); }
  absl::Status Forward(std::span<const int32_t> tokens, std::vector<float>* logits) override {
    fed += static_cast<int64_t>(tokens.size());
    return inner_->Forward(tokens, logits);
  }
  int64_t fed = 0;

 private:
  CausalLm* inner_;
};

TEST_F(BundledPairExtraTest, KeepCachePrefillsOnlyTheNewTokensOfTheNextTurn) {
  SpeculativeOptions o;
  o.draft_max = 4;
  o.max_new_tokens = 16;
  o.sampling = SamplingParams::Greedy();
  CountingLm target(target_.get());
  ModelProposer proposer(draft_.get(), target_->vocab_size(), o.sampling, o.accept);
  o.keep_cache = true;
  SpeculativeDecoder kept(&target, &proposer, o);
  o.keep_cache = false;
  SpeculativeDecoder fresh(&target, &proposer, o);

  // Turn 2 extends turn 1's prompt and reply by a few tokens, as a chat's next user turn does.
  const std::vector<int32_t> turn1 = prompts_[kCoveredElsewhere + 1];
  auto reply1 = kept.Generate(turn1);
  ASSERT_TRUE(reply1.ok()) << reply1.status();
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), reply1->begin(), reply1->end());
  const std::vector<int32_t> user = {1, 872, 198, 2};
  turn2.insert(turn2.end(), user.begin(), user.end());

  target.fed = 0;
  auto reply2 = kept.Generate(turn2);
  ASSERT_TRUE(reply2.ok()) << reply2.status();
  const int64_t fed_kept = target.fed;
  target.fed = 0;
  auto expected = fresh.Generate(turn2);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(*reply2, *expected);
  // The fresh decoder prefills all but the last prompt token; the kept one at most the new user
  // tokens and the reply's last token (never fed in turn 1). Both then run the same passes.
  const int64_t saved = target.fed - fed_kept;
  EXPECT_GE(saved, static_cast<int64_t>(turn2.size()) - 1 - static_cast<int64_t>(user.size()) - 1);

  // A prompt that diverges inside the cached part is re-fed from the divergence: same output as
  // a fresh decoder.
  std::vector<int32_t> edited = turn2;
  edited[turn1.size() / 2] = (edited[turn1.size() / 2] + 1) % 4096;
  auto edited_kept = kept.Generate(edited);
  auto edited_fresh = fresh.Generate(edited);
  ASSERT_TRUE(edited_kept.ok() && edited_fresh.ok());
  EXPECT_EQ(*edited_kept, *edited_fresh);
}

}  // namespace
}  // namespace specgen::testing
