// The benchmark routing override on the CUDA backend (docs/design.md §12, kernels/routing_override.cuh).
// Skips without a device.
//  - Route under an override returns the trace's ids at each row's position and the router's own
//    weights (the host-routed path reads these).
//  - Streamed equals resident bit for bit under the same override, at slot counts where some passes
//    route on the host (Route) and others on the device (RouteAndRunExperts): the two paths take the
//    same ids. The same with the streamed passes replayed from CUDA graphs at positions other than the
//    captured ones (a graph reads the replay's positions), after a rollback and after the trace is
//    replaced by another of its shape (graphs kept, reading the new ids).
//  - Under uniform routing the GPU-driven cache hits about its share of all experts; under locality
//    routing far more.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "bench/routing/routing_trace.h"
#include "engine/speculative/graphed_target_pass.h"
#include "gtest/gtest.h"
#include "tests/common/gpu_test_env.h"
#include "moe/cuda/cuda_streaming.h"

namespace specgen {
namespace {

std::vector<int32_t> Ids(int64_t from, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((131 * (from + i) + 17) % vocab);
  return ids;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(RoutingOverrideGpu, RouteTakesTheTracesIdsAndKeepsTheRoutersWeights) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto be = testing::TestCudaBackend(size_t{256} << 20);
  ASSERT_NE(be, nullptr);
  RoutingTableShape shape;
  shape.positions = 10;
  shape.moe_layers = 2;
  shape.n_experts = 16;
  shape.top_k = 4;
  auto trace = bench::UniformTrace(shape, 7);
  ASSERT_TRUE(trace.ok());
  const std::vector<int32_t> positions = {3, 17, 5, 13};  // 17 and 13 wrap to 7 and 3
  std::vector<float> host(positions.size() * shape.n_experts);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>((i * 37) % 23) * 0.1f;
  auto logits = be->NewBuffer(static_cast<int64_t>(positions.size()), shape.n_experts);
  ASSERT_TRUE(logits.ok());
  ASSERT_TRUE(be->Write(host, logits->get()).ok());
  Routing own, over;
  ASSERT_TRUE(be->Route(**logits, 4, RouterNorm::kSoftmaxTopKRenormalize, &own).ok());
  ASSERT_TRUE(be->PrepareRoutingOverride(*trace).ok());
  ASSERT_TRUE(be->OverrideNextRouting(1, positions).ok());
  ASSERT_TRUE(be->Route(**logits, 4, RouterNorm::kSoftmaxTopKRenormalize, &over).ok());
  std::vector<int32_t> want(positions.size() * 4);
  ASSERT_TRUE((*trace)->Rewrite(1, positions, want).ok());
  EXPECT_EQ(over.expert, want);
  EXPECT_EQ(over.weight, own.weight);
  EXPECT_NE(over.expert, own.expert);
  // One call only: the next is the router's own.
  Routing after;
  ASSERT_TRUE(be->Route(**logits, 4, RouterNorm::kSoftmaxTopKRenormalize, &after).ok());
  EXPECT_EQ(after.expert, own.expert);
}

TEST(RoutingOverrideGpu, StreamedEqualsResidentUnderTheSameOverrideAlsoFromGraphs) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto spec = SynthSpec("tiny-moe");
  ASSERT_TRUE(spec.ok());
  spec->head_dim = 32;  // the preset's 16 has no decode attention kernel: its passes cannot be captured
  auto w = SynthWeights(*spec, DType::kBF16, 3);
  ASSERT_TRUE(w.ok()) << w.status();
  std::shared_ptr<const LoadedModel> model(std::move(w).value());
  const int64_t vocab = spec->vocab_size, k = spec->n_experts_used;
  const int64_t moe_layers = std::count(spec->layer_is_moe.begin(), spec->layer_is_moe.end(), true);
  // 64 positions: the passes below run past it and wrap.
  auto trace = bench::TraceForModel(bench::RoutingRegime::kLocality, *spec, 64, 5);
  ASSERT_TRUE(trace.ok()) << trace.status();
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  TransformerOptions ro;
  ro.max_context = 200;
  auto resident = Transformer::Create(model, be.get(), ro);
  auto own = Transformer::Create(model, be.get(), ro);
  ASSERT_TRUE(resident.ok() && own.ok());
  for (int64_t slots : {k, k + 3, spec->n_experts * moe_layers}) {
    SCOPED_TRACE(std::to_string(slots) + " slots");
    TransformerOptions so = ro;
    so.expert_cache_slots = slots;
    so.streaming = std::make_shared<CudaWeightStreaming>(be.get());
    auto streamed = Transformer::Create(model, be.get(), so);
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    Transformer* r = resident->get();
    Transformer* s = streamed->get();
    ASSERT_TRUE(r->SetRoutingOverride(*trace).ok());  // one trace a backend: the two models share it
    ASSERT_TRUE(s->SetRoutingOverride(*trace).ok());
    ASSERT_TRUE(r->Truncate(0).ok());
    ASSERT_TRUE((*own)->Truncate(0).ok());
    // A 37-position prefill (host-routed), then passes of 1..16 (the device routes those whose union
    // fits the slots, the host the others), eager.
    bool differs_from_own = false;
    for (int n : {37, 1, 4, 16, 2, 1, 8, 3}) {
      const auto ids = Ids(r->n_past(), n, vocab);
      std::vector<float> lr, ls, lo;
      ASSERT_TRUE(r->Forward(ids, &lr).ok());
      auto st = s->Forward(ids, &ls);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_TRUE((*own)->Forward(ids, &lo).ok());
      ASSERT_TRUE(SameBits(lr, ls)) << "a pass of " << n << " at " << r->n_past() - n;
      differs_from_own |= !SameBits(lr, lo);
    }
    EXPECT_TRUE(differs_from_own) << "the override did not change the routing";
    // Graph replays of the streamed model: each size captured once, then replayed at new positions
    // and again after a rollback; every pass equals the resident model's eager pass there.
    int32_t* d_tokens = nullptr;
    ASSERT_EQ(cudaMalloc(&d_tokens, 16 * sizeof(int32_t)), cudaSuccess);
    auto graphed = GraphedTargetPass::Create(be.get(), s, d_tokens, 16);
    ASSERT_TRUE(graphed.ok()) << graphed.status();
    for (int round = 0; round < 3; ++round) {
      if (round == 1) {  // another trace of the same shape: rewritten where the graphs read it
        auto other = bench::TraceForModel(bench::RoutingRegime::kUniform, *spec, 64, 6);
        ASSERT_TRUE(other.ok());
        ASSERT_TRUE(r->SetRoutingOverride(*other).ok());
        ASSERT_TRUE(s->SetRoutingOverride(*other).ok());
      }
      for (int n : {1, 4, 1, 2}) {
        if (round == 2 && n == 4) {  // redo the last positions: a rejected verification pass
          const int64_t back = r->n_past() - 3;
          ASSERT_TRUE(r->Truncate(back).ok());
          ASSERT_TRUE(s->Truncate(back).ok());
        }
        const auto ids = Ids(r->n_past() * 7, n, vocab);  // other tokens than the eager passes'
        ASSERT_EQ(cudaMemcpy(d_tokens, ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
        std::vector<float> lr, ls(static_cast<size_t>(n * vocab));
        const int64_t at = r->n_past();
        ASSERT_TRUE(r->Forward(ids, &lr).ok());
        auto out = (*graphed)->Forward(n);
        ASSERT_TRUE(out.ok()) << out.status();
        ASSERT_TRUE(be->Read(**out, ls).ok());
        ASSERT_TRUE(SameBits(lr, ls)) << "round " << round << ": a graphed pass of " << n << " at " << at;
      }
    }
    if (!s->StreamsOnHost(1)) {
      EXPECT_GT((*graphed)->replays(), 0) << (*graphed)->fallback_reason();
    }
    cudaFree(d_tokens);
  }
}

// The hit rate of decoding one position a pass with a cache of 40% of the experts. Uniform routing:
// every expert equally likely and independent of what is cached, so no cache beats its share of all
// experts; LRU falls slightly below it (a pass's own experts cannot come again in that pass, and the
// layers' shares of the common slots wander). Locality routing: most picks repeat recent ones.
TEST(RoutingOverrideGpu, UniformRoutingHitsTheSlotShareAndLocalityFarMore) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto spec = SynthSpec("tiny-moe");
  ASSERT_TRUE(spec.ok());
  spec->n_experts = 64;
  spec->n_experts_used = 4;
  auto w = SynthWeights(*spec, DType::kBF16, 9);
  ASSERT_TRUE(w.ok()) << w.status();
  std::shared_ptr<const LoadedModel> model(std::move(w).value());
  const int64_t moe_layers = std::count(spec->layer_is_moe.begin(), spec->layer_is_moe.end(), true);
  const int64_t all = spec->n_experts * moe_layers, slots = all * 4 / 10;
  const double share = static_cast<double>(slots) / static_cast<double>(all);
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  TransformerOptions so;
  so.max_context = 420;
  so.expert_cache_slots = slots;
  so.streaming = std::make_shared<CudaWeightStreaming>(be.get());  // the experts stream through the cache
  auto lm = Transformer::Create(model, be.get(), so);
  ASSERT_TRUE(lm.ok()) << lm.status();
  ASSERT_FALSE((*lm)->StreamsOnHost(1));
  auto hit_rate = [&](bench::RoutingRegime regime) -> double {
    auto trace = bench::TraceForModel(regime, *spec, 512, 2);
    EXPECT_TRUE(trace.ok()) << trace.status();
    EXPECT_TRUE((*lm)->SetRoutingOverride(*trace).ok());
    EXPECT_TRUE((*lm)->Truncate(0).ok());
    EXPECT_TRUE((*lm)->EmptyExpertCache().ok());
    ExpertStreamStats before;
    std::vector<float> logits;
    for (int t = 0; t < 400; ++t) {
      if (t == 40) before = (*lm)->expert_stream_stats().value();  // past the cache's filling
      const int32_t id = static_cast<int32_t>((t * 7919 + 3) % spec->vocab_size);
      EXPECT_TRUE((*lm)->Forward({&id, 1}, &logits).ok());
    }
    const ExpertStreamStats after = (*lm)->expert_stream_stats().value();
    const double hits = double(after.hits - before.hits), misses = double(after.misses - before.misses);
    EXPECT_EQ(hits + misses, 360.0 * moe_layers * spec->n_experts_used) << "one pass's union: its k ids";
    return hits / (hits + misses);
  };
  const double uniform = hit_rate(bench::RoutingRegime::kUniform);
  const double locality = hit_rate(bench::RoutingRegime::kLocality);
  std::printf("slot share %.3f: hit rate %.3f uniform, %.3f locality\n", share, uniform, locality);
  // 4320 requests: the sampling error of a share is under 0.015; the bounds leave room for LRU's
  // shortfall below and three errors above.
  EXPECT_LE(uniform, share + 0.045);
  EXPECT_GE(uniform, share - 0.08);
  EXPECT_GE(locality, uniform + 0.3);
}

}  // namespace
}  // namespace specgen
