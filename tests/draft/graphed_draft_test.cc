// GraphedDraft (draft/cuda/graphed_draft.h): the draft's single-token decode replayed from a
// CUDA graph gives logits bit-identical to the same fused kernels launched eagerly, over 24 steps with
// a rollback (Truncate) in the middle, tokens from the host and from device memory; and equal to
// Transformer::ForwardResident (the Backend ops the fused kernels stand for) up to fp32 rounding.
// Models: qwen3-0.6b's layer shape cut to 2 layers (head_dim 128: the single-query decode attention,
// whose 250-270 slots are 4-5 chunks of 64, so its cross-chunk merge runs and the chunk count changes
// at 256), the bundled tiny draft
// (head_dim 32: the decode attention with 16-slot warp batches) and synth tiny-dense, with an fp32 KV
// cache and with 16-bit ones (--cache-type: the fused prologue rounds the new rows as NormRopeStore
// does, from the same fp32 values, so the bound against the Transformer stays the fp32 one). Skips
// without a device.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "draft/cuda/graphed_draft.h"
#include "gtest/gtest.h"
#include "tests/common/gpu_test_env.h"
#include "tests/common/synth_model.h"

namespace specgen {
namespace {

constexpr int kSteps = 24;
constexpr int kRollbackAfter = 12;  // after this many steps, drop the last kRollback positions
constexpr int kRollback = 5;

enum class Path { kGraph, kFused, kTransformer };

struct Run {
  std::vector<std::vector<float>> logits;  // per step, [V]
  int64_t replays = 0, eager = 0;
  DraftDecodePath used = DraftDecodePath::kTransformer;
  std::string fallback;
  int64_t syncs_during_decode = 0;
};

// Prefills `prompt` through the Transformer, then decodes kSteps tokens (token t = script[t], from
// device memory on odd steps), rolling back kRollback positions after kRollbackAfter steps.
Run Decode(CudaBackend* be, Transformer* lm, Path path, const std::vector<int32_t>& prompt,
           const std::vector<int32_t>& script, const int32_t* d_script) {
  Run run;
  EXPECT_TRUE(lm->Truncate(0).ok());
  std::vector<int32_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  EXPECT_TRUE(lm->ForwardResident(prompt, pos, {}).ok());
  std::unique_ptr<GraphedDraft> g;
  if (path != Path::kTransformer) {
    const DraftDecodePath asked = path == Path::kGraph ? DraftDecodePath::kGraph : DraftDecodePath::kFused;
    auto created = GraphedDraft::Create(be, lm, asked);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return run;
    g = std::move(created).value();
  }
  const int64_t v = lm->vocab_size();
  for (int t = 0; t < kSteps; ++t) {
    if (t == kRollbackAfter) {
      EXPECT_TRUE(lm->Truncate(lm->n_past() - kRollback).ok());
    }
    const bool from_device = t % 2 == 1;
    const int64_t syncs_before = be->syncs().other;
    const float* d_logits = nullptr;
    if (g != nullptr) {
      auto r = g->Decode(from_device ? d_script + t : nullptr, script[t]);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return run;
      d_logits = *r;
    } else {
      if (from_device) be->UseDeviceTokensOnce(d_script + t);
      const int32_t p = static_cast<int32_t>(lm->n_past());
      auto r = lm->ForwardResident({&script[t], 1}, {&p, 1}, {});
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return run;
      d_logits = CudaBackend::Data(**r);
    }
    run.syncs_during_decode += be->syncs().other - syncs_before;
    EXPECT_TRUE(be->Synchronize(SyncKind::kOther).ok());
    run.logits.emplace_back(v);
    EXPECT_EQ(cudaMemcpy(run.logits.back().data(), d_logits, v * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  if (g != nullptr) {
    run.replays = g->graph_replays();
    run.eager = g->eager_steps();
    run.fallback = g->fallback_reason();
    run.used = g->path();
  }
  return run;
}

void CheckModel(const char* label, std::shared_ptr<const LoadedModel> model, int prompt_len,
                DType kv_type = DType::kF32, kernels::ElemType weights = kernels::ElemType::kBF16) {
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  TransformerOptions options;
  options.max_context = 512;
  options.kv_type = kv_type;
  auto lm = Transformer::Create(model, be.get(), options);
  ASSERT_TRUE(lm.ok()) << lm.status();
  ASSERT_EQ(GraphedDraft::Unsupported(**lm), "");
  // The weights as the test means them to run (a quantized file kept packed in VRAM, not dequantized).
  for (const Weight* w : {(*lm)->layer_refs(0).q, (*lm)->layer_refs(0).down, &(*lm)->output_head()}) {
    ASSERT_EQ(CudaBackend::Type(*w), weights) << label << ": the backend holds " << kernels::ElemTypeName(CudaBackend::Type(*w))
                                              << " weights";
  }
  const int32_t vocab = static_cast<int32_t>((*lm)->vocab_size());
  std::vector<int32_t> prompt(prompt_len), script(kSteps);
  for (int i = 0; i < prompt_len; ++i) prompt[i] = (i * 7919 + 3) % vocab;
  for (int i = 0; i < kSteps; ++i) script[i] = (i * 104729 + 11) % vocab;
  auto d = be->arena().Allocate(kSteps * sizeof(int32_t), "test script");
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(cudaMemcpy(*d, script.data(), kSteps * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
  const auto* d_script = static_cast<const int32_t*>(*d);

  const Run graph = Decode(be.get(), lm->get(), Path::kGraph, prompt, script, d_script);
  const Run fused = Decode(be.get(), lm->get(), Path::kFused, prompt, script, d_script);
  const Run plain = Decode(be.get(), lm->get(), Path::kTransformer, prompt, script, d_script);
  ASSERT_EQ(graph.logits.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(fused.logits.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(plain.logits.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(graph.fallback, "");
  EXPECT_EQ(graph.replays, kSteps);
  EXPECT_EQ(graph.eager, 0);
  EXPECT_EQ(fused.eager, kSteps);
  // A decode step queues work only: no host wait (the pinned ring is not used either).
  EXPECT_EQ(graph.syncs_during_decode, 0);
  EXPECT_EQ(fused.syncs_during_decode, 0);

  int exact_vs_plain = 0;
  for (int t = 0; t < kSteps; ++t) {
    const auto& a = graph.logits[t];
    bool finite = true;
    for (float x : a) finite = finite && std::isfinite(x);
    EXPECT_TRUE(finite) << label << " step " << t;
    // Graph replay vs the same kernels launched eagerly: the same bits.
    EXPECT_EQ(std::memcmp(a.data(), fused.logits[t].data(), a.size() * sizeof(float)), 0)
        << label << " step " << t << ": graph and eager logits differ";
    // vs the Backend ops: the fused kernels repeat their arithmetic, so the bits should agree too; the
    // bound allows only fp32 rounding-order noise (2^-24 per op through a few layers of length <= 3072
    // reductions: far below 1e-4 of the logit scale) and would catch any real difference (a bf16-level
    // error, 2^-8, or a wrong position/row is orders of magnitude larger).
    float scale = 1.0f, worst = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, std::fabs(plain.logits[t][i]));
      worst = std::max(worst, std::fabs(a[i] - plain.logits[t][i]));
    }
    EXPECT_LE(worst, 1e-4f * scale) << label << " step " << t << ": graph vs Transformer";
    exact_vs_plain += std::memcmp(a.data(), plain.logits[t].data(), a.size() * sizeof(float)) == 0;
  }
  std::printf("%s: %d/%d steps bit-identical to Transformer::ForwardResident (graph == eager: all)\n",
              label, exact_vs_plain, kSteps);
  be->arena().Free(*d);
}

TEST(GraphedDraft, Qwen3ShapeChunkedAttention) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto model = testing::SynthModel("qwen3-0.6b", 2, 4096);
  ASSERT_NE(model, nullptr);
  // 250 prompt tokens: the decode attention merges 4 chunks, then 5 past slot 256, and the rollback
  // crosses back.
  CheckModel("qwen3-0.6b x2 layers", model, 250);
}

TEST(GraphedDraft, Qwen3ShapeAcrossGemvShapes) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto model = testing::SynthModel("qwen3-0.6b", 2, 4096);
  ASSERT_NE(model, nullptr);
  // 376 prompt tokens: the draft replays its short-context graph to position 383 and its long-context
  // one (other GEMV grids, GraphedDraft::ShapeFor) from 384; the rollback at step 12 (to 383) goes back
  // to the first. Every step still equals the eager kernels and the Transformer.
  CheckModel("qwen3-0.6b x2 layers, positions 376-394", model, 376);
}

TEST(GraphedDraft, Qwen3ShapeF16Cache) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto model = testing::SynthModel("qwen3-0.6b", 2, 4096);
  ASSERT_NE(model, nullptr);
  CheckModel("qwen3-0.6b x2 layers, f16 cache", model, 250, DType::kF16);
}

// A Q8_0 draft (weights kept packed on the device): the graph's fused GEMVs read the blocks in the
// packed kernels' one order, so graph and eager launches agree bit for bit and the Transformer's
// backend ops (RmsNorm + the packed GEMV) within the same fp32 bound as bf16 weights (the GEMVs
// themselves give its bits; only the attention sums in its own order).
TEST(GraphedDraft, Qwen3ShapeQ8_0Weights) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto model = testing::SynthModel("qwen3-0.6b", 2, 4096, DType::kQ8_0);
  ASSERT_NE(model, nullptr);
  CheckModel("qwen3-0.6b x2 layers, q8_0", model, 250, DType::kF32, kernels::ElemType::kQ8_0);
  CheckModel("qwen3-0.6b x2 layers, q8_0, f16 cache", model, 250, DType::kF16, kernels::ElemType::kQ8_0);
}

TEST(GraphedDraft, Qwen3ShapeQ4_KWeights) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto model = testing::SynthModel("qwen3-0.6b", 2, 4096, DType::kQ4_K);
  ASSERT_NE(model, nullptr);
  CheckModel("qwen3-0.6b x2 layers, q4_k, f16 cache", model, 40, DType::kF16, kernels::ElemType::kQ4_K);
}

TEST(GraphedDraft, TinyDenseBf16Cache) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto model = testing::SynthModel("tiny-dense", 2, 0);
  ASSERT_NE(model, nullptr);
  CheckModel("synth tiny-dense, bf16 cache", model, 9, DType::kBF16);
}

TEST(GraphedDraft, TinyDenseSimpleAttention) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto model = testing::SynthModel("tiny-dense", 2, 0);
  ASSERT_NE(model, nullptr);
  CheckModel("synth tiny-dense", model, 9);
}

TEST(GraphedDraft, BundledTinyDraft) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const auto dir = testing::SourceDir() / "models" / "tiny-draft";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no " << dir;
  auto loaded = LoadModel(dir.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<const LoadedModel> model(std::move(loaded).value());
  CheckModel("models/tiny-draft", model, 20);
  CheckModel("models/tiny-draft, f16 cache", model, 20, DType::kF16);
}

TEST(GraphedDraft, MoeModelIsRefused) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto spec = SynthSpec("tiny-moe");
  ASSERT_TRUE(spec.ok());
  auto w = SynthWeights(*spec, DType::kBF16, 1);
  ASSERT_TRUE(w.ok());
  auto be = testing::TestCudaBackend(size_t{256} << 20);
  ASSERT_NE(be, nullptr);
  auto lm = Transformer::Create(std::shared_ptr<const LoadedModel>(std::move(w).value()), be.get());
  ASSERT_TRUE(lm.ok()) << lm.status();
  EXPECT_NE(GraphedDraft::Unsupported(**lm).find("MoE"), std::string::npos);
  EXPECT_FALSE(GraphedDraft::Create(be.get(), lm->get(), DraftDecodePath::kGraph).ok());
}

}  // namespace
}  // namespace specgen
