// A verification pass with every expert streamed (docs/design.md §3.1, §12): synth:qwen3-30b-a3b as
// llama.cpp's q4_k_m mix (packed), its experts in one pinned host arena, a VRAM expert cache of as many
// slots as the planner (moe/run_plan.h) fits in the budget beside the resident part.
// Each benchmark runs in one routing regime (routing: 0 the model's own router, 1 uniform, 2 the
// locality generator; bench/routing/routing_trace.h): random weights route without a trained model's
// locality, so the other two bracket it (the worst case and the published traces' reuse).
// BM_StreamedVerifyPass: a pass of n positions replayed from a CUDA graph (the loop's way), the cache
// decided and filled by the GPU. Each pass follows the last (positions advancing by n, as decode
// accepting every draft would; back to the prompt's end when the context is full), so a trace advances
// over passes. cold 1: the cache emptied before each pass; cold 0: the steady state after passes of
// other tokens. Counters: ms_per_pass, mb_streamed (bytes fetched per pass), distinct_experts (per MoE
// layer per pass), hit_rate, gb_per_s (streamed bytes over the pass's time) and floor_ratio = floor(n)
// / time, floor(n) = streamed bytes / kPcieBytesPerSecond.
// BM_StreamedGeneration: greedy generation through the GPU-resident loop with the streamed target,
// without a draft (k 0) and with synth:qwen3-0.6b q8_0 drafting up to k tokens (the adaptive
// controller, as generate's default), the budget planned for the pair. Each generation routes by a trace of its own seed (a regime's trace would otherwise repeat the
// last generation's routing at the same positions). Counters: tokens_per_s, mb_per_token and hit_rate
// (the decode and verification passes: the prompt routes on the host), acceptance, distinct_experts.
// Needs about 40 GB of host memory (the generated weights and the pinned copy of the experts); skips,
// saying so, where there is less.
#include <benchmark/benchmark.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/e2e_gpu/bench_models.h"
#include "engine/core/host_memory.h"
#include "engine/core/status_macros.h"
#include "engine/io/synth.h"
#include "engine/io/weight_set.h"
#include "bench/routing/routing_trace.h"
#include "moe/apply_plan.h"
#include "engine/speculative/device_speculative_decoder.h"
#include "engine/speculative/graphed_target_pass.h"
#include "kernels/packed.cuh"

namespace specgen::e2e {
namespace {

constexpr double kPcieBytesPerSecond = 55e9;  // pinned host-to-device copies (docs/design.md §2)
constexpr int64_t kContext = 512;
constexpr int64_t kPrompt = 32;
constexpr char kType[] = "q4_k_m";  // llama.cpp's mix, as people run this model
constexpr char kDraft[] = "qwen3-0.6b";
constexpr char kDraftType[] = "q8_0";
// A trace longer than any position a run here reaches (kContext): no wrap-around.
constexpr int64_t kTracePositions = 1024;

bench::RoutingRegime Regime(int64_t arg) {
  return arg == 1 ? bench::RoutingRegime::kUniform
                  : arg == 2 ? bench::RoutingRegime::kLocality : bench::RoutingRegime::kOwn;
}

// The synthetic weights, generated once per process (tens of GB) and kept for every run.
std::shared_ptr<const LoadedModel>& Weights() {
  static std::shared_ptr<const LoadedModel> w;
  return w;
}
std::shared_ptr<const LoadedModel>& DraftWeights() {
  static std::shared_ptr<const LoadedModel> w;
  return w;
}

// `extra`: bytes the model needs beside its weights (the target's pinned copy of its experts).
absl::StatusOr<std::shared_ptr<const LoadedModel>> Generate(const char* name, const char* type_name, bool streamed) {
  ASSIGN_OR_RETURN(ModelSpec spec, SynthSpec(name));
  ASSIGN_OR_RETURN(const ExportType type, ParseExportType(type_name));
  ASSIGN_OR_RETURN(const size_t bytes, SynthBytes(spec, type));
  const size_t need = (streamed ? 2 * bytes : bytes) + (size_t{4} << 30);
  if (HostMemoryAvailable() < static_cast<double>(need)) {
    return absl::ResourceExhaustedError(Cat(name, " needs ", need >> 30, " GiB of host memory, ",
                                            static_cast<size_t>(HostMemoryAvailable()) >> 30, " GiB available"));
  }
  ASSIGN_OR_RETURN(auto w, SynthWeights(spec, type, 0));
  return std::shared_ptr<const LoadedModel>(std::move(w));
}

// One backend and streamed model at a time (two would not fit host memory), kept while the budget,
// and whether a draft shares it, are.
struct Streamed {
  size_t budget = 0;
  bool with_draft = false;
  int64_t slots = 0;
  int64_t moe_layers = 0;
  std::unique_ptr<CudaBackend> backend;
  std::unique_ptr<Transformer> draft;  // with_draft only; declared before lm: it goes after it
  std::unique_ptr<Transformer> lm;
  int32_t* d_tokens = nullptr;  // arena
  std::unique_ptr<GraphedTargetPass> graphed;
};
std::unique_ptr<Streamed>& Current() {
  static std::unique_ptr<Streamed> s;
  return s;
}

absl::StatusOr<Streamed*> MakeStreamed(size_t budget, bool with_draft) {
  std::unique_ptr<Streamed>& cur = Current();
  if (cur && cur->budget == budget && cur->with_draft == with_draft) return cur.get();
  cur.reset();  // the previous pinned copy goes first
  if (!Weights()) {
    ASSIGN_OR_RETURN(Weights(), Generate("qwen3-30b-a3b", kType, true));
  }
  if (with_draft && !DraftWeights()) {
    ASSIGN_OR_RETURN(DraftWeights(), Generate(kDraft, kDraftType, false));
  }
  const ModelSpec& spec = Weights()->spec;
  auto s = std::make_unique<Streamed>();
  s->budget = budget;
  s->with_draft = with_draft;
  s->moe_layers = std::count(spec.layer_is_moe.begin(), spec.layer_is_moe.end(), true);
  // Placed as `specgen generate --vram-budget` places it (moe/apply_plan.h): the default KV type, the
  // planner's slots, prompt chunk and streamed dense layers.
  moe::RunRequest request;
  request.target = Cat("synth:qwen3-30b-a3b:", kType);
  if (with_draft) request.draft = Cat("synth:", kDraft, ":", kDraftType);
  request.draft_max = 15;  // passes of up to 16 positions
  request.context = kContext;
  CudaBackendOptions o;
  o.arena_bytes = budget;
  moe::RunPlan plan;  // budget 0: nothing planned, every weight resident
  if (budget == 0) {  // resident: the weights, and room for the caches and workspaces
    ASSIGN_OR_RETURN(const ExportType type, ParseExportType(kType));
    ASSIGN_OR_RETURN(const size_t bytes, SynthBytes(spec, type));
    o.arena_bytes = bytes + (size_t{6} << 30);
    s->slots = -1;
  } else {
    ASSIGN_OR_RETURN(plan, moe::PlanFor(request, budget));
    s->slots = plan.expert_cache_slots;
    if (s->slots < 0) return absl::InvalidArgumentError(Cat("a ", budget >> 20, " MiB budget holds every expert"));
  }
  ASSIGN_OR_RETURN(s->backend, CudaBackend::Create(o));
  if (with_draft) {
    ASSIGN_OR_RETURN(s->draft,
                     Transformer::Create(DraftWeights(), s->backend.get(), moe::DraftOptions(request, kContext)));
  }
  ASSIGN_OR_RETURN(s->lm, Transformer::Create(Weights(), s->backend.get(),
                                              moe::TargetOptions(request, kContext, plan, s->backend.get())));
  ASSIGN_OR_RETURN(void* d, s->backend->arena().Allocate(16 * sizeof(int32_t), "the pass's token ids"));
  s->d_tokens = static_cast<int32_t*>(d);
  ASSIGN_OR_RETURN(s->graphed, GraphedTargetPass::Create(s->backend.get(), s->lm.get(), s->d_tokens, 16));
  cur = std::move(s);
  return cur.get();
}

// The regime's trace of `seed` on the target (null: its own router).
absl::Status UseRegime(Transformer& lm, bench::RoutingRegime regime, uint64_t seed) {
  ASSIGN_OR_RETURN(auto trace, bench::TraceForModel(regime, lm.spec(), kTracePositions, seed));
  return lm.SetRoutingOverride(std::move(trace));
}

// Passes of n new tokens through the graphed target, each right after the last (back to the prompt's
// end when the context is full), with ids that differ from pass to pass, each timed on its own.
class VerifyPasses {
 public:
  VerifyPasses(Streamed& s, int n) : s_(s), n_(n) {}
  // A 32-token prompt first (host-routed, experts staged).
  absl::Status Prompt() {
    Transformer& lm = *s_.lm;
    RETURN_IF_ERROR(lm.Truncate(0));
    std::vector<int32_t> prompt(kPrompt);
    for (int i = 0; i < kPrompt; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 11) % lm.vocab_size());
    return lm.ForwardResident(prompt).status();
  }
  // Seconds of one pass; `cold` empties the expert cache first (untimed).
  absl::StatusOr<double> Next(bool cold) {
    Transformer& lm = *s_.lm;
    std::vector<int32_t> ids(n_);
    for (int i = 0; i < n_; ++i) ids[i] = static_cast<int32_t>(((step_ * 16 + i) * 104729 + 5) % lm.vocab_size());
    ++step_;
    if (lm.n_past() + n_ > kContext) RETURN_IF_ERROR(lm.Truncate(kPrompt));
    if (cudaMemcpy(s_.d_tokens, ids.data(), n_ * sizeof(int32_t), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      return absl::InternalError("token copy failed");
    }
    if (cold) RETURN_IF_ERROR(lm.EmptyExpertCache());
    RETURN_IF_ERROR(s_.backend->Synchronize(SyncKind::kOther));
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(s_.graphed->Forward(n_).status());
    RETURN_IF_ERROR(s_.backend->Synchronize(SyncKind::kOther));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  Streamed& s_;
  const int n_;
  int64_t step_ = 0;
};

void BM_StreamedVerifyPass(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const size_t budget = static_cast<size_t>(state.range(0)) << 30;
  const int n = static_cast<int>(state.range(1));
  const bool cold = state.range(2) != 0;
  const bench::RoutingRegime regime = Regime(state.range(3));
  auto made = MakeStreamed(budget, false);
  if (!made.ok()) return state.SkipWithError(std::string(made.status().message()).c_str());
  Streamed& s = **made;
  Transformer& lm = *s.lm;
  auto fail = [&](const absl::Status& st) { state.SkipWithError(std::string(st.message()).c_str()); };
  if (absl::Status st = UseRegime(lm, regime, 0); !st.ok()) return fail(st);
  state.SetLabel(std::string(bench::RoutingRegimeName(regime)));
  // The prompt under the regime, once per benchmark.
  VerifyPasses passes_of_n(s, n);
  if (absl::Status st = passes_of_n.Prompt(); !st.ok()) return fail(st);
  auto pass = [&] { return passes_of_n.Next(cold); };
  // Untimed: the graph's capture (and its warm-up pass) and, warm, a steady state of the cache.
  for (int i = 0; i < (cold ? 1 : 6); ++i) {
    if (auto r = pass(); !r.ok()) return fail(r.status());
  }
  if (!s.graphed->fallback_reason().empty()) return state.SkipWithError(s.graphed->fallback_reason().c_str());
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
}
// Registered budget by budget (ArgsProduct would vary the first argument fastest), so that each
// budget's pinned copy is made once per process.
BENCHMARK(BM_StreamedVerifyPass)
    ->ArgNames({"budget_gib", "n", "cold", "routing"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int budget : {8, 16}) {
        for (int routing : {0, 1, 2}) {
          for (int cold : {1, 0}) {
            for (int n : {1, 2, 4, 8, 16}) b->Args({budget, n, cold, routing});
          }
        }
      }
    })
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

// BM_ResidentVerifyPass: the same passes with every weight resident (the model's own router), so the
// pass's growth with n is the products' alone: ms_per_pass (compare n with n = 1: the goal is a pass
// of 16 within 3 passes of 1; docs/design.md §3.1).
void BM_ResidentVerifyPass(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const int n = static_cast<int>(state.range(0));
  // The packed products' layout (kernels::PackedLayout: 0 auto, 1 rows, 2 tiles), before any graph is
  // captured; the same bits under each, so only the time may differ.
  const auto layout = static_cast<kernels::PackedLayout>(state.range(1));
  struct LayoutScope {  // the process default again however the benchmark ends
    explicit LayoutScope(kernels::PackedLayout l) { kernels::SetPackedLayout(l); }
    ~LayoutScope() { kernels::SetPackedLayout(kernels::PackedLayout::kAuto); }
  } layout_scope(layout);
  state.SetLabel(kernels::PackedLayoutName(layout));
  auto made = MakeStreamed(0, false);
  if (!made.ok()) return state.SkipWithError(std::string(made.status().message()).c_str());
  Streamed& s = **made;
  auto fail = [&](const absl::Status& st) { state.SkipWithError(std::string(st.message()).c_str()); };
  VerifyPasses passes_of_n(s, n);
  if (absl::Status st = passes_of_n.Prompt(); !st.ok()) return fail(st);
  auto pass = [&] { return passes_of_n.Next(false); };
  for (int i = 0; i < 3; ++i) {
    if (auto r = pass(); !r.ok()) return fail(r.status());
  }
  if (!s.graphed->fallback_reason().empty()) return state.SkipWithError(s.graphed->fallback_reason().c_str());
  // SPECGEN_PROFILE_PASS=1: one pass between cudaProfilerStart and Stop, so a profiler started with
  // its capture off (ncu --profile-from-start off) sees one pass's kernels and nothing of the setup.
  if (const char* p = std::getenv("SPECGEN_PROFILE_PASS"); p != nullptr && *p == '1') {
    cudaProfilerStart();
    const auto r = pass();
    cudaProfilerStop();
    if (!r.ok()) return fail(r.status());
  }
  double seconds = 0;
  int64_t passes = 0;
  for (auto _ : state) {
    for (int r = 0; r < 8; ++r) {
      auto sec = pass();
      if (!sec.ok()) return fail(sec.status());
      seconds += *sec;
      ++passes;
    }
  }
  const double sec = seconds / passes;
  state.counters["ms_per_pass"] = sec * 1e3;
  state.counters["tokens_per_s_at_n1"] = n == 1 ? 1.0 / sec : 0.0;
}
BENCHMARK(BM_ResidentVerifyPass)
    ->ArgNames({"n", "layout"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int layout : {0, 2}) {
        for (int n : {1, 2, 3, 5, 9, 16}) b->Args({n, layout});
      }
    })
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

void BM_StreamedGeneration(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const size_t budget = static_cast<size_t>(state.range(0)) << 30;
  const int k = static_cast<int>(state.range(1));
  const bench::RoutingRegime regime = Regime(state.range(2));
  auto made = MakeStreamed(budget, k > 0);
  if (!made.ok()) return state.SkipWithError(std::string(made.status().message()).c_str());
  Streamed& s = **made;
  Transformer& lm = *s.lm;
  auto fail = [&](const absl::Status& st) { state.SkipWithError(std::string(st.message()).c_str()); };
  state.SetLabel(std::string(bench::RoutingRegimeName(regime)));
  SpeculativeOptions opt;
  opt.draft_max = k;
  opt.adaptive = k > 0;  // as generate's default: k is the controller's bound
  opt.max_new_tokens = 128;
  opt.sampling = SamplingParams::Greedy();
  auto dec = DeviceSpeculativeDecoder::Create(s.backend.get(), &lm, k > 0 ? s.draft.get() : nullptr, opt);
  if (!dec.ok()) return fail(dec.status());
  const int64_t vocab = lm.vocab_size();
  uint64_t seed = 0;
  // One generation under the regime's trace of a new seed; its tokens, seconds and the cache's counters.
  SpeculativeStats totals;  // the generations' stats (SpeculativeStats::operator+=)
  auto generate = [&]() -> absl::Status {
    RETURN_IF_ERROR(UseRegime(lm, regime, seed));
    std::vector<int32_t> prompt(kPrompt);
    for (int i = 0; i < kPrompt; ++i) prompt[i] = static_cast<int32_t>(((seed + 1) * 7919 * (i + 1) + 11) % vocab);
    ++seed;
    RETURN_IF_ERROR((*dec)->Generate(prompt).status());
    totals += (*dec)->stats();
    return absl::OkStatus();
  };
  // Untimed: the graphs' captures and the kernels' first loads.
  if (absl::Status st = generate(); !st.ok()) return fail(st);
  totals = SpeculativeStats();
  // The cache's counters: the decode and verification passes (the prompt is routed on the host, its
  // experts staged, and not counted per token).
  int64_t fetched = 0, hits = 0, lookups = 0;
  for (auto _ : state) {
    auto before = lm.expert_stream_stats();
    if (!before.ok()) return fail(before.status());
    if (absl::Status st = generate(); !st.ok()) return fail(st);
    auto after = lm.expert_stream_stats();
    if (!after.ok()) return fail(after.status());
    fetched += after->fetched_bytes - before->fetched_bytes;
    hits += after->hits - before->hits;
    lookups += after->hits - before->hits + after->misses - before->misses;
  }
  const SpeculativeStats& t = totals;
  state.counters["slots"] = static_cast<double>(s.slots);
  state.counters["tokens_per_s"] = t.total_seconds > 0 ? t.tokens / t.total_seconds : 0.0;
  state.counters["mb_per_token"] = t.tokens ? double(fetched) / t.tokens / 1e6 : 0.0;
  state.counters["hit_rate"] = lookups ? double(hits) / lookups : 0.0;
  state.counters["distinct_experts"] = t.passes ? double(lookups) / t.passes / static_cast<double>(s.moe_layers) : 0.0;
  state.counters["acceptance"] = t.drafted ? double(t.accepted) / t.drafted : 0.0;
  state.counters["tau"] = t.passes ? double(t.tokens) / t.passes : 0.0;
  state.counters["gb_per_s"] = t.total_seconds > 0 ? fetched / t.total_seconds / 1e9 : 0.0;
}
// Budget by budget, and within one with and without the draft (each pair its own plan and copy).
BENCHMARK(BM_StreamedGeneration)
    ->ArgNames({"budget_gib", "k", "routing"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int budget : {4, 8, 16}) {
        for (int k : {0, 4}) {
          for (int routing : {0, 1, 2}) b->Args({budget, k, routing});
        }
      }
    })
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

}  // namespace
}  // namespace specgen::e2e
