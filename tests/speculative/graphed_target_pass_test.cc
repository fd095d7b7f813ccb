// GraphedTargetPass (engine/speculative/graphed_target_pass.h): a target pass replayed from a CUDA graph
// gives the logits of the same pass launched eagerly (Transformer::ForwardResident) bit for bit, and
// writes the same KV rows (the two alternate which one runs last, so later passes read rows each of them
// wrote), for pass sizes 1..16 at lengths that cross the graphs' key bounds, with the logits buffer
// poisoned (NaN) before every pass and no host wait inside a replay. Graphs are captured once per
// (size, key bound) and again after the model's activations were reallocated. A backend without the
// fused ops (whose q/k norm + RoPE take host positions) cannot be captured: the reason is kept and the
// passes run eagerly with the same results.
// Models: the bundled tiny target (Qwen3-MoE, head_dim 64, experts routed on the device) and
// qwen3-0.6b's layer shape cut to 2 layers (head_dim 128, q/k norm), with fp32 and 16-bit KV caches.
// Skips without a device.
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "engine/speculative/graphed_target_pass.h"
#include "gtest/gtest.h"
#include "tests/common/gpu_test_env.h"
#include "tests/common/synth_model.h"

namespace specgen {
namespace {

// Pass sizes in order: a verification of k + 1 for assorted k, the largest first and last.
constexpr int kPassSizes[] = {16, 1, 5, 3, 9, 2, 16, 7, 1, 12, 4, 16};

std::vector<int32_t> Ids(int64_t from, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((7 * (from + i) + 3) % vocab);
  return ids;
}

// The logits buffer a pass writes, read back after the stream drains.
std::vector<float> ReadLogits(CudaBackend* be, const Buffer& logits) {
  std::vector<float> host(logits.rows() * logits.cols());
  EXPECT_EQ(cudaStreamSynchronize(be->stream()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), CudaBackend::Data(logits), host.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

void Poison(CudaBackend* be, const Buffer& logits) {
  ASSERT_EQ(cudaStreamSynchronize(be->stream()), cudaSuccess);
  ASSERT_EQ(cudaMemset(const_cast<float*>(CudaBackend::Data(logits)), 0xFF,
                       logits.capacity_rows() * logits.cols() * sizeof(float)),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the memset ran on the legacy stream
}

struct Outcome {
  int64_t replays = 0, captures = 0, eager = 0, keys = 0;
  int max_live = 0;  // the most graphs kept at once
  std::string fallback;
};

// Prefills `prompt_len` tokens, then runs every size of kPassSizes graphed and eagerly at the same length
// (alternating which goes first), compares the two, and keeps about half of each pass's positions (as a
// verification that accepts some drafts). With `grow_midway`, one eager pass of 40 positions (rolled
// back) halfway reallocates the model's activations, which the next graphed pass must notice.
Outcome Check(const char* what, CudaBackend* be, Transformer* lm, int64_t prompt_len, bool grow_midway,
              int max_graphs = GraphedTargetPass::kDefaultMaxGraphs) {
  Outcome o;
  const int64_t vocab = lm->vocab_size();
  EXPECT_TRUE(lm->Truncate(0).ok());
  {
    const auto prompt = Ids(0, prompt_len, vocab);
    std::vector<int32_t> pos(prompt_len);
    for (int64_t i = 0; i < prompt_len; ++i) pos[i] = static_cast<int32_t>(i);
    EXPECT_TRUE(lm->ForwardResident(prompt, pos, {}).ok());
  }
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, 16 * sizeof(int32_t)), cudaSuccess);
  auto* d_tokens = static_cast<int32_t*>(d);
  auto created = GraphedTargetPass::Create(be, lm, d_tokens, 16, true, max_graphs);
  EXPECT_TRUE(created.ok()) << created.status();
  if (!created.ok()) return o;
  GraphedTargetPass& gp = **created;
  std::set<std::pair<int, int64_t>> keys;
  int i = 0;
  for (int n : kPassSizes) {
    const int64_t len = lm->n_past();
    if (grow_midway && i == 6) {
      const auto ids = Ids(len, 40, vocab);
      std::vector<int32_t> pos(40);
      for (int t = 0; t < 40; ++t) pos[t] = static_cast<int32_t>(len + t);
      EXPECT_TRUE(lm->ForwardResident(ids, pos, {}).ok());
      EXPECT_TRUE(lm->Truncate(len).ok());
      keys.clear();  // every graph is stale now
    }
    const auto ids = Ids(len, n, vocab);
    EXPECT_EQ(cudaMemcpy(d_tokens, ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // a pageable copy may return before it lands
    std::vector<int32_t> pos(n);
    for (int t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(len + t);
    std::vector<float> graphed, eager;
    const bool graphed_last = i % 2 == 1;
    for (int run = 0; run < 2; ++run) {
      const bool graph = (run == 1) == graphed_last;
      EXPECT_TRUE(lm->Truncate(len).ok());
      const SyncCounts before = be->syncs();
      auto r = graph ? gp.Forward(n) : lm->ForwardResident(ids, pos, {});
      EXPECT_TRUE(r.ok()) << what << " n=" << n << ": " << r.status();
      if (!r.ok()) return o;
      if (graph && gp.replays() > o.replays && i > 0) {
        // A replay (not the warm-up pass of a first capture) queues without waiting for the device.
        EXPECT_EQ(be->syncs().other, before.other) << what << " n=" << n;
      }
      o.replays = gp.replays();
      o.max_live = std::max(o.max_live, gp.live_graphs());
      EXPECT_EQ((*r)->rows(), n);
      EXPECT_EQ(lm->n_past(), len + n);
      (graph ? graphed : eager) = ReadLogits(be, **r);
      Poison(be, **r);
    }
    keys.insert({n, std::max<int64_t>(128, std::bit_ceil(static_cast<uint64_t>(len + n)))});
    EXPECT_EQ(graphed.size(), eager.size());
    if (graphed.size() != eager.size()) return o;
    int nan = 0;
    for (float x : graphed) nan += std::isnan(x);
    EXPECT_EQ(nan, 0) << what << " n=" << n << " at " << len;
    EXPECT_EQ(std::memcmp(graphed.data(), eager.data(), graphed.size() * sizeof(float)), 0)
        << what << ": pass of " << n << " at length " << len << " differs from the eager pass";
    EXPECT_TRUE(lm->Truncate(len + (n + 1) / 2).ok());
    ++i;
  }
  o.captures = gp.captures();
  o.eager = gp.eager_passes();
  o.fallback = gp.fallback_reason();
  o.keys = static_cast<int64_t>(keys.size());
  cudaFree(d);
  return o;
}

// qwen3-0.6b's layer shape cut to 2 layers and a 4096-token vocabulary.
std::shared_ptr<const LoadedModel> Qwen3Shape() { return testing::SynthModel("qwen3-0.6b", 2, 4096); }

std::unique_ptr<Transformer> Create(std::shared_ptr<const LoadedModel> model, CudaBackend* be,
                                    DType kv_type = DType::kF32) {
  TransformerOptions options;
  options.max_context = 512;
  options.kv_type = kv_type;
  auto lm = Transformer::Create(std::move(model), be, options);
  EXPECT_TRUE(lm.ok()) << lm.status();
  return lm.ok() ? std::move(lm).value() : nullptr;
}

TEST(GraphedTargetPass, Qwen3ShapeEqualsEagerAcrossKeyBounds) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  auto lm = Create(Qwen3Shape(), be.get());
  ASSERT_NE(lm, nullptr);
  // From 110 positions the passes cross the 128-key bound (and 256 is not reached: 2 bounds).
  const Outcome o = Check("qwen3-0.6b x2 layers", be.get(), lm.get(), 110, false);
  EXPECT_EQ(o.fallback, "");
  EXPECT_EQ(o.eager, 0);
  EXPECT_EQ(o.replays, static_cast<int64_t>(std::size(kPassSizes)));
  EXPECT_EQ(o.captures, o.keys);  // one capture per (size, bound) used, none again
}

// With 16-bit KV caches (--cache-type): the captured store rounds as the eager one, the same bits.
TEST(GraphedTargetPass, Qwen3ShapeEqualsEagerWith16BitCaches) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  for (const DType type : {DType::kF16, DType::kBF16}) {
    auto be = testing::TestCudaBackend(size_t{1} << 30);
    ASSERT_NE(be, nullptr);
    auto lm = Create(Qwen3Shape(), be.get(), type);
    ASSERT_NE(lm, nullptr);
    const std::string what = "qwen3-0.6b x2 layers, " + std::string(Name(type)) + " cache";
    const Outcome o = Check(what.c_str(), be.get(), lm.get(), 110, false);
    EXPECT_EQ(o.fallback, "") << what;
    EXPECT_EQ(o.eager, 0) << what;
    EXPECT_EQ(o.replays, static_cast<int64_t>(std::size(kPassSizes))) << what;
  }
}

TEST(GraphedTargetPass, KeepsAtMostMaxGraphsAndRecapturesTheReleased) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  auto lm = Create(Qwen3Shape(), be.get());
  ASSERT_NE(lm, nullptr);
  // Room for 3 graphs among the sequence's (size, bound) pairs: the least recently replayed go, a pass
  // of a released one captures it again, and every replay still equals its eager pass.
  const Outcome o = Check("qwen3-0.6b x2 layers, 3 graphs", be.get(), lm.get(), 110, false, 3);
  EXPECT_EQ(o.fallback, "");
  EXPECT_EQ(o.eager, 0);
  EXPECT_EQ(o.replays, static_cast<int64_t>(std::size(kPassSizes)));
  EXPECT_GT(o.keys, 3);
  EXPECT_EQ(o.max_live, 3);
  EXPECT_GT(o.captures, o.keys);  // pairs used again after their release were captured again
}

TEST(GraphedTargetPass, RecapturesAfterTheActivationsGrow) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  auto lm = Create(Qwen3Shape(), be.get());
  ASSERT_NE(lm, nullptr);
  // A 20-token prompt leaves the activations sized for 20 rows; the 40-row pass midway regrows them.
  const int64_t before = lm->scratch_generation();
  const Outcome o = Check("qwen3-0.6b x2 layers, regrown", be.get(), lm.get(), 20, true);
  EXPECT_GT(lm->scratch_generation(), before);
  EXPECT_EQ(o.fallback, "");
  EXPECT_EQ(o.replays, static_cast<int64_t>(std::size(kPassSizes)));
  // Keys used before the growth were captured once; after it each key again (o.keys counts those).
  EXPECT_GT(o.captures, o.keys);
}

TEST(GraphedTargetPass, BundledMoeTargetEqualsEager) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const auto dir = testing::SourceDir() / "models" / "tiny-target";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no " << dir;
  auto loaded = LoadModel(dir.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  auto lm = Create(std::shared_ptr<const LoadedModel>(std::move(loaded).value()), be.get());
  ASSERT_NE(lm, nullptr);
  const Outcome o = Check("models/tiny-target", be.get(), lm.get(), 120, false);
  EXPECT_EQ(o.fallback, "");
  EXPECT_EQ(o.eager, 0);
  EXPECT_EQ(o.captures, o.keys);
}

TEST(GraphedTargetPass, PassNeedingHostArgumentsRunsEagerly) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  CudaBackendOptions options;
  options.arena_bytes = size_t{1} << 30;
  options.fused_ops = false;  // q/k norm, RoPE and the cache store as separate ops: host positions
  options.gemv_order = kernels::GemvOrder::kFma;  // as the other cases (TestCudaBackend)
  auto be = CudaBackend::Create(options);
  ASSERT_TRUE(be.ok()) << be.status();
  auto lm = Create(Qwen3Shape(), be->get());
  ASSERT_NE(lm, nullptr);
  const Outcome o = Check("qwen3-0.6b x2 layers, unfused", be->get(), lm.get(), 30, false);
  EXPECT_NE(o.fallback.find("device length"), std::string::npos) << o.fallback;
  EXPECT_EQ(o.replays, 0);
  EXPECT_EQ(o.captures, 0);
  EXPECT_EQ(o.eager, static_cast<int64_t>(std::size(kPassSizes)));
}

}  // namespace
}  // namespace specgen
