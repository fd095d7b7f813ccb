// DeviceSpeculativeDecoder over the golden fixtures (tests/data/models, random weights made by
// transformers) paired as draft and target where they share a vocabulary of 509. Random models rarely
// agree, so these pairs reject and roll back on nearly every pass; a model drafting for itself accepts
// everything. Greedy output must be token-identical to target-only greedy on the GPU for k = 1..8
// and adaptive k, and target-only greedy after each fixture's own 40-token input must be the
// continuation transformers produced (golden.json "greedy"; its inputs were chosen with a top-1/top-2
// gap of at least 0.05, far above the GPU's f32-weight error of ~1e-6 of the logit scale).
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "engine/speculative/device_speculative_decoder.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/gpu_test_env.h"
#include "tests/common/speculative_options.h"

namespace specgen {
namespace {

constexpr int64_t kContext = 128;

struct PairName {
  const char* draft;
  const char* target;
};

std::filesystem::path Fixture(const std::string& name) {
  return testing::SourceDir() / "tests/data/models" / name;
}

class GpuFixturePairTest : public ::testing::TestWithParam<PairName> {
 protected:
  void SetUp() override {
    SPECGEN_SKIP_WITHOUT_CUDA();
    backend_ = testing::TestCudaBackend(size_t{1} << 30);
    ASSERT_NE(backend_, nullptr);
    target_ = Load(GetParam().target);
    draft_ = Load(GetParam().draft);
    ASSERT_TRUE(target_ && draft_);
  }
  void TearDown() override {
    target_.reset();
    draft_.reset();
    backend_.reset();
  }

  std::unique_ptr<Transformer> Load(const std::string& name) {
    auto loaded = LoadModel(Fixture(name).string());
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (!loaded.ok()) return nullptr;
    std::shared_ptr<const LoadedModel> model = std::move(loaded).value();
    TransformerOptions options;
    options.max_context = kContext;
    auto lm = Transformer::Create(model, backend_.get(), options);
    EXPECT_TRUE(lm.ok()) << lm.status();
    return lm.ok() ? std::move(lm).value() : nullptr;
  }

  std::vector<int32_t> Greedy(int k, bool adaptive, const std::vector<int32_t>& prompt, int64_t n,
                              SpeculativeStats* stats = nullptr) {
    const SpeculativeOptions o =
        testing::MakeSpeculativeOptions(SamplingParams::Greedy(), k, adaptive, AcceptMode::kRejection, n);
    auto dec = DeviceSpeculativeDecoder::Create(backend_.get(), target_.get(),
                                                k > 0 ? draft_.get() : nullptr, o);
    EXPECT_TRUE(dec.ok()) << dec.status();
    if (!dec.ok()) return {};
    auto out = (*dec)->Generate(prompt);
    EXPECT_TRUE(out.ok()) << out.status();
    if (stats != nullptr) *stats = (*dec)->stats();
    return out.ok() ? *out : std::vector<int32_t>{};
  }

  std::unique_ptr<CudaBackend> backend_;
  std::unique_ptr<Transformer> target_, draft_;
};

TEST_P(GpuFixturePairTest, GreedyEqualsTargetOnlyGreedyForEveryDraftLength) {
  const bool self_draft = std::string(GetParam().draft) == GetParam().target;
  std::mt19937 rng(31);
  for (int prompt_index = 0; prompt_index < 4; ++prompt_index) {
    std::vector<int32_t> prompt(1 + rng() % 12);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 509);
    const auto plain = Greedy(0, false, prompt, 20);
    ASSERT_EQ(plain.size(), 20u);
    for (int k = 1; k <= 8; ++k) {
      SpeculativeStats stats;
      EXPECT_EQ(Greedy(k, false, prompt, 20, &stats), plain) << "k=" << k << ", prompt " << prompt_index;
      // Drafting for itself on the same kernels, every greedy draft is the target's argmax.
      if (self_draft) {
        EXPECT_EQ(stats.accepted, stats.drafted) << "k=" << k;
      }
    }
    EXPECT_EQ(Greedy(8, true, prompt, 20), plain) << "adaptive, prompt " << prompt_index;
  }
}

TEST_P(GpuFixturePairTest, TargetGreedyIsTransformersGreedy) {
  const auto golden = nlohmann::json::parse(std::ifstream(Fixture(GetParam().target) / "golden.json"));
  const auto input = golden.at("input_ids").get<std::vector<int32_t>>();
  const auto expected = golden.at("greedy").get<std::vector<int32_t>>();
  EXPECT_EQ(Greedy(0, false, input, static_cast<int64_t>(expected.size())), expected);
  EXPECT_EQ(Greedy(4, false, input, static_cast<int64_t>(expected.size())), expected);
}

INSTANTIATE_TEST_SUITE_P(
    SharedVocabulary, GpuFixturePairTest,
    ::testing::Values(PairName{"llama-gqa", "mixtral"}, PairName{"mixtral", "qwen3moe-norm"},
                      PairName{"llama-gqa", "qwen3moe-norm"}, PairName{"qwen3moe-norm", "qwen3moe-norm"}),
    [](const ::testing::TestParamInfo<PairName>& info) {
      std::string name = std::string(info.param.draft) + "_for_" + info.param.target;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace specgen
