// The golden fixtures (tests/data/models, random weights made by transformers) paired as draft and
// target: llama-gqa, mixtral and qwen3moe-norm share a vocabulary of 509; qwen3moe-dense-layer (521)
// drafts for qwen3moe-norm and llama-gqa for qwen3-dense (503) through the proposer's cropping of
// the draft's extra logits (what --allow-vocab-mismatch runs), and qwen3-dense (503) drafts for
// mixtral (509): the target's tokens past the draft's vocabulary reach the draft as a stand-in id.
// Different random models rarely agree, so those pairs
// exercise rejection and rollback on every pass; a model drafting for itself (a second instance)
// exercises full acceptance and the bonus token. Greedy output must be token-identical to
// target-only greedy for k = 1..8 and the adaptive controller; `coupled` output per seed must equal
// plain sampling with that seed.
#include <random>

#include "gtest/gtest.h"
#include "tests/speculative/pair_harness.h"

namespace specgen::testing {
namespace {

const std::string kFixtures = std::string(SPECGEN_SOURCE_DIR) + "/tests/data/models/";
constexpr int64_t kContext = 96;
constexpr int kPrompts = 6;

struct PairName {
  const char* draft;
  const char* target;
};

// Prompts of 1..12 random ids below 503 (valid in every fixture vocabulary), seeded.
std::vector<std::vector<int32_t>> Prompts(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kPrompts; ++i) {
    std::vector<int32_t> p(1 + rng() % 12);
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % 503);
    prompts.push_back(std::move(p));
  }
  return prompts;
}

class FixturePairTest : public ::testing::TestWithParam<PairName> {
 protected:
  void SetUp() override {
    const PairName names = GetParam();
    // The fixtures are committed (tests/data/models): a missing one fails the load, never skips.
    target_ = LoadCpuLm(kFixtures + names.target, &backend_, kContext);
    draft_ = LoadCpuLm(kFixtures + names.draft, &backend_, kContext);
    ASSERT_TRUE(target_ && draft_);
  }

  CpuBackend backend_{1};
  std::unique_ptr<Transformer> target_, draft_;
};

TEST_P(FixturePairTest, GreedyEqualsTargetOnlyGreedyForEveryDraftLength) {
  RunSpec spec;
  spec.new_tokens = 20;
  const bool self_draft = std::string(GetParam().draft) == GetParam().target;
  int64_t accepted = 0;
  for (const auto& prompt : Prompts(17)) {
    spec.k = 0;
    const auto plain = RunPair(target_.get(), nullptr, spec, prompt);
    ASSERT_EQ(plain.size(), 20u);
    for (int k = 1; k <= 8; ++k) {
      spec.k = k;
      spec.adaptive = false;
      SpeculativeStats stats;
      EXPECT_EQ(RunPair(target_.get(), draft_.get(), spec, prompt, &stats), plain)
          << "k=" << k << " prompt of " << prompt.size();
      accepted += stats.accepted;
      // Drafting for itself, every greedy draft is the target's argmax (batch invariance makes the
      // logits bit-identical), so every pass keeps all it drafted.
      if (self_draft) {
        EXPECT_EQ(stats.accepted, stats.drafted) << "k=" << k;
      }
    }
    spec.k = 8;
    spec.adaptive = true;
    EXPECT_EQ(RunPair(target_.get(), draft_.get(), spec, prompt), plain) << "adaptive";
    spec.adaptive = false;
  }
  if (self_draft) {
    EXPECT_GT(accepted, 0);
  }
}

TEST_P(FixturePairTest, CoupledEqualsPlainSamplingPerSeed) {
  const auto prompts = Prompts(23);
  for (float temp : {0.6f, 1.3f}) {
    SamplingParams params;  // with filtering: top-k, top-p, min-p as below
    params.temperature = temp;
    params.top_k = 20;
    params.top_p = 0.9f;
    params.min_p = 0.0f;
    for (uint64_t seed : {5ull, 6ull}) {
      params.seed = seed;
      RunSpec spec;
      spec.mode = AcceptMode::kCoupled;
      spec.sampling = params;
      const auto& prompt = prompts[seed % prompts.size()];
      const auto plain = RunPair(target_.get(), nullptr, spec, prompt);
      ASSERT_EQ(plain.size(), static_cast<size_t>(spec.new_tokens));
      for (int k : {1, 3, 7}) {
        spec.k = k;
        EXPECT_EQ(RunPair(target_.get(), draft_.get(), spec, prompt), plain)
            << "temp " << temp << " seed " << seed << " k " << k;
      }
    }
  }
}

// A draft with the smaller vocabulary (qwen3-dense, 503) meets target ids it lacks (mixtral, 509):
// here they are in the prompt itself, so every run feeds them to the draft. Output must still be
// exactly the target's.
TEST(SmallerDraftVocabularyTest, TargetIdsPastTheDraftVocabularyKeepOutputExact) {
  CpuBackend backend{1};
  auto target = LoadCpuLm(kFixtures + "mixtral", &backend, kContext);
  auto draft = LoadCpuLm(kFixtures + "qwen3-dense", &backend, kContext);
  ASSERT_TRUE(target && draft);
  ASSERT_EQ(draft->vocab_size(), 503);
  const std::vector<int32_t> prompt = {5, 507, 12, 504, 508, 3};
  RunSpec spec;
  spec.new_tokens = 16;
  const auto plain = RunPair(target.get(), nullptr, spec, prompt);
  ASSERT_EQ(plain.size(), 16u);
  for (int k : {1, 4, 8}) {
    spec.k = k;
    EXPECT_EQ(RunPair(target.get(), draft.get(), spec, prompt), plain) << "k=" << k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    SharedVocabulary, FixturePairTest,
    ::testing::Values(PairName{"llama-gqa", "mixtral"}, PairName{"mixtral", "qwen3moe-norm"},
                      PairName{"llama-gqa", "qwen3moe-norm"},
                      PairName{"qwen3moe-norm", "qwen3moe-norm"},
                      PairName{"llama-gqa", "qwen3-dense"},
                      PairName{"qwen3moe-dense-layer", "qwen3moe-norm"},
                      PairName{"qwen3-dense", "mixtral"}),
    [](const ::testing::TestParamInfo<PairName>& info) {
      std::string name = std::string(info.param.draft) + "_for_" + info.param.target;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace specgen::testing
