// End-to-end GPU benchmarks (DESIGN §3, §7), each figure next to its floor:
//  - BM_DraftDecode: single-token decode of synth:qwen3-0.6b in bf16 on the CudaBackend; time per
//    token (CUDA events over 64 tokens, no host wait between tokens) against the floor of the bytes a
//    token reads (every weight once; the tied embedding is read whole by the head) / 4.2 TB/s HBM.
//    path: 0 Transformer::ForwardResident (Backend ops), 1 GraphedDraft's fused kernels launched
//    eagerly, 2 the same replayed from the captured CUDA graph (the speculative loop's default); the
//    label names the path that actually ran (a failed capture falls back to 1 and says why).
//  - BM_SpeculativeGeneration: the bundled pair (models/tiny-target + tiny-draft) through the
//    GPU-resident speculative loop: tokens/s with draft length k (k = 0: the target alone through the
//    same loop), acceptance rate, τ, host syncs per step (result copies + other waits; should be 1)
//    and MoE expert-union reads per step (allowed, DESIGN §6 a).
// Skips (with an error message) without a device or without the pair.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "engine/speculative/device_speculative_decoder.h"
#include "engine/speculative/graphed_draft.h"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

constexpr double kHbmBytesPerSecond = 4.2e12;  // DESIGN §2, measured device-to-device

std::filesystem::path SourceDir() {
  if (const char* env = std::getenv("SPECGEN_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  if (std::filesystem::exists("models")) return std::filesystem::current_path();
  return SPECGEN_SOURCE_DIR;
}

void BM_DraftDecode(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  auto spec = SynthSpec("qwen3-0.6b");
  if (!spec.ok()) return state.SkipWithError(std::string(spec.status().message()).c_str());
  auto weights = SynthWeights(*spec, DType::kBF16, 1);
  if (!weights.ok()) return state.SkipWithError(std::string(weights.status().message()).c_str());
  std::shared_ptr<const LoadedModel> model = std::move(weights).value();
  CudaBackendOptions o;
  o.arena_bytes = size_t{4} << 30;
  auto be = CudaBackend::Create(o);
  if (!be.ok()) return state.SkipWithError(std::string(be.status().message()).c_str());
  TransformerOptions topt;
  topt.max_context = 2048;
  auto lm = Transformer::Create(model, be->get(), topt);
  if (!lm.ok()) return state.SkipWithError(std::string(lm.status().message()).c_str());
  auto bytes = SynthBytes(*spec, DType::kBF16);
  const double table = double(spec->vocab_size) * spec->hidden * 2;
  const double read_bytes = double(*bytes) - (spec->tied_embeddings ? 0.0 : table - spec->hidden * 2);
  const int context = static_cast<int>(state.range(0));
  const auto path = static_cast<DraftDecodePath>(state.range(1));
  std::unique_ptr<GraphedDraft> graphed;
  if (path != DraftDecodePath::kTransformer) {
    auto g = GraphedDraft::Create(be->get(), lm->get(), path == DraftDecodePath::kGraph);
    if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
    graphed = std::move(g).value();
  }
  std::vector<int32_t> prompt(context);
  for (int i = 0; i < context; ++i) prompt[i] = (i * 7919) % static_cast<int>(spec->vocab_size);
  constexpr int kTokens = 64;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  double total_ms = 0;
  int64_t tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    (void)(*lm)->Truncate(0);
    std::vector<int32_t> pos(context);
    for (int i = 0; i < context; ++i) pos[i] = i;
    (void)(*lm)->ForwardResident(prompt, pos, {});
    (void)(*be)->Synchronize(SyncKind::kOther);
    state.ResumeTiming();
    cudaEventRecord(start, (*be)->stream());
    for (int t = 0; t < kTokens; ++t) {
      const int32_t tok = (t * 31) % 1000, p = context + t;
      absl::Status st;
      if (graphed != nullptr) {
        st = graphed->Decode(nullptr, tok).status();
      } else {
        st = (*lm)->ForwardResident({&tok, 1}, {&p, 1}, {}).status();
      }
      if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
    }
    cudaEventRecord(stop, (*be)->stream());
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    total_ms += ms;
    tokens += kTokens;
  }
  const double us_per_token = total_ms * 1e3 / tokens;
  const double floor_us = read_bytes / kHbmBytesPerSecond * 1e6;
  state.counters["us_per_token"] = us_per_token;
  state.counters["floor_us"] = floor_us;
  state.counters["hbm_fraction"] = floor_us / us_per_token;  // target >= 0.6
  state.counters["GB_per_s"] = read_bytes / (us_per_token * 1e3);
  state.counters["weight_GB"] = read_bytes / 1e9;
  state.counters["tokens_per_s"] = 1e6 / us_per_token;
  state.counters["graph_replays"] = graphed ? static_cast<double>(graphed->graph_replays()) : 0.0;
  std::string label = graphed ? DraftDecodePathName(graphed->path()) : "transformer";
  if (graphed && !graphed->fallback_reason().empty()) label += " (capture failed: " + graphed->fallback_reason() + ")";
  state.SetLabel(label);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}
BENCHMARK(BM_DraftDecode)
    ->ArgNames({"ctx", "path"})
    ->Args({32, 0})->Args({32, 1})->Args({32, 2})->Args({512, 2})->Args({1900, 2})
    ->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_SpeculativeGeneration(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const auto models = SourceDir() / "models";
  if (!std::filesystem::exists(models / "tiny-target")) return state.SkipWithError("no bundled pair");
  CudaBackendOptions o;
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
  auto dec = DeviceSpeculativeDecoder::Create(be->get(), target.get(), k > 0 ? draft.get() : nullptr, opt);
  if (!dec.ok()) return state.SkipWithError(std::string(dec.status().message()).c_str());
  int64_t tokens = 0, steps = 0, drafted = 0, accepted = 0, result_syncs = 0, other = 0, unions = 0;
  double seconds = 0;
  size_t i = 0;
  for (auto _ : state) {
    auto out = (*dec)->Generate(prompts[i++ % prompts.size()]);
    if (!out.ok()) return state.SkipWithError(std::string(out.status().message()).c_str());
    const SpeculativeStats& s = (*dec)->stats();
    const StepSyncStats& y = (*dec)->syncs();
    tokens += s.tokens;
    seconds += s.total_seconds;
    drafted += s.drafted;
    accepted += s.accepted;
    steps += y.steps;
    result_syncs += y.step_result;
    other += y.other;
    unions += y.expert_union;
  }
  state.counters["tokens_per_s"] = tokens / seconds;
  state.counters["acceptance"] = drafted ? double(accepted) / drafted : 0.0;
  state.counters["tau"] = steps ? double(tokens) / steps : 0.0;
  state.counters["syncs_per_step"] = steps ? double(result_syncs + other) / steps : 0.0;
  state.counters["union_reads_per_step"] = steps ? double(unions) / steps : 0.0;
  state.counters["ms_per_step"] = steps ? seconds * 1e3 / steps : 0.0;
  const DraftDecodeStats d = (*dec)->draft_decode_stats();
  state.counters["draft_graph_replays"] = static_cast<double>(d.graph_replays);
  if (k > 0) {
    state.SetLabel(std::string("draft ") + DraftDecodePathName(d.path) +
                   (d.why_not_graph.empty() ? "" : ": " + d.why_not_graph));
  }
}
BENCHMARK(BM_SpeculativeGeneration)
    ->ArgNames({"k", "greedy"})
    ->Args({0, 1})->Args({2, 1})->Args({4, 1})->Args({6, 1})->Args({0, 0})->Args({4, 0})
    ->Unit(benchmark::kMillisecond)->Iterations(4);

}  // namespace
}  // namespace specgen

BENCHMARK_MAIN();
