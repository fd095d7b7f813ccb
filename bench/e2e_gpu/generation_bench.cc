// Speculative generation through the GPU-resident loop, end to end (docs/design.md §3, §6.1):
//  - BM_SpeculativeGeneration: the bundled pair (models/tiny-target + tiny-draft) through the
//    GPU-resident speculative loop, 128 new tokens from each of its 25 held-out prompts: tokens/s with draft length k (k = 0: the target alone through the
//    same loop; adaptive: the controller bounded by k; graph_verify 0 (DeviceLoopHooks): the target's passes launched
//    op by op), acceptance rate, τ, drafts a step, the step's host phases, host syncs
//    per step (result copies + other waits; should be 1)
//    and MoE expert-union reads per step (allowed, docs/design.md §6.2).
//  - BM_SpeculativeSynthPair: a Qwen3-sized pair (synth qwen3-0.6b draft, qwen3-1.7b target, random
//    weights) through the same loop: what a step costs at a 151936-token vocabulary.
// Skips (with an error message) without a device or without the bundled pair.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/e2e_gpu/bench_models.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "engine/speculative/device_speculative_decoder.h"
#include "nlohmann/json.hpp"

namespace specgen::e2e {
namespace {

// Generates from prompts[0], [1], .. (round robin) once per benchmark iteration with `dec` and sets
// the loop's counters: tokens/s, acceptance, tau, host syncs and expert-union reads per step, ms per
// step, and (with a draft) which draft decode path ran.
void MeasureGeneration(benchmark::State& state, DeviceSpeculativeDecoder* dec,
                       const std::vector<std::vector<int32_t>>& prompts, bool has_draft) {
  SpeculativeStats sum;  // the generations' stats (SpeculativeStats::operator+=)
  int64_t steps = 0, result_syncs = 0, other = 0, unions = 0;
  // One generation untimed: the first use of each kernel loads its module (CUDA's lazy loading) and
  // the first pass of each size captures its graph; both cost many steps' time and would land on
  // whichever variant runs first in the process.
  if (auto warm = dec->Generate(prompts[0]); !warm.ok()) return state.SkipWithError(std::string(warm.status().message()).c_str());
  size_t i = 0;
  for (auto _ : state) {
    auto out = dec->Generate(prompts[i++ % prompts.size()]);
    if (!out.ok()) return state.SkipWithError(std::string(out.status().message()).c_str());
    const StepSyncStats& y = dec->syncs();
    sum += dec->stats();
    steps += y.steps;
    result_syncs += y.step_result;
    other += y.other;
    unions += y.expert_union;
  }
  const int64_t tokens = sum.tokens, drafted = sum.drafted, accepted = sum.accepted;
  const double seconds = sum.total_seconds, draft_s = sum.draft_seconds, verify_s = sum.verify_seconds,
               accept_s = sum.accept_seconds;
  state.counters["tokens_per_s"] = tokens / seconds;
  state.counters["acceptance"] = drafted ? double(accepted) / drafted : 0.0;
  state.counters["tau"] = steps ? double(tokens) / steps : 0.0;
  state.counters["mean_k"] = steps ? double(drafted) / steps : 0.0;  // drafts a step (adaptive: its choice)
  state.counters["syncs_per_step"] = steps ? double(result_syncs + other) / steps : 0.0;
  state.counters["union_reads_per_step"] = steps ? double(unions) / steps : 0.0;
  state.counters["ms_per_step"] = steps ? seconds * 1e3 / steps : 0.0;
  // The step's phases on the host (the loop's Stats): drafting and verification queue work; the accept
  // phase holds the step's one wait, for all the device's work.
  state.counters["us_draft_host"] = steps ? draft_s * 1e6 / steps : 0.0;
  state.counters["us_verify_host"] = steps ? verify_s * 1e6 / steps : 0.0;
  state.counters["us_accept_wait"] = steps ? accept_s * 1e6 / steps : 0.0;
  const DraftDecodeStats d = dec->draft_decode_stats();
  state.counters["draft_graph_replays"] = static_cast<double>(d.graph_replays);
  state.counters["draft_overlapped"] = static_cast<double>(d.overlapped);
  state.counters["draft_run_ahead"] = static_cast<double>(d.run_ahead);
  state.counters["draft_run_ahead_used"] = static_cast<double>(d.run_ahead_used);
  state.counters["draft_run_ahead_late"] = static_cast<double>(d.run_ahead_late);
  state.counters["draft_run_ahead_drafted"] = static_cast<double>(d.run_ahead_drafted);
  state.counters["draft_run_ahead_drafts_used"] = static_cast<double>(d.run_ahead_drafts_used);
  const VerifyPassStats v = dec->verify_pass_stats();
  state.counters["verify_graph_replays"] = static_cast<double>(v.graph_replays);
  state.counters["verify_eager"] = static_cast<double>(v.eager_passes);
  state.counters["verify_captures"] = static_cast<double>(v.captures);
  std::string label;
  if (has_draft) {
    label = std::string("draft ") + DraftDecodePathName(d.path) + (d.why_not_graph.empty() ? "" : ": " + d.why_not_graph);
  }
  if (!v.why_not_graph.empty()) label += (label.empty() ? "" : "; ") + std::string("verify eager: ") + v.why_not_graph;
  if (!label.empty()) state.SetLabel(label);
}

// The benchmarks' `overlap` argument: 0 every draft decode on the backend's stream, 1 the last draft
// beside the verification (DeviceDraftHooks::overlap_last_draft), 2 that, the guess of the bonus token
// and the next step's drafts run ahead after it (run_ahead kAuto, the whole run while most guesses
// hit: the defaults), 3 the guess and the whole run in every step (kAlways); 4 and 5 as 2 and 3 with
// the guess alone (run_ahead_drafts 0), to compare the run ahead with.
void SetOverlap(DeviceLoopHooks& hooks, int64_t overlap) {
  hooks.draft.overlap_last_draft = overlap >= 1;
  hooks.draft.run_ahead = overlap == 2 || overlap == 4   ? RunAhead::kAuto
                          : overlap == 3 || overlap == 5 ? RunAhead::kAlways
                                                         : RunAhead::kOff;
  hooks.draft.run_ahead_drafts = overlap >= 4 ? 0 : -1;
}

// args: k (0: the target alone), greedy (else T = 0.8 rejection), overlap (SetOverlap).
void BM_SpeculativeGeneration(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const auto models = SourceDir() / "models";
  if (!std::filesystem::exists(models / "tiny-target")) return state.SkipWithError("no bundled pair");
  CudaBackendOptions o;
  o.gemv_order = kernels::GemvOrder::kFma;  // the order this benchmark's recorded rows measure
  o.arena_bytes = size_t{1} << 30;
  auto be = CudaBackend::Create(o);
  if (!be.ok()) return state.SkipWithError(std::string(be.status().message()).c_str());
  auto load = [&](const std::string& name) -> std::unique_ptr<Transformer> {
    auto m = LoadModel((models / name).string());
    if (!m.ok()) return nullptr;
    TransformerOptions topt;
    topt.max_context = 512;
    auto lm = Transformer::Create(std::shared_ptr<const LoadedModel>(std::move(m).value()), be->get(), topt);
    return lm.ok() ? std::move(lm).value() : nullptr;
  };
  auto target = load("tiny-target");
  auto draft = load("tiny-draft");
  if (!target || !draft) return state.SkipWithError("cannot load the bundled pair");
  const auto json = nlohmann::json::parse(std::ifstream(models / "pair_prompts.json"));
  const auto prompts = json.at("prompts").get<std::vector<std::vector<int32_t>>>();
  const int k = static_cast<int>(state.range(0));
  const bool greedy = state.range(1) != 0;
  SpeculativeOptions opt;
  opt.draft_max = k;
  opt.max_new_tokens = 128;
  opt.sampling = greedy ? SamplingParams::Greedy() : SamplingParams::Plain(0.8f, 1);
  opt.accept = AcceptMode::kRejection;
  opt.adaptive = state.range(3) != 0;  // k is then the controller's bound (--draft-adaptive)
  DeviceLoopHooks hooks;
  SetOverlap(hooks, state.range(2));
  hooks.graph_verify = state.range(4) != 0;
  auto dec = DeviceSpeculativeDecoder::Create(be->get(), target.get(), k > 0 ? draft.get() : nullptr, opt, hooks);
  if (!dec.ok()) return state.SkipWithError(std::string(dec.status().message()).c_str());
  MeasureGeneration(state, dec->get(), prompts, k > 0);
}
BENCHMARK(BM_SpeculativeGeneration)
    ->ArgNames({"k", "greedy", "overlap", "adaptive", "graph_verify"})
    ->Args({0, 1, 2, 0, 1})->Args({2, 1, 2, 0, 1})->Args({4, 1, 2, 0, 1})->Args({6, 1, 2, 0, 1})->Args({0, 0, 2, 0, 1})
    ->Args({2, 0, 2, 0, 1})->Args({4, 0, 2, 0, 1})->Args({3, 1, 2, 0, 1})->Args({3, 0, 2, 0, 1})->Args({6, 0, 2, 0, 1})
    ->Args({2, 1, 0, 0, 1})->Args({4, 1, 0, 0, 1})->Args({4, 0, 0, 0, 1})->Args({2, 1, 1, 0, 1})->Args({4, 1, 1, 0, 1})
    ->Args({4, 0, 1, 0, 1})->Args({2, 1, 3, 0, 1})->Args({4, 1, 3, 0, 1})->Args({4, 0, 3, 0, 1})
    // The guess alone (overlap 4, 5) against the whole run after it (2, 3, above).
    ->Args({2, 1, 4, 0, 1})->Args({4, 1, 4, 0, 1})->Args({4, 0, 4, 0, 1})->Args({4, 1, 5, 0, 1})
    ->Args({4, 0, 5, 0, 1})->Args({8, 1, 4, 1, 1})
    // The adaptive controller bounded by k (the CLI's --draft-adaptive): where it lands against the
    // fixed lengths above.
    ->Args({4, 1, 2, 1, 1})->Args({8, 1, 2, 1, 1})->Args({4, 0, 2, 1, 1})->Args({8, 0, 2, 1, 1})
        // The target's passes launched eagerly (graph_verify off): what the graphs are worth.
    ->Args({0, 1, 2, 0, 0})->Args({2, 1, 2, 0, 0})->Args({4, 1, 2, 0, 0})->Args({2, 0, 2, 0, 0})
    ->Args({4, 1, 2, 1, 0})
    // One generation a held-out prompt, all 25 of models/pair_prompts.json (the set models/README.md's
    // PyTorch and CPU acceptance figures are measured on): a few prompts alone accept a very different
    // share of their drafts, so only the whole set compares with those figures.
->Unit(benchmark::kMillisecond)->Iterations(25);

// A Qwen3-sized pair through the GPU-resident loop: draft synth:qwen3-0.6b, target synth:qwen3-1.7b
// (bf16, 151936-token vocabulary), 64 new tokens after a 32-token prompt. ms_per_step is what the loop
// costs per step at real sizes (args: k, 0 = the target alone; sampling 0 greedy, 1 the CLI's defaults,
// 2 temperature 1 alone (vLLM's defaults: the temperature-only split path); rejection acceptance;
// order: CudaBackendOptions::gemv_order, 0 FMA, 1 tensor cores; overlap: SetOverlap).
// Their random weights give both models the same token (every draft is accepted): this measures
// cost, not acceptance.
void BM_SpeculativeSynthPair(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  auto make = [](const char* name, CudaBackend* be) -> absl::StatusOr<std::unique_ptr<Transformer>> {
    ASSIGN_OR_RETURN(const ModelSpec spec, SynthSpec(name));
    ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> weights, SynthWeights(spec, DType::kBF16, 1));
    TransformerOptions topt;
    topt.max_context = 512;
    return Transformer::Create(std::shared_ptr<const LoadedModel>(std::move(weights)), be, topt);
  };
  CudaBackendOptions o;
  o.arena_bytes = size_t{8} << 30;
  o.gemv_order = state.range(2) != 0 ? kernels::GemvOrder::kTensorCores : kernels::GemvOrder::kFma;
  auto be = CudaBackend::Create(o);
  if (!be.ok()) return state.SkipWithError(std::string(be.status().message()).c_str());
  auto target = make("qwen3-1.7b", be->get());
  auto draft = make("qwen3-0.6b", be->get());
  if (!target.ok() || !draft.ok()) return state.SkipWithError("cannot make the synthetic pair");
  const int k = static_cast<int>(state.range(0));
  SpeculativeOptions opt;
  opt.draft_max = k;
  opt.max_new_tokens = 64;
  DeviceLoopHooks hooks;
  SetOverlap(hooks, state.range(3));
  opt.adaptive = state.range(4) != 0;  // k is then the controller's bound (--draft-adaptive)
  hooks.graph_verify = state.range(5) != 0;
  opt.sampling = SamplingParams::Greedy();
  if (state.range(1) == 1) {  // the CLI's sampling defaults (T 0.8, top-k 40, top-p 0.95, min-p 0.05)
    opt.sampling = SamplingParams();
    opt.sampling.temperature = 0.8f;
  } else if (state.range(1) == 2) {
    opt.sampling = SamplingParams::Plain(1.0f, 1);
  }
  auto dec = DeviceSpeculativeDecoder::Create(be->get(), target->get(), k > 0 ? draft->get() : nullptr, opt, hooks);
  if (!dec.ok()) return state.SkipWithError(std::string(dec.status().message()).c_str());
  std::vector<int32_t> prompt(32);
  for (int i = 0; i < 32; ++i) prompt[i] = (i * 7919 + 11) % 151936;
  MeasureGeneration(state, dec->get(), {prompt}, k > 0);
}
BENCHMARK(BM_SpeculativeSynthPair)
    ->ArgNames({"k", "sampling", "order", "overlap", "adaptive", "graph_verify"})
    ->Args({0, 0, 0, 2, 0, 1})->Args({4, 0, 0, 2, 0, 1})->Args({0, 1, 0, 2, 0, 1})->Args({4, 1, 0, 2, 0, 1})
    ->Args({0, 2, 0, 2, 0, 1})->Args({4, 2, 0, 2, 0, 1})->Args({8, 0, 0, 2, 0, 1})->Args({15, 0, 0, 2, 0, 1})
    ->Args({0, 0, 1, 2, 0, 1})->Args({4, 0, 1, 2, 0, 1})->Args({8, 0, 1, 2, 0, 1})->Args({15, 0, 1, 2, 0, 1})
    ->Args({4, 1, 1, 2, 0, 1})
    ->Args({4, 0, 0, 0, 0, 1})->Args({8, 0, 0, 0, 0, 1})->Args({4, 1, 0, 0, 0, 1})->Args({4, 0, 1, 0, 0, 1})
    ->Args({4, 0, 0, 1, 0, 1})->Args({8, 0, 0, 1, 0, 1})->Args({4, 1, 0, 1, 0, 1})->Args({4, 0, 1, 1, 0, 1})
    ->Args({4, 0, 0, 3, 0, 1})->Args({8, 0, 0, 3, 0, 1})
    // The guess alone (overlap 4, 5) against the whole run after it (2, 3): every draft accepted here,
    // so the run ahead is used wherever the guess is the bonus.
    ->Args({4, 0, 0, 4, 0, 1})->Args({8, 0, 0, 4, 0, 1})->Args({8, 0, 0, 5, 0, 1})->Args({4, 1, 0, 4, 0, 1})
    // The adaptive controller bounded by k (acceptance 1.0 here: the longest draft is the best).
    ->Args({8, 0, 1, 2, 1, 1})->Args({15, 0, 1, 2, 1, 1})
        // The target's passes launched eagerly (graph_verify off).
    ->Args({0, 0, 1, 2, 0, 0})->Args({4, 0, 1, 2, 0, 0})->Args({15, 0, 1, 2, 0, 0})
->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace specgen::e2e
