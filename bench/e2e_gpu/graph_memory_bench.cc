// What the target's pass graphs cost in device memory. GraphedTargetPass instantiates one graph per
// (pass size, key bound); the driver allocates what an instantiated graph needs outside the
// backend's budgeted arena (docs/design.md §6.8 counts only the arena). This captures every pass size 1..16 at
// every key bound of a 2048-token context (128 .. 2048: 5 bounds, 80 graphs) on a qwen3-1.7b-shaped
// target and reports the device's free memory before and after (cudaMemGetInfo: the whole device, so
// nothing else may run beside it). Counters: graphs (captured), graph_mib (free memory lost while
// capturing them), kib_per_graph, and arena_mib (the budgeted arena, for scale). model 0: qwen3-1.7b
// shape (~230 kernels a pass), 1: qwen3-0.6b shape; capped 0: every graph kept, 1: GraphedTargetPass's
// default cap (live_graphs: how many it kept). One benchmark a process: the driver reuses the memory
// of graphs released before, so a second one in the same process reads less than it costs.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "engine/speculative/graphed_target_pass.h"

namespace specgen {
namespace {

void BM_TargetGraphMemory(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  constexpr int kMaxTokens = 16;
  constexpr int64_t kContext = 2048;
  CudaBackendOptions o;
  o.gemv_order = kernels::GemvOrder::kFma;  // the order this benchmark's recorded rows measure
  o.arena_bytes = size_t{12} << 30;
  auto be = CudaBackend::Create(o);
  if (!be.ok()) return state.SkipWithError(std::string(be.status().message()).c_str());
  auto spec = SynthSpec(state.range(0) == 0 ? "qwen3-1.7b" : "qwen3-0.6b");
  if (!spec.ok()) return state.SkipWithError(std::string(spec.status().message()).c_str());
  auto weights = SynthWeights(*spec, DType::kBF16, 1);
  if (!weights.ok()) return state.SkipWithError(std::string(weights.status().message()).c_str());
  TransformerOptions topt;
  topt.max_context = kContext;
  auto lm = Transformer::Create(std::shared_ptr<const LoadedModel>(std::move(weights).value()), be->get(), topt);
  if (!lm.ok()) return state.SkipWithError(std::string(lm.status().message()).c_str());
  Transformer& t = **lm;
  auto d_tokens = (*be)->arena().Allocate(kMaxTokens * sizeof(int32_t), "the passes' token ids");
  if (!d_tokens.ok()) return state.SkipWithError(std::string(d_tokens.status().message()).c_str());
  std::vector<int32_t> ids(kMaxTokens, 7);
  if (cudaMemcpy(*d_tokens, ids.data(), sizeof(int32_t) * kMaxTokens, cudaMemcpyHostToDevice) != cudaSuccess) {
    return state.SkipWithError("token copy failed");
  }
  const int max_graphs = state.range(1) != 0 ? GraphedTargetPass::kDefaultMaxGraphs : 1000;
  auto g = GraphedTargetPass::Create(be->get(), &t, static_cast<const int32_t*>(*d_tokens), kMaxTokens, true,
                                     max_graphs);
  if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
  GraphedTargetPass& pass = **g;
  // Before the first capture: one eager pass of the largest size, so that every kernel is loaded and
  // every workspace has grown (neither is a graph's).
  std::vector<int32_t> prompt(kMaxTokens, 11);
  if (!t.ForwardResident(prompt).ok() || !t.Truncate(0).ok() ||
      !(*be)->Synchronize(SyncKind::kOther).ok()) {
    return state.SkipWithError("warm-up pass failed");
  }
  size_t free_before = 0, free_after = 0, total = 0;
  if (cudaMemGetInfo(&free_before, &total) != cudaSuccess) return state.SkipWithError("cudaMemGetInfo failed");
  for (auto _ : state) {
    // For each key bound B, a cache length that puts every pass size 1..16 under B and over B / 2.
    for (int64_t bound = 128; bound <= kContext; bound *= 2) {
      const int64_t len = bound / 2 + 1;
      // In passes of at most 16 tokens: a longer one would grow the activations, and every graph
      // captured before would be released and captured again.
      while (t.n_past() < len) {
        std::vector<int32_t> fill(std::min<int64_t>(kMaxTokens, len - t.n_past()), 3);
        if (!t.ForwardResident(fill).ok()) return state.SkipWithError("fill pass failed");
      }
      for (int n = 1; n <= kMaxTokens && len + n <= bound; ++n) {
        absl::Status st = pass.Forward(n).status();
        if (st.ok()) st = t.Truncate(len);
        if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
      }
    }
    if (!(*be)->Synchronize(SyncKind::kOther).ok()) return state.SkipWithError("sync failed");
  }
  if (!pass.fallback_reason().empty()) return state.SkipWithError(pass.fallback_reason().c_str());
  if (cudaMemGetInfo(&free_after, &total) != cudaSuccess) return state.SkipWithError("cudaMemGetInfo failed");
  const double lost = static_cast<double>(free_before) - static_cast<double>(free_after);
  const double graphs = static_cast<double>(pass.captures());
  state.counters["graphs"] = graphs;
  state.counters["live_graphs"] = pass.live_graphs();
  state.counters["graph_mib"] = lost / (1 << 20);
  state.counters["kib_per_graph"] = graphs > 0 ? lost / 1024 / graphs : 0;  // meaningful uncapped
  state.counters["arena_mib"] = static_cast<double>((*be)->arena().capacity()) / (1 << 20);
}
BENCHMARK(BM_TargetGraphMemory)
    ->ArgNames({"model", "capped"})
    ->Args({0, 0})->Args({0, 1})->Args({1, 0})->Args({1, 1})
    ->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace specgen
