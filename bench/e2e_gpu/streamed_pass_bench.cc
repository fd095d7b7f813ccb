// A verification pass with every expert streamed (docs/design.md §3.1, §12): synth:qwen3-30b-a3b as
// llama.cpp's q4_k_m mix (packed), its experts in one pinned host arena, a VRAM expert cache of as many
// slots as the planner (engine/offload/run_plan.h) fits in the budget beside the resident part.
// BM_StreamedVerifyPass: a pass of n positions replayed from a CUDA graph (the loop's way), the cache
// decided and filled by the GPU. cold 1: the cache emptied before each pass; cold 0: the steady state
// after passes of other tokens (the synthetic router's own locality). prefetch 1: each layer's likely
// experts fetched while the layer before computes (Transformer::set_expert_prefetch; its own graphs),
// prefetch 0: each layer's misses fetched after its router; both in one process, on one model.
// Counters: ms_per_pass, mb_streamed (bytes fetched per pass, prefetches included), distinct_experts
// (per MoE layer per pass), hit_rate (prefetched experts a decision finds count as hits), gb_per_s
// (streamed bytes over the pass's time), floor_ratio = floor(n) / time, floor(n) = streamed bytes /
// kPcieBytesPerSecond, and per pass mb_prefetched, mb_prefetch_useful (prefetched bytes a decision
// hit) and mb_prefetch_wasted (evicted unused; cold, also what the next pass's emptying discards). Needs about 40 GB of host memory (the generated weights and the pinned copy of
// the experts); skips, saying so, where there is less.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench/e2e_gpu/bench_models.h"
#include "engine/core/host_memory.h"
#include "engine/core/status_macros.h"
#include "engine/io/synth.h"
#include "engine/io/weight_set.h"
#include "engine/offload/run_plan.h"
#include "engine/speculative/graphed_target_pass.h"

namespace specgen::e2e {
namespace {

constexpr double kPcieBytesPerSecond = 55e9;  // pinned host-to-device copies (docs/design.md §2)
constexpr int64_t kContext = 512;
constexpr int64_t kPrompt = 32;
constexpr char kType[] = "q4_k_m";  // llama.cpp's mix, as people run this model

// The synthetic weights, generated once per process (tens of GB) and kept for every run.
std::shared_ptr<const LoadedModel>& Weights() {
  static std::shared_ptr<const LoadedModel> w;
  return w;
}

// One backend and streamed model at a time (two would not fit host memory), kept while the budget is.
struct Streamed {
  size_t budget = 0;
  int64_t slots = 0;
  int64_t moe_layers = 0;
  std::unique_ptr<CudaBackend> backend;
  std::unique_ptr<Transformer> lm;
  int32_t* d_tokens = nullptr;  // arena
  std::unique_ptr<GraphedTargetPass> graphed[2];  // [prefetch]: the graphs keep what they were captured with
};
std::unique_ptr<Streamed>& Current() {
  static std::unique_ptr<Streamed> s;
  return s;
}

absl::StatusOr<Streamed*> MakeStreamed(size_t budget, int n) {
  std::unique_ptr<Streamed>& cur = Current();
  if (cur && cur->budget == budget) return cur.get();
  cur.reset();  // the previous pinned copy goes first
  if (!Weights()) {
    ASSIGN_OR_RETURN(ModelSpec spec, SynthSpec("qwen3-30b-a3b"));
    ASSIGN_OR_RETURN(const ExportType type, ParseExportType(kType));
    ASSIGN_OR_RETURN(const size_t bytes, SynthBytes(spec, type));
    const size_t need = 2 * bytes + (size_t{4} << 30);  // the weights and the pinned copy of the experts
    if (HostMemoryAvailable() < static_cast<double>(need)) {
      return absl::ResourceExhaustedError(Cat("needs ", need >> 30, " GiB of host memory, ",
                                              static_cast<size_t>(HostMemoryAvailable()) >> 30, " GiB available"));
    }
    ASSIGN_OR_RETURN(auto w, SynthWeights(spec, type, 0));
    Weights() = std::move(w);
  }
  const ModelSpec& spec = Weights()->spec;
  auto s = std::make_unique<Streamed>();
  s->budget = budget;
  s->moe_layers = std::count(spec.layer_is_moe.begin(), spec.layer_is_moe.end(), true);
  offload::OffloadRequest request;
  request.target = Cat("synth:qwen3-30b-a3b:", kType);
  request.draft_max = 15;  // passes of up to 16 positions
  request.context = kContext;
  request.kv_element_bytes = 4;  // TransformerOptions' default: the fp32 cache
  request.vram_budget = budget;
  ASSIGN_OR_RETURN(s->slots, offload::PlanExpertCacheSlots(request));
  if (s->slots < 0) return absl::InvalidArgumentError(Cat("a ", budget >> 20, " MiB budget holds every expert"));
  CudaBackendOptions o;
  o.arena_bytes = budget;
  ASSIGN_OR_RETURN(s->backend, CudaBackend::Create(o));
  TransformerOptions t;
  t.max_context = kContext;
  t.expert_cache_slots = s->slots;
  ASSIGN_OR_RETURN(s->lm, Transformer::Create(Weights(), s->backend.get(), t));
  ASSIGN_OR_RETURN(void* d, s->backend->arena().Allocate(16 * sizeof(int32_t), "the pass's token ids"));
  s->d_tokens = static_cast<int32_t*>(d);
  for (auto& g : s->graphed) {
    ASSIGN_OR_RETURN(g, GraphedTargetPass::Create(s->backend.get(), s->lm.get(), s->d_tokens, 16));
  }
  (void)n;
  cur = std::move(s);
  return cur.get();
}

void BM_StreamedVerifyPass(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const size_t budget = static_cast<size_t>(state.range(0)) << 30;
  const int n = static_cast<int>(state.range(1));
  const bool cold = state.range(2) != 0;
  const bool prefetch = state.range(3) != 0;
  auto made = MakeStreamed(budget, n);
  if (!made.ok()) return state.SkipWithError(std::string(made.status().message()).c_str());
  Streamed& s = **made;
  Transformer& lm = *s.lm;
  lm.set_expert_prefetch(prefetch);
  GraphedTargetPass& graphed = *s.graphed[prefetch ? 1 : 0];
  const int64_t vocab = lm.vocab_size();
  auto fail = [&](const absl::Status& st) { state.SkipWithError(std::string(st.message()).c_str()); };
  // A 32-token prompt (host-routed, experts staged), once.
  if (lm.n_past() < kPrompt) {
    if (!lm.Truncate(0).ok()) return fail(absl::InternalError("truncate"));
    std::vector<int32_t> prompt(kPrompt);
    for (int i = 0; i < kPrompt; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 11) % vocab);
    if (auto r = lm.ForwardResident(prompt); !r.ok()) return fail(r.status());
  }
  int64_t step = 0;
  // One pass of n new tokens at kPrompt.., rolled back afterwards; tokens differ from pass to pass.
  auto pass = [&]() -> absl::StatusOr<double> {
    std::vector<int32_t> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(((step * 16 + i) * 104729 + 5) % vocab);
    ++step;
    if (cudaMemcpy(s.d_tokens, ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      return absl::InternalError("token copy failed");
    }
    if (cold) RETURN_IF_ERROR(lm.EmptyExpertCache());
    RETURN_IF_ERROR(s.backend->Synchronize(SyncKind::kOther));
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(graphed.Forward(n).status());
    RETURN_IF_ERROR(s.backend->Synchronize(SyncKind::kOther));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RETURN_IF_ERROR(lm.Truncate(kPrompt));
    return sec;
  };
  // Untimed: the graph's capture (and its warm-up pass) and, warm, a steady state of the cache.
  for (int i = 0; i < (cold ? 1 : 6); ++i) {
    if (auto r = pass(); !r.ok()) return fail(r.status());
  }
  if (!graphed.fallback_reason().empty()) return state.SkipWithError(graphed.fallback_reason().c_str());
  auto before = lm.expert_stream_stats();
  if (!before.ok()) return fail(before.status());
  double seconds = 0;
  int64_t passes = 0;
  for (auto _ : state) {
    for (int r = 0; r < 4; ++r) {
      auto sec = pass();
      if (!sec.ok()) return fail(sec.status());
      seconds += *sec;
      ++passes;
    }
  }
  auto after = lm.expert_stream_stats();
  if (!after.ok()) return fail(after.status());
  const double bytes = double(after->fetched_bytes - before->fetched_bytes + after->staged_bytes - before->staged_bytes) /
                       passes;
  const double hits = double(after->hits - before->hits), misses = double(after->misses - before->misses);
  const double sec = seconds / passes;
  state.counters["slots"] = static_cast<double>(s.slots);
  state.counters["ms_per_pass"] = sec * 1e3;
  state.counters["mb_streamed"] = bytes / 1e6;
  state.counters["distinct_experts"] = (hits + misses) / passes / static_cast<double>(s.moe_layers);
  state.counters["hit_rate"] = hits + misses > 0 ? hits / (hits + misses) : 0.0;
  state.counters["gb_per_s"] = bytes / sec / 1e9;
  state.counters["floor_ms"] = bytes / kPcieBytesPerSecond * 1e3;
  state.counters["floor_ratio"] = bytes / kPcieBytesPerSecond / sec;
  state.counters["staged"] = static_cast<double>(after->staged - before->staged) / passes;
  state.counters["mb_prefetched"] = double(after->prefetched_bytes - before->prefetched_bytes) / passes / 1e6;
  state.counters["mb_prefetch_useful"] =
      double(after->prefetch_useful_bytes - before->prefetch_useful_bytes) / passes / 1e6;
  state.counters["mb_prefetch_wasted"] =
      double(after->prefetch_wasted_bytes - before->prefetch_wasted_bytes) / passes / 1e6;
}
BENCHMARK(BM_StreamedVerifyPass)
    ->ArgNames({"budget_gib", "n", "cold", "prefetch"})
    ->ArgsProduct({{8, 16}, {1, 2, 4, 8, 16}, {1, 0}, {1, 0}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

}  // namespace
}  // namespace specgen::e2e
