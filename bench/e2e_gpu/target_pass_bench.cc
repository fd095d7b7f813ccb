// The target's pass (a verification of k + 1 positions, or a step of the target alone) against its
// HBM floor (docs/design.md §3):
//  - BM_TargetPass: one Transformer pass of n tokens launched op by op or replayed from a CUDA graph
//    (graph 1, the loop's default; 2: at alternating lengths), against its weights' HBM floor, and the
//    host's time to queue it.
// Skips (with an error message) without a device.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench/e2e_gpu/bench_models.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "engine/speculative/graphed_target_pass.h"

namespace specgen::e2e {
namespace {

// One Transformer::ForwardResident pass of n tokens (the speculative loop's verify at n = k + 1, the
// target alone at n = 1) after a 32-token prompt, launched op by op and waited for as the loop does, on
// synth:qwen3-1.7b (model 0), synth:qwen3-0.6b (1) or the bundled tiny-target (2): us_per_pass, and
// for the synthetic models its floor (every weight read once at kHbmBytesPerSecond) and the share of it
// reached.
// fused 0: CudaBackendOptions::fused_ops off (the ops one by one, the same bits): what fusing is worth.
// order: CudaBackendOptions::gemv_order (0 FMA, 1 tensor cores). graph 1: the pass replayed from a CUDA
// graph (GraphedTargetPass, DeviceLoopHooks::graph_verify, the loop's default), tokens from device memory.
// us_host_launch says what paces an eager pass: near us_per_pass the host's launches do (small
// targets), well below it the GPU does (the host's launches run ahead).
void BM_TargetPass(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const int which = static_cast<int>(state.range(0));
  const int n = static_cast<int>(state.range(1));
  CudaBackendOptions o;
  o.arena_bytes = size_t{8} << 30;
  o.fused_ops = state.range(2) != 0;
  o.gemv_order = state.range(3) != 0 ? kernels::GemvOrder::kTensorCores : kernels::GemvOrder::kFma;
  auto be = CudaBackend::Create(o);
  if (!be.ok()) return state.SkipWithError(std::string(be.status().message()).c_str());
  absl::StatusOr<std::unique_ptr<LoadedModel>> weights;
  double floor_us = 0;
  if (which == 2) {
    weights = LoadModel((SourceDir() / "models" / "tiny-target").string());
  } else {
    auto spec = SynthSpec(which == 0 ? "qwen3-1.7b" : "qwen3-0.6b");
    if (!spec.ok()) return state.SkipWithError(std::string(spec.status().message()).c_str());
    weights = SynthWeights(*spec, DType::kBF16, 1);
    if (auto bytes = SynthBytes(*spec, DType::kBF16); bytes.ok()) {
      // An untied input table is read one row a token, not whole (as BM_DraftDecode counts).
      const double table = double(spec->vocab_size) * spec->hidden * 2;
      const double read = double(*bytes) - (spec->tied_embeddings ? 0.0 : table - spec->hidden * 2.0 * n);
      floor_us = read / kHbmBytesPerSecond * 1e6;
    }
  }
  if (!weights.ok()) return state.SkipWithError(std::string(weights.status().message()).c_str());
  TransformerOptions topt;
  topt.max_context = 512;
  auto lm = Transformer::Create(std::shared_ptr<const LoadedModel>(std::move(weights).value()), be->get(), topt);
  if (!lm.ok()) return state.SkipWithError(std::string(lm.status().message()).c_str());
  Transformer& t = **lm;
  const int64_t vocab = t.vocab_size();
  std::vector<int32_t> prompt(32), prompt_pos(32), tokens(n), positions(n);
  for (int i = 0; i < 32; ++i) {
    prompt[i] = static_cast<int32_t>((i * 7919 + 11) % vocab);
    prompt_pos[i] = i;
  }
  for (int i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>((i * 104729 + 5) % vocab);
    positions[i] = 32 + i;
  }
  if (auto r = t.ForwardResident(prompt, prompt_pos, {}); !r.ok()) {
    return state.SkipWithError(std::string(r.status().message()).c_str());
  }
  // One pass untimed: the first launch of each kernel loads it (CUDA's lazy module loading), which
  // would otherwise land on the first benchmark's timed passes.
  if (auto r = t.ForwardResident(tokens, positions, {}); !r.ok() || !t.Truncate(32).ok()) {
    return state.SkipWithError("warm-up pass failed");
  }
  std::unique_ptr<GraphedTargetPass> graphed;
  if (state.range(4) != 0) {
    // The token ids' block goes with the backend's arena when the benchmark ends.
    auto d_tokens = (*be)->arena().Allocate(n * sizeof(int32_t), "the pass's token ids");
    if (!d_tokens.ok()) return state.SkipWithError(std::string(d_tokens.status().message()).c_str());
    if (cudaMemcpy(*d_tokens, tokens.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      return state.SkipWithError("token copy failed");
    }
    auto g = GraphedTargetPass::Create(be->get(), &t, static_cast<const int32_t*>(*d_tokens), n);
    if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
    graphed = std::move(g).value();
    // The capture (and its warm-up pass) untimed.
    if (auto r = graphed->Forward(n); !r.ok() || !t.Truncate(32).ok()) return state.SkipWithError("first graphed pass failed");
    if (!graphed->fallback_reason().empty()) return state.SkipWithError(graphed->fallback_reason().c_str());
  }
  double seconds = 0, host_seconds = 0;
  int64_t passes = 0;
  for (auto _ : state) {
    for (int r = 0; r < 8; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      auto out = graphed ? graphed->Forward(n) : t.ForwardResident(tokens, positions, {});
      host_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      absl::Status st = out.status();
      if (st.ok()) st = (*be)->Synchronize(SyncKind::kOther);
      // graph 2: the next pass at another length (32 or 33), as the loop's passes are: each replay then
      // gives the graph's length node a new value.
      if (st.ok()) st = t.Truncate(state.range(4) == 2 ? 32 + (r + 1) % 2 : 32);
      if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    passes += 8;
  }
  const double us = seconds * 1e6 / passes;
  state.counters["us_per_pass"] = us;
  // The host's share: until the pass's last launch is queued. Near us_per_pass, the launches (not the
  // device) set the pace.
  state.counters["us_host_launch"] = host_seconds * 1e6 / passes;
  if (floor_us > 0) {
    state.counters["floor_us"] = floor_us;
    state.counters["hbm_fraction"] = floor_us / us;
  }
}
BENCHMARK(BM_TargetPass)
    ->ArgNames({"model", "n", "fused", "order", "graph"})
    ->Args({0, 1, 1, 0, 0})->Args({0, 1, 0, 0, 0})->Args({0, 2, 1, 0, 0})->Args({0, 5, 1, 0, 0})->Args({0, 5, 0, 0, 0})
    ->Args({0, 9, 1, 0, 0})->Args({0, 9, 0, 0, 0})->Args({1, 1, 1, 0, 0})->Args({1, 2, 1, 0, 0})->Args({2, 1, 1, 0, 0})
    ->Args({2, 5, 1, 0, 0})
    ->Args({0, 1, 1, 1, 0})->Args({0, 2, 1, 1, 0})->Args({0, 5, 1, 1, 0})->Args({0, 9, 1, 1, 0})->Args({0, 16, 1, 0, 0})
    ->Args({0, 16, 1, 1, 0})->Args({1, 1, 1, 1, 0})->Args({1, 2, 1, 1, 0})
        // Replayed from a graph (the loop's default), in the CLI's default order (tensor cores).
    ->Args({0, 1, 1, 1, 1})->Args({0, 5, 1, 1, 1})->Args({0, 9, 1, 1, 1})->Args({0, 16, 1, 1, 1})
    ->Args({1, 1, 1, 1, 1})->Args({1, 5, 1, 1, 1})->Args({2, 1, 1, 1, 1})->Args({2, 5, 1, 1, 1})
    ->Args({1, 5, 1, 1, 0})->Args({2, 1, 1, 1, 0})->Args({2, 5, 1, 1, 0})
    ->Args({0, 1, 1, 1, 2})->Args({1, 1, 1, 1, 2})->Args({2, 1, 1, 1, 2})
->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace specgen::e2e
