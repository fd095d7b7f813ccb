// The forward pass's invariants on small random models of every architecture variant (built from the
// synthetic tiny presets with the architecture fields changed): incremental decode, batches of k,
// rollback, explicit masks and token trees all give bit-identical logits to the plain causal pass
// (the CPU backend reduces every row in one fixed order); GGUF round trips; bad input.
#include "engine/model/transformer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/gguf_export.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "gtest/gtest.h"
#include "tests/common/compare.h"

namespace specgen {
namespace {

using testing::ExpectAllClose;

struct Variant {
  std::string name;
  ModelSpec (*make)();
};

ModelSpec TinyMoe() { return SynthSpec("tiny-moe").value(); }
ModelSpec TinyDense() { return SynthSpec("tiny-dense").value(); }
ModelSpec LlamaLike() {  // no q/k norm, separate head, interleaved RoPE
  ModelSpec s = TinyDense();
  s.arch = Arch::kLlama;
  s.qk_norm = false;
  s.tied_embeddings = false;
  s.rope_style = RopeStyle::kInterleaved;
  s.rope_theta = 10000.0f;
  return s;
}
ModelSpec MixtralLike() {
  ModelSpec s = TinyMoe();
  s.arch = Arch::kMixtral;
  s.qk_norm = false;
  s.router_norm = RouterNorm::kTopKThenSoftmax;
  s.rope_style = RopeStyle::kInterleaved;
  return s;
}
ModelSpec MoeWithDenseLayer() {  // norm_topk_prob = false, layer 1 dense
  ModelSpec s = TinyMoe();
  s.router_norm = RouterNorm::kSoftmaxThenTopK;
  s.layer_is_moe[1] = false;
  return s;
}

ModelSpec TinyGlm4Moe() { return SynthSpec("tiny-glm4moe").value(); }
ModelSpec TinyGptOss() { return SynthSpec("tiny-gptoss").value(); }

const Variant kVariants[] = {{"tiny_glm4moe", TinyGlm4Moe},
                             {"tiny_gptoss", TinyGptOss},
                             {"tiny_moe", TinyMoe},
                             {"tiny_dense", TinyDense},
                             {"llama_like", LlamaLike},
                             {"mixtral_like", MixtralLike},
                             {"moe_dense_layer", MoeWithDenseLayer}};

std::shared_ptr<const LoadedModel> Build(const ModelSpec& spec, uint64_t seed = 7) {
  auto m = SynthWeights(spec, DType::kF32, seed, 1);
  EXPECT_TRUE(m.ok()) << m.status();
  std::shared_ptr<LoadedModel> model = std::move(m).value();
  model->source = "synth:" + spec.name;
  return model;
}

std::vector<int32_t> Tokens(int n, int64_t vocab, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 11 + salt * 101) % vocab);
  return t;
}

std::vector<float> Rows(const std::vector<float>& logits, int64_t v, int64_t begin, int64_t end) {
  return std::vector<float>(logits.begin() + begin * v, logits.begin() + end * v);
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class TransformerVariants : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    model_ = Build(GetParam().make());
    v_ = model_->spec.vocab_size;
  }
  std::unique_ptr<Transformer> Make(Backend* backend = nullptr, int64_t ctx = 64) {
    TransformerOptions o;
    o.max_context = ctx;
    auto t = Transformer::Create(model_, backend ? backend : &backend_, o);
    EXPECT_TRUE(t.ok()) << t.status();
    return std::move(t).value();
  }
  std::vector<float> Full(const std::vector<int32_t>& tokens) {
    auto lm = Make();
    std::vector<float> logits;
    EXPECT_TRUE(lm->Forward(tokens, &logits).ok());
    return logits;
  }

  CpuBackend backend_{2};
  std::shared_ptr<const LoadedModel> model_;
  int64_t v_ = 0;
};

TEST_P(TransformerVariants, IncrementalDecodeEqualsFullSequenceBitExact) {
  const auto tokens = Tokens(12, v_);
  const auto full = Full(tokens);
  ASSERT_EQ(full.size(), tokens.size() * v_);
  for (float x : full) ASSERT_TRUE(std::isfinite(x));
  auto lm = Make();
  std::vector<float> logits;
  ASSERT_TRUE(lm->Forward(std::span(tokens).first(5), &logits).ok());
  EXPECT_TRUE(BitEqual(logits, Rows(full, v_, 0, 5)));
  for (int i = 5; i < 12; ++i) {
    ASSERT_TRUE(lm->Forward(std::span(tokens).subspan(i, 1), &logits).ok());
    EXPECT_TRUE(BitEqual(logits, Rows(full, v_, i, i + 1))) << "position " << i;
  }
  EXPECT_EQ(lm->n_past(), 12);
}

// Speculative verification runs k+1 positions in one pass; each must equal a single decode step.
TEST_P(TransformerVariants, BatchOfKEqualsKSingleStepsAndTruncateReplays) {
  const auto tokens = Tokens(10, v_, 1);
  auto lm = Make();
  std::vector<float> prefix, batch, step;
  ASSERT_TRUE(lm->Forward(std::span(tokens).first(6), &prefix).ok());
  ASSERT_TRUE(lm->Forward(std::span(tokens).subspan(6, 4), &batch).ok());
  // Roll back, put other tokens there, roll back again, and replay one at a time.
  ASSERT_TRUE(lm->Truncate(6).ok());
  ASSERT_TRUE(lm->Forward(Tokens(3, v_, 5), &step).ok());
  ASSERT_TRUE(lm->Truncate(6).ok());
  EXPECT_EQ(lm->n_past(), 6);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(lm->Forward(std::span(tokens).subspan(6 + i, 1), &step).ok());
    EXPECT_TRUE(BitEqual(step, Rows(batch, v_, i, i + 1))) << "draft position " << i;
  }
  EXPECT_FALSE(lm->Truncate(11).ok());
}

// A prefill reads only its last row: the head on that row alone gives Forward's last row bit for bit
// (the norm is per row, and every head element is one dot product of the same values); a pass without
// logits fills the KV cache as Forward does, so the passes after it are unchanged too.
TEST_P(TransformerVariants, LastRowAndNoLogitPassesEqualTheAllRowsPass) {
  const auto tokens = Tokens(20, v_, 3);
  const auto full = Full(tokens);
  for (const int n : {1, 7, 20}) {
    auto lm = Make();
    std::vector<float> last;
    ASSERT_TRUE(lm->ForwardLast(std::span(tokens).first(n), &last).ok());
    ASSERT_EQ(static_cast<int64_t>(last.size()), v_);
    // Full's row n - 1 is the logits after tokens[0..n-1], whatever passes follow in that pass.
    EXPECT_TRUE(BitEqual(last, Rows(full, v_, n - 1, n))) << "first " << n << " tokens";
    EXPECT_EQ(lm->n_past(), n);
  }
  auto lm = Make();
  ASSERT_TRUE(lm->Feed(std::span(tokens).first(12)).ok());
  EXPECT_EQ(lm->n_past(), 12);
  std::vector<float> rest;
  ASSERT_TRUE(lm->Forward(std::span(tokens).subspan(12), &rest).ok());
  EXPECT_TRUE(BitEqual(rest, Rows(full, v_, 12, 20)));
  // The buffer-level form: kLast is one row, kNone none; the next all-rows pass has all its rows.
  auto resident = Make();
  auto one = resident->ForwardResident(std::span(tokens).first(9), LogitRows::kLast);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->rows(), 1);
  auto none = resident->ForwardResident(std::span(tokens).subspan(9, 3), LogitRows::kNone);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);
  auto all = resident->ForwardResident(std::span(tokens).subspan(12, 8));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)->rows(), 8);
  std::vector<float> read(8 * v_);
  ASSERT_TRUE(backend_.Read(**all, read).ok());
  EXPECT_TRUE(BitEqual(read, Rows(full, v_, 12, 20)));
}

TEST_P(TransformerVariants, ExplicitCausalMaskAndTreeBranches) {
  const auto tokens = Tokens(9, v_, 2);
  const auto full = Full(tokens);
  // An explicit lower-triangular mask at consecutive positions is the causal pass.
  auto lm = Make();
  std::vector<float> logits;
  ASSERT_TRUE(lm->Forward(std::span(tokens).first(5), &logits).ok());
  std::vector<int32_t> pos = {5, 6, 7, 8};
  std::vector<uint8_t> causal(16, 0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j) causal[i * 4 + j] = 1;
  ASSERT_TRUE(lm->ForwardMasked(std::span(tokens).subspan(5, 4), pos, causal, &logits).ok());
  EXPECT_TRUE(BitEqual(logits, Rows(full, v_, 5, 9)));

  // A tree after the 5-token prefix: root a (pos 5); children b and c (both pos 6); d under c (pos 7).
  // Each node's logits equal a linear pass along its own branch.
  ASSERT_TRUE(lm->Truncate(5).ok());
  const int32_t a = tokens[5], b = tokens[6], c = static_cast<int32_t>((tokens[6] + 3) % v_), d = 17;
  const std::vector<int32_t> tree_tokens = {a, b, c, d};
  const std::vector<int32_t> tree_pos = {5, 6, 6, 7};
  const std::vector<uint8_t> tree = {1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1};
  std::vector<float> tree_logits;
  ASSERT_TRUE(lm->ForwardMasked(tree_tokens, tree_pos, tree, &tree_logits).ok());
  EXPECT_TRUE(BitEqual(Rows(tree_logits, v_, 0, 2), Rows(full, v_, 5, 7)));  // a, b: the sequence
  std::vector<int32_t> branch(tokens.begin(), tokens.begin() + 5);
  branch.insert(branch.end(), {a, c, d});
  const auto branch_full = Full(branch);
  EXPECT_TRUE(BitEqual(Rows(tree_logits, v_, 2, 4), Rows(branch_full, v_, 6, 8)));  // c, d

  const std::vector<uint8_t> no_diagonal = {0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1};
  ASSERT_TRUE(lm->Truncate(5).ok());
  EXPECT_FALSE(lm->ForwardMasked(tree_tokens, tree_pos, no_diagonal, &tree_logits).ok());
}

TEST_P(TransformerVariants, ThreadCountDoesNotChangeLogits) {
  const auto tokens = Tokens(7, v_, 3);
  CpuBackend one(1);
  auto lm = Make(&one);
  std::vector<float> logits;
  ASSERT_TRUE(lm->Forward(tokens, &logits).ok());
  EXPECT_TRUE(BitEqual(logits, Full(tokens)));
}

// Our GGUF writer and reader: the same model through a file (f32) gives the same logits. For llama
// and mixtral the writer permutes Q/K rows to interleaved order and the reader selects interleaved
// RoPE, which reorders the d-long q·k sums: |err| ≤ d·u·Σ|q k| per score, a few 1e-6 relative at the
// logits through ~3 layers; 1e-5 of the logit scale leaves room and still fails on a wrong pairing.
TEST_P(TransformerVariants, GgufF32RoundTripMatches) {
  ModelSpec spec = model_->spec;
  if (spec.rope_style == RopeStyle::kInterleaved) {
    spec.rope_style = RopeStyle::kRotateHalf;  // as the HF / synthetic source holds its weights
  }
  auto source = Build(spec);
  const auto tokens = Tokens(10, v_, 4);
  const std::string path = ::testing::TempDir() + "/rt_" + GetParam().name + ".gguf";
  ASSERT_TRUE(ExportGguf(spec, source->weights, path, GgufExportOptions{}).ok());
  auto loaded = LoadModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<const LoadedModel> from_file = std::move(loaded).value();
  // GGUF llama/mixtral files are interleaved; qwen* stay rotate-half.
  EXPECT_EQ(from_file->spec.rope_style, GetParam().make().rope_style);
  std::vector<float> want, got;
  {
    auto lm = Transformer::Create(source, &backend_).value();
    ASSERT_TRUE(lm->Forward(tokens, &want).ok());
  }
  auto lm = Transformer::Create(from_file, &backend_);
  ASSERT_TRUE(lm.ok()) << lm.status();
  ASSERT_TRUE((*lm)->Forward(tokens, &got).ok());
  const double scale = testing::MaxAbs(want);
  ExpectAllClose(got, want, 1e-5 * scale, 1e-5, GetParam().name);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Archs, TransformerVariants, ::testing::ValuesIn(kVariants),
                         [](const auto& info) { return info.param.name; });

TEST(TransformerErrors, OutOfVocabularyIdNamesIdAndPosition) {
  auto model = Build(TinyMoe());
  CpuBackend be(1);
  auto lm = Transformer::Create(model, &be).value();
  std::vector<float> logits;
  std::vector<int32_t> tokens = {1, 2, 300, 4};
  absl::Status s = lm->Forward(tokens, &logits);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("token id 300 at position 2"), std::string::npos) << s;
  EXPECT_EQ(lm->n_past(), 0);
  tokens = {-1};
  EXPECT_FALSE(lm->Forward(tokens, &logits).ok());
  EXPECT_FALSE(lm->Forward({}, &logits).ok());
}

TEST(TransformerErrors, PromptLongerThanContext) {
  auto model = Build(TinyDense());
  CpuBackend be(1);
  auto lm = Transformer::Create(model, &be, TransformerOptions{8}).value();
  EXPECT_EQ(lm->max_context(), 8);
  std::vector<float> logits;
  absl::Status s = lm->Forward(Tokens(9, 300), &logits);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("context of 8"), std::string::npos) << s;
  ASSERT_TRUE(lm->Forward(Tokens(8, 300), &logits).ok());
  EXPECT_FALSE(lm->Forward(Tokens(1, 300), &logits).ok());  // decoding past the end
  // Default: min(model context, 4096); tiny-dense says 512.
  EXPECT_EQ(Transformer::Create(model, &be).value()->max_context(), 512);
}

// What a replayed (CUDA-graph) pass relies on: CommitReplayedPass commits n positions and hands back the
// logits buffer of the last pass with n rows; a size larger than any pass so far, or one past the
// context, is refused without committing; the scratch generation moves only when a pass needs more rows.
TEST(TransformerErrors, CommitReplayedPassKeepsTheCacheAndActivationsConsistent) {
  auto model = Build(TinyDense());
  CpuBackend be(1);
  auto lm = Transformer::Create(model, &be, TransformerOptions{16}).value();
  EXPECT_FALSE(lm->CommitReplayedPass(1).ok());  // no pass yet: nothing to replay
  std::vector<float> logits;
  ASSERT_TRUE(lm->Forward(Tokens(4, 300), &logits).ok());
  const int64_t generation = lm->scratch_generation();
  ASSERT_TRUE(lm->Forward(Tokens(3, 300), &logits).ok());
  EXPECT_EQ(lm->scratch_generation(), generation);  // 3 rows fit the 4 allocated
  ASSERT_TRUE(lm->Truncate(4).ok());
  auto out = lm->CommitReplayedPass(2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)->rows(), 2);
  EXPECT_EQ(lm->n_past(), 6);
  absl::StatusOr<const Buffer*> too_many = lm->CommitReplayedPass(5);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(std::string(too_many.status().message()).find("5 positions"), std::string::npos) << too_many.status();
  ASSERT_TRUE(lm->Forward(Tokens(4, 300), &logits).ok());  // 10 positions
  ASSERT_TRUE(lm->Forward(Tokens(4, 300), &logits).ok());  // 14
  absl::StatusOr<const Buffer*> past_end = lm->CommitReplayedPass(3);
  ASSERT_FALSE(past_end.ok());
  EXPECT_NE(std::string(past_end.status().message()).find("context of 16"), std::string::npos) << past_end.status();
  EXPECT_EQ(lm->n_past(), 14);
  ASSERT_TRUE(lm->Truncate(0).ok());
  ASSERT_TRUE(lm->Forward(Tokens(6, 300), &logits).ok());
  EXPECT_GT(lm->scratch_generation(), generation);  // 6 rows did not fit
}

TEST(TransformerErrors, TensorsThatDoNotMatchTheConfig) {
  auto model = Build(TinyMoe());
  auto wrong = std::make_shared<LoadedModel>(*model);
  wrong->spec.expert_ffn_dim += 8;  // the config says wider experts than the file holds
  CpuBackend be(1);
  auto lm = Transformer::Create(wrong, &be);
  ASSERT_FALSE(lm.ok());
  EXPECT_NE(std::string(lm.status().message()).find("expert"), std::string::npos) << lm.status();

  auto missing = std::make_shared<LoadedModel>();
  missing->spec = model->spec;
  missing->source = "test";
  for (const auto& [key, view] : model->weights.tensors()) {
    if (!(key.role == Role::kAttnKNorm && key.layer == 2)) missing->weights.Add(key, view, "");
  }
  lm = Transformer::Create(missing, &be);
  ASSERT_FALSE(lm.ok());
  EXPECT_NE(std::string(lm.status().message()).find("blk.2"), std::string::npos) << lm.status();
}

// A backend that computes none of the GLM-4.5 / gpt-oss features (as the CUDA backend once did) refuses
// those models when they are created, naming the first feature missing, instead of running them wrong;
// the older architectures need none and still run on it.
class CpuWithoutNewFeatures : public CpuBackend {
 public:
  CpuWithoutNewFeatures() : CpuBackend(1) {}
  bool Supports(ModelFeature) const override { return false; }
};

TEST(TransformerErrors, BackendWithoutAFeatureRefusesTheModelNamingIt) {
  CpuWithoutNewFeatures be;
  auto gptoss = Transformer::Create(Build(TinyGptOss()), &be);
  ASSERT_FALSE(gptoss.ok());
  EXPECT_EQ(gptoss.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(gptoss.status().message()).find("gpt-oss model needs attention projection biases"),
            std::string::npos)
      << gptoss.status();
  EXPECT_NE(std::string(gptoss.status().message()).find("--device cpu"), std::string::npos);
  auto glm = Transformer::Create(Build(TinyGlm4Moe()), &be);
  ASSERT_FALSE(glm.ok());
  EXPECT_NE(std::string(glm.status().message()).find("glm4moe model needs"), std::string::npos) << glm.status();
  EXPECT_TRUE(Transformer::Create(Build(TinyMoe()), &be).ok());
  EXPECT_EQ(RequiredFeatures(TinyMoe()), std::vector<ModelFeature>{});
  EXPECT_EQ(RequiredFeatures(TinyGptOss()),
            (std::vector<ModelFeature>{ModelFeature::kAttentionBias, ModelFeature::kAttentionSinks,
                                       ModelFeature::kSlidingWindow, ModelFeature::kScaledRope,
                                       ModelFeature::kRouterBias, ModelFeature::kExpertBias,
                                       ModelFeature::kClampedSwiGlu}));
  EXPECT_EQ(RequiredFeatures(TinyGlm4Moe()),
            (std::vector<ModelFeature>{ModelFeature::kAttentionBias, ModelFeature::kPartialRope,
                                       ModelFeature::kScaledRope, ModelFeature::kSharedExperts,
                                       ModelFeature::kSigmoidRouting}));
}

}  // namespace
}  // namespace specgen
