// End-to-end GPU benchmarks (DESIGN §3, §7), each figure next to its floor:
//  - BM_DraftDecode: single-token decode of synth:qwen3-0.6b in bf16 on the CudaBackend; time per
//    token (CUDA events over 64 tokens, no host wait between tokens) against the floor of the bytes a
//    token reads (every weight once; the tied embedding is read whole by the head) / 4.2 TB/s HBM.
//    path: 0 Transformer::ForwardResident (Backend ops), 1 GraphedDraft's fused kernels launched
//    eagerly, 2 the same replayed from the captured CUDA graph (the speculative loop's default), 3 the
//    persistent kernel (one cooperative launch per token); the label names the path that actually
//    ran (a fallback says why). narrow 1: the same chain of kernels on shrunk matrices (see
//    MakeQwenDraft): the floor the chain sets by itself; narrow 2: the full matrices, every layer on
//    layer 0's (GraphedDraft::ShareLayerWeightsForBenchmark: L2-resident): the decode without HBM.
//    grid: the fused GEMVs' blocks per multiprocessor.
//    pdl 0: paths 1-2 without programmatic dependent launch (what PDL is worth). qkv_rows, gu_rows > 0:
//    one GEMV shape (GraphedDraft::SetGemvRowsPerWarp) at every position instead of the draft's choice.
//  - BM_DraftDecodeQwen3_1_7B: the graph path on synth:qwen3-1.7b (4x the bytes a layer, the same chain).
//  - BM_DraftLayerKernels: each fused kernel of one decode layer of the same model timed alone with
//    CUDA events (no ncu needed): rounds of 28 back-to-back launches, one per layer (so the weights
//    come from HBM, not L2); us per launch (us_*) and the fraction of 4.2 TB/s for the bytes it must
//    read (hbm_*), at context 32 (and the attention at 1900), plus their sum over one layer.
//  - BM_DecodeTimeline: one graph-replayed token from the kernels' own global-timer stamps
//    (kernels::SetDecodeProbe): per kernel kind, the window before its input existed, the kernel
//    boundary before it (from the previous grid's end), the input staging, the rest and the blocks that
//    finish after block 0; and the time between two tokens that no decode kernel covers.
//  - BM_KernelChainFloor: a graph of 140 dependent kernels doing nothing or a GEMV prologue's read +
//    reduction, with and without PDL: what a kernel boundary costs before any weight is read; work 2
//    and 3 add 1024 FMAs a thread as straight code in 8 alternating kernels or as a loop: what
//    fetching a kernel's instructions costs; work 4 hands each link on through a counter in L2 instead
//    of the grid boundary (bench/e2e_gpu/kernel_chain.cu).
//  - BM_KernelChainUnderLoad: that chain while other blocks stream HBM on another stream: what HBM
//    traffic that is not the chain's does to its L2 round trips.
//  - BM_PersistentPhases: where the persistent kernel's token goes, phase by phase (global-timer stamps
//    written by the kernel itself), with its L2 prefetch off and on.
//  - BM_TargetPass: one Transformer pass of n tokens (a verification, or the target alone) launched
//    op by op or replayed from a CUDA graph (graph 1, the loop's default; 2: at alternating lengths),
//    against its weights' HBM floor, and the host's time to queue it. BM_HostLaunchCost: what queuing
//    one kernel costs the host.
//  - BM_BundledDraftDecode: the bundled draft's single-token decode by path: what a proposal costs
//    against the bundled target's pass.
//  - BM_SpeculativeSynthPair: a Qwen3-sized pair (synth qwen3-0.6b draft, qwen3-1.7b target, random
//    weights) through the same loop: what a step costs at a 151936-token vocabulary.
//  - BM_SpeculativeGeneration: the bundled pair (models/tiny-target + tiny-draft) through the
//    GPU-resident speculative loop: tokens/s with draft length k (k = 0: the target alone through the
//    same loop; adaptive: the controller bounded by k; graph_verify 0: the target's passes launched
//    op by op), acceptance rate, τ, drafts a step, the step's host phases, host syncs
//    per step (result copies + other waits; should be 1)
//    and MoE expert-union reads per step (allowed, DESIGN §6 a).
// Skips (with an error message) without a device or without the pair.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/e2e_gpu/kernel_chain.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "engine/speculative/device_speculative_decoder.h"
#include "engine/speculative/graphed_target_pass.h"
#include "engine/speculative/graphed_draft.h"
#include "kernels/attention.cuh"
#include "kernels/decode_fused.cuh"
#include "kernels/persistent_decode.cuh"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

constexpr double kHbmBytesPerSecond = 4.2e12;  // DESIGN §2, measured device-to-device

std::filesystem::path SourceDir() {
  if (const char* env = std::getenv("SPECGEN_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  if (std::filesystem::exists("models")) return std::filesystem::current_path();
  return SPECGEN_SOURCE_DIR;
}

// synth:qwen3-0.6b in bf16 (or the synth model `name`), resident on a fresh CudaBackend (an arena of
// its weights + 2 GiB) with a 2048-slot cache: the model every draft-decode benchmark here measures.
// `narrow`: the same 28 layers and kernels with every matrix shrunk (2 query heads, 1 kv head, FFN
// 256, vocabulary 4096; 0.9 MB a layer), so that a token's time is what the chain of kernels costs by
// itself, whatever the weight bytes.
struct QwenDraft {
  ModelSpec spec;
  std::unique_ptr<CudaBackend> backend;
  std::unique_ptr<Transformer> lm;
};
absl::StatusOr<std::unique_ptr<QwenDraft>> MakeQwenDraft(bool narrow, const std::string& name = "qwen3-0.6b") {
  auto d = std::make_unique<QwenDraft>();
  ASSIGN_OR_RETURN(d->spec, SynthSpec(name));
  if (narrow) {
    d->spec.n_heads = 2;
    d->spec.n_kv_heads = 1;
    d->spec.ffn_dim = 256;
    d->spec.vocab_size = 4096;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> weights, SynthWeights(d->spec, DType::kBF16, 1));
  ASSIGN_OR_RETURN(const size_t weight_bytes, SynthBytes(d->spec, DType::kBF16));
  CudaBackendOptions o;
  o.arena_bytes = std::max(size_t{4} << 30, weight_bytes + (size_t{2} << 30));
  ASSIGN_OR_RETURN(d->backend, CudaBackend::Create(o));
  TransformerOptions topt;
  topt.max_context = 2048;
  ASSIGN_OR_RETURN(d->lm, Transformer::Create(std::shared_ptr<const LoadedModel>(std::move(weights)),
                                              d->backend.get(), topt));
  return d;
}
// The same, or null with the benchmark marked skipped (no device, or a failure).
std::unique_ptr<QwenDraft> QwenDraftOrSkip(benchmark::State& state, bool narrow = false,
                                           const std::string& name = "qwen3-0.6b") {
  if (!CudaBackend::DeviceAvailable()) {
    state.SkipWithError("no CUDA device");
    return nullptr;
  }
  auto d = MakeQwenDraft(narrow, name);
  if (!d.ok()) {
    state.SkipWithError(std::string(d.status().message()).c_str());
    return nullptr;
  }
  return std::move(d).value();
}

// One draft-decode measurement: 64 tokens decoded from a context of `context`, by `path`
// (args as BM_DraftDecode's: pdl, grid, qkv_rows / gu_rows, narrow 2 = layer 0's weights throughout).
void DraftDecode(benchmark::State& state, QwenDraft* draft, int context, DraftDecodePath path, bool pdl,
                 int grid, int qkv_rows, int gu_rows, bool share_layer_weights) {
  const ModelSpec* spec = &draft->spec;
  std::unique_ptr<CudaBackend>* be = &draft->backend;  // (*be)-> / (*lm)-> as for StatusOr results
  std::unique_ptr<Transformer>* lm = &draft->lm;
  auto bytes = SynthBytes(*spec, DType::kBF16);
  const double table = double(spec->vocab_size) * spec->hidden * 2;
  const double read_bytes = double(*bytes) - (spec->tied_embeddings ? 0.0 : table - spec->hidden * 2);
  std::unique_ptr<GraphedDraft> graphed;
  if (path != DraftDecodePath::kTransformer) {
    auto g = GraphedDraft::Create(be->get(), lm->get(), path);
    if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
    graphed = std::move(g).value();
    if (!pdl) graphed->DisableProgrammaticLaunch();
    if (grid != 8) graphed->SetGemvBlocksPerSm(grid);
    if (qkv_rows > 0) graphed->SetGemvRowsPerWarp(qkv_rows, gu_rows);
    if (share_layer_weights) graphed->ShareLayerWeightsForBenchmark();
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
  if (graphed && graphed->path() != DraftDecodePath::kPersistent) {
    label += graphed->programmatic() ? ", PDL" : ", no PDL";
    label += ", GEMV grid " + std::to_string(grid) + "/SM";
    if (qkv_rows > 0) {
      label += ", rows a warp QKV " + std::to_string(qkv_rows) + " gate/up " + std::to_string(gu_rows);
    }
  }
  if (graphed && !graphed->fallback_reason().empty()) label += " (fallback: " + graphed->fallback_reason() + ")";
  state.SetLabel(label);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

void BM_DraftDecode(benchmark::State& state) {
  auto draft = QwenDraftOrSkip(state, state.range(2) == 1);
  if (draft == nullptr) return;
  DraftDecode(state, draft.get(), static_cast<int>(state.range(0)), static_cast<DraftDecodePath>(state.range(1)),
              state.range(3) != 0, static_cast<int>(state.range(4)), static_cast<int>(state.range(5)),
              static_cast<int>(state.range(6)), state.range(2) == 2);
}
BENCHMARK(BM_DraftDecode)
    ->ArgNames({"ctx", "path", "narrow", "pdl", "grid", "qkv_rows", "gu_rows"})
    ->Args({32, 0, 0, 1, 8, 0, 0})->Args({32, 1, 0, 1, 8, 0, 0})->Args({32, 2, 0, 1, 8, 0, 0})
    ->Args({128, 2, 0, 1, 8, 0, 0})->Args({256, 2, 0, 1, 8, 0, 0})->Args({512, 2, 0, 1, 8, 0, 0})
    ->Args({1900, 2, 0, 1, 8, 0, 0})->Args({32, 3, 0, 1, 8, 0, 0})->Args({512, 3, 0, 1, 8, 0, 0})
    ->Args({1900, 3, 0, 1, 8, 0, 0})->Args({32, 2, 1, 1, 8, 0, 0})->Args({32, 3, 1, 1, 8, 0, 0})
    ->Args({32, 2, 0, 0, 8, 0, 0})->Args({32, 2, 1, 0, 8, 0, 0})->Args({32, 2, 0, 1, 4, 0, 0})
    ->Args({32, 2, 2, 1, 8, 0, 0})->Args({1900, 2, 2, 1, 8, 0, 0})  // narrow 2: layer 0's weights throughout
    ->Args({512, 2, 0, 1, 4, 0, 0})->Args({1900, 2, 0, 1, 4, 0, 0})
    // One GEMV shape at every position (qkv_rows, gu_rows > 0; 0: the draft's choice by position):
    ->Args({32, 2, 0, 1, 8, 1, 1})->Args({512, 2, 0, 1, 8, 1, 1})->Args({1900, 2, 0, 1, 8, 1, 1})
    ->Args({32, 2, 0, 1, 8, 1, 2})->Args({512, 2, 0, 1, 8, 1, 2})->Args({1900, 2, 0, 1, 8, 1, 2})
    ->Args({32, 2, 0, 1, 8, 4, 2})->Args({512, 2, 0, 1, 8, 4, 2})->Args({1900, 2, 0, 1, 8, 4, 2})
    ->Args({32, 2, 0, 1, 8, 4, 3})
    ->Args({32, 2, 0, 1, 8, 2, 1})->Args({512, 2, 0, 1, 8, 2, 1})->Args({1900, 2, 0, 1, 8, 2, 1})
    ->Args({32, 2, 0, 1, 8, 2, 2})->Args({512, 2, 0, 1, 8, 2, 2})->Args({1900, 2, 0, 1, 8, 2, 2})
    ->Unit(benchmark::kMillisecond)->Iterations(3);

// The bundled pair's draft (models/tiny-draft: 2 layers of hidden 128, head_dim 32, a 4096-token
// vocabulary) decoding 64 tokens after a 32-token context, by path (as BM_DraftDecode's): what one of
// its proposals costs against the bundled target's graph-replayed pass (BM_TargetPass model 2).
void BM_BundledDraftDecode(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  auto loaded = LoadModel((SourceDir() / "models" / "tiny-draft").string());
  if (!loaded.ok()) return state.SkipWithError(std::string(loaded.status().message()).c_str());
  QwenDraft d;
  d.spec = (*loaded)->spec;
  CudaBackendOptions o;
  o.arena_bytes = size_t{1} << 30;
  auto be = CudaBackend::Create(o);
  if (!be.ok()) return state.SkipWithError(std::string(be.status().message()).c_str());
  d.backend = std::move(be).value();
  TransformerOptions topt;
  topt.max_context = 512;
  auto lm = Transformer::Create(std::shared_ptr<const LoadedModel>(std::move(loaded).value()), d.backend.get(), topt);
  if (!lm.ok()) return state.SkipWithError(std::string(lm.status().message()).c_str());
  d.lm = std::move(lm).value();
  DraftDecode(state, &d, 32, static_cast<DraftDecodePath>(state.range(0)), true, 8, 0, 0, false);
}
BENCHMARK(BM_BundledDraftDecode)->ArgNames({"path"})->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(4);

// The same graph-replayed decode (the draft's own GEMV shapes) on synth:qwen3-1.7b in bf16 (hidden
// 2048, FFN 6144: 3.4 GB of weights read a token, 4x qwen3-0.6b's a layer over the same 28 layers and
// kernel chain): how the fraction of the HBM floor grows with the bytes each kernel of the chain reads.
void BM_DraftDecodeQwen3_1_7B(benchmark::State& state) {
  auto draft = QwenDraftOrSkip(state, false, "qwen3-1.7b");
  if (draft == nullptr) return;
  DraftDecode(state, draft.get(), static_cast<int>(state.range(0)), DraftDecodePath::kGraph, true, 8, 0, 0,
              false);
}
BENCHMARK(BM_DraftDecodeQwen3_1_7B)
    ->ArgNames({"ctx"})->Arg(32)->Arg(512)->Arg(1900)->Unit(benchmark::kMillisecond)->Iterations(3);

// Where a graph-replayed token's time goes, from the kernels' own stamps (SetDecodeProbe): per kind
// (QKV, attention, O, gate/up, down: averages over the 28 layers; the head once) at context ctx,
// pre = block 0's start -> its return from the wait (the window its weight loads had before its input
// existed), gap = the previous kernel's grid end -> this one's wait return (the kernel boundary),
// stage = the input read (and normalized; attention: K/V appended, queries rotated), rest = block 0's
// rest to its end, tail = block 0's end -> the grid's end (the blocks that finish after it).
// Per block (the probe's per-block stamps), relative to the previous kernel's grid end E, per kind:
// blocks = the grid, early = the share of its blocks that started before E (beside the previous
// kernel: their weight loads overlap it), last_start = the last block's start after E (the blocks that
// waited for registers to free), end_p50 = the median block's end after E.
// us_token_span = the first QKV's start -> the head's grid end; us_between_tokens = the replayed
// token's period (CUDA events over 32 tokens, at ctx + 1 .. ctx + 32) minus that span: the state
// kernel, the graph launch, the embedding (within the probe's own noise: at ctx 1900 it came out at
// -1.5 us).
void BM_DecodeTimeline(benchmark::State& state) {
  auto draft = QwenDraftOrSkip(state, state.range(0) == 1);
  if (draft == nullptr) return;
  const int layers = static_cast<int>(draft->spec.n_layers);
  const int launches = 5 * layers + 1;  // QKV, attention, O, gate/up, down a layer; the head
  unsigned long long* stamps = nullptr;
  const size_t n_stamps = static_cast<size_t>(kernels::kDecodeProbeFields) * launches;
  const size_t bytes = sizeof(unsigned long long) * n_stamps;
  if (cudaMalloc(&stamps, bytes) != cudaSuccess) return state.SkipWithError("cudaMalloc");
  cudaMemset(stamps, 0, bytes);
  auto g = GraphedDraft::Create(draft->backend.get(), draft->lm.get(), DraftDecodePath::kGraph);
  if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
  if (state.range(2) > 0) {
    (*g)->SetGemvRowsPerWarp(static_cast<int>(state.range(2)), static_cast<int>(state.range(3)));
  }
  if (state.range(0) == 2) (*g)->ShareLayerWeightsForBenchmark();
  const int context = static_cast<int>(state.range(1));
  std::vector<int32_t> prompt(context), pos(context);
  for (int i = 0; i < context; ++i) prompt[i] = (i * 7919) % 1000, pos[i] = i;
  (void)draft->lm->ForwardResident(prompt, pos, {});
  kernels::SetDecodeProbe(stamps);  // the first Decode captures the graph: its launches carry it
  const auto first = (*g)->Decode(nullptr, 11);
  kernels::SetDecodeProbe(nullptr);
  if (!first.ok() || (*g)->path() != DraftDecodePath::kGraph) return state.SkipWithError("no graph");
  const cudaStream_t stream = draft->backend->stream();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<unsigned long long> h(n_stamps);
  // kinds: 0 QKV, 1 attention, 2 O, 3 gate/up, 4 down, 5 head; fields: pre, gap, stage, rest, tail
  double sum[6][5] = {}, span_us = 0, period_us = 0;
  double blocks_sum[6] = {}, early_sum[6] = {}, last_start_sum[6] = {}, end_p50_sum[6] = {};
  int rounds = 0;
  constexpr int kPeriodTokens = 32;
  for (auto _ : state) {
    cudaEventRecord(start, stream);
    for (int t = 0; t < kPeriodTokens; ++t) (void)(*g)->Decode(nullptr, 17 + t);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    period_us += ms * 1e3 / kPeriodTokens;
    (void)draft->lm->Truncate(draft->lm->n_past() - kPeriodTokens);  // back to ctx + 1 for the probe
    cudaMemsetAsync(stamps, 0, bytes, stream);
    auto st = (*g)->Decode(nullptr, 23);
    if (!st.ok()) return state.SkipWithError(std::string(st.status().message()).c_str());
    cudaStreamSynchronize(stream);
    cudaMemcpy(h.data(), stamps, bytes, cudaMemcpyDeviceToHost);
    const auto at = [&](int t, int i) { return static_cast<double>(h[kernels::kDecodeProbeFields * t + i]); };
    for (int t = 0; t < launches; ++t) {
      if (at(t, 0) == 0 || at(t, 4) == 0) return state.SkipWithError("a launch left no stamps");
      const int kind = t == launches - 1 ? 5 : t % 5;
      sum[kind][0] += (at(t, 1) - at(t, 0)) / 1e3;
      sum[kind][1] += t > 0 ? (at(t, 1) - at(t - 1, 4)) / 1e3 : 0.0;
      sum[kind][2] += (at(t, 2) - at(t, 1)) / 1e3;
      sum[kind][3] += (at(t, 3) - at(t, 2)) / 1e3;
      sum[kind][4] += (at(t, 4) - at(t, 3)) / 1e3;
      if (t == 0) continue;
      const double e = at(t - 1, 4);
      std::vector<double> ends;
      int early = 0;
      double last_start = -1e30;
      for (int b = 0; b < kernels::kDecodeProbeMaxBlocks; ++b) {
        const double b_start = at(t, kernels::kDecodeProbeHeader + 3 * b);
        const double b_end = at(t, kernels::kDecodeProbeHeader + 3 * b + 2);
        if (b_start == 0 || b_end == 0) continue;
        early += b_start < e;
        last_start = std::max(last_start, (b_start - e) / 1e3);
        ends.push_back((b_end - e) / 1e3);
      }
      if (ends.empty()) continue;
      std::nth_element(ends.begin(), ends.begin() + ends.size() / 2, ends.end());
      blocks_sum[kind] += static_cast<double>(ends.size());
      early_sum[kind] += static_cast<double>(early) / static_cast<double>(ends.size());
      last_start_sum[kind] += last_start;
      end_p50_sum[kind] += ends[ends.size() / 2];
    }
    span_us += (at(launches - 1, 4) - at(0, 0)) / 1e3;
    (void)draft->lm->Truncate(draft->lm->n_past() - 1);
    ++rounds;
  }
  static const char* const kKind[] = {"qkv", "attn", "o", "gu", "down", "head"};
  static const char* const kField[] = {"pre", "gap", "stage", "rest", "tail"};
  for (int k = 0; k < 6; ++k) {
    for (int f = 0; f < 5; ++f) {
      state.counters[std::string(kKind[k]) + "_" + kField[f]] = sum[k][f] / rounds / (k == 5 ? 1 : layers);
    }
  }
  for (int k = 0; k < 6; ++k) {
    const double n = static_cast<double>(rounds) * (k == 5 ? 1 : (k == 0 ? layers - 1 : layers));
    state.counters[std::string(kKind[k]) + "_blocks"] = blocks_sum[k] / n;
    state.counters[std::string(kKind[k]) + "_early"] = early_sum[k] / n;
    state.counters[std::string(kKind[k]) + "_last_start"] = last_start_sum[k] / n;
    state.counters[std::string(kKind[k]) + "_end_p50"] = end_p50_sum[k] / n;
  }
  state.counters["us_token_span"] = span_us / rounds;
  state.counters["us_per_token"] = period_us / rounds;
  state.counters["us_between_tokens"] = (period_us - span_us) / rounds;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(stamps);
}
BENCHMARK(BM_DecodeTimeline)
    // narrow 1: the shrunk matrices; 2: every layer on layer 0's weights (L2-resident from layer 1 on).
    // qkv_rows / gu_rows: rows a warp (0: the draft's choice).
    ->ArgNames({"narrow", "ctx", "qkv_rows", "gu_rows"})
    ->Args({0, 32, 0, 0})->Args({1, 32, 0, 0})->Args({2, 32, 0, 0})->Args({0, 1900, 0, 0})
    ->Args({0, 32, 4, 3})->Args({0, 32, 2, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

// The 140-link chain of bench::LaunchChainLink kernels (ping-ponging between buf's two 1024-float
// halves) captured on `stream` and instantiated; null when the capture fails.
constexpr int kChainLinks = 140;  // the draft decode's 5 kernels a layer x 28 layers
// work 4 (links waiting on counters): `counters` [kChainLinks], zeroed by the graph's first node.
cudaGraphExec_t CaptureChain(float* buf, int blocks, int work, bool pdl, cudaStream_t stream,
                             unsigned* counters = nullptr) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (counters != nullptr) cudaMemsetAsync(counters, 0, kChainLinks * sizeof(unsigned), stream);
  for (int i = 0; i < kChainLinks; ++i) {
    (void)bench::LaunchChainLink(buf + (i % 2) * 1024, buf + ((i + 1) % 2) * 1024, blocks, work, pdl && i > 0,
                                 stream, i, counters);
  }
  const bool ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess &&
                  cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (graph) cudaGraphDestroy(graph);
  if (!ok && exec) {
    cudaGraphExecDestroy(exec);
    exec = nullptr;
  }
  return exec;
}

// A graph of 140 dependent kernels (the draft decode's 5 a layer x 28 layers) that do nothing (work 0)
// or a decode GEMV prologue's read + block reduction (work 1), over `blocks` blocks, with and without
// PDL: us per kernel is what each kernel boundary of the decode graph costs before any weight is read.
// work 2 / 3: the same plus 1024 FMAs a thread, straight code in 8 alternating kernels / a loop.
void BM_KernelChainFloor(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const int blocks = static_cast<int>(state.range(0));
  const int work = static_cast<int>(state.range(1));
  const bool pdl = state.range(2) != 0;
  constexpr int kLinks = kChainLinks, kReplays = 50;
  float* buf = nullptr;
  unsigned* counters = nullptr;
  if (cudaMalloc(&buf, sizeof(float) * 2 * 1024) != cudaSuccess ||
      cudaMalloc(&counters, sizeof(unsigned) * kChainLinks) != cudaSuccess) {
    return state.SkipWithError("cudaMalloc");
  }
  cudaMemset(buf, 0, sizeof(float) * 2 * 1024);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaGraphExec_t exec = CaptureChain(buf, blocks, work, pdl, stream, work == 4 ? counters : nullptr);
  const bool ok = exec != nullptr;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  double us = 0;
  if (ok) {
    cudaGraphLaunch(exec, stream);  // warm-up
    for (auto _ : state) {
      cudaEventRecord(start, stream);
      for (int r = 0; r < kReplays; ++r) cudaGraphLaunch(exec, stream);
      cudaEventRecord(stop, stream);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      us = ms * 1e3 / (kReplays * kLinks);
    }
    state.counters["us_per_kernel"] = us;
    state.counters["us_per_token_5x28"] = us * kLinks;
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(buf);
  cudaFree(counters);
  if (!ok || cudaGetLastError() != cudaSuccess) state.SkipWithError("graph capture or launch failed");
}
BENCHMARK(BM_KernelChainFloor)
    ->ArgNames({"blocks", "work", "pdl"})
    ->Args({1, 0, 1})->Args({132, 0, 1})->Args({512, 0, 1})->Args({132, 1, 1})->Args({512, 1, 1})
    ->Args({132, 0, 0})->Args({132, 1, 0})->Args({132, 2, 1})->Args({132, 3, 1})
    ->Args({132, 4, 1})->Args({512, 4, 1})->Args({264, 1, 1})->Args({264, 4, 1})
    ->Unit(benchmark::kMillisecond)->Iterations(3);

// What the host pays to queue one kernel (no graph): the chain's links launched one by one, 132 blocks
// doing a prologue's work (work 1), with and without the PDL attribute: the driver's floor under each
// Backend op of an eagerly launched pass (BM_TargetPass's us_host_launch counts ~230 of those a pass).
void BM_HostLaunchCost(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const bool pdl = state.range(0) != 0;
  constexpr int kLaunches = 230;
  float* buf = nullptr;
  if (cudaMalloc(&buf, sizeof(float) * 2 * 1024) != cudaSuccess) return state.SkipWithError("cudaMalloc");
  cudaMemset(buf, 0, sizeof(float) * 2 * 1024);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  const auto launch_all = [&] {
    for (int i = 0; i < kLaunches; ++i) {
      const float* in = buf + (i % 2) * 1024;
      (void)bench::LaunchChainLink(in, buf + ((i + 1) % 2) * 1024, 132, 1, pdl, stream, i % 8);
    }
  };
  launch_all();  // warm-up (module loading)
  cudaStreamSynchronize(stream);
  double host_s = 0, total_s = 0;
  int64_t rounds = 0;
  for (auto _ : state) {
    for (int r = 0; r < 20; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      launch_all();
      const auto t1 = std::chrono::steady_clock::now();
      cudaStreamSynchronize(stream);
      host_s += std::chrono::duration<double>(t1 - t0).count();
      total_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++rounds;
    }
  }
  state.counters["us_host_per_launch"] = host_s * 1e6 / (rounds * kLaunches);
  state.counters["us_per_launch"] = total_s * 1e6 / (rounds * kLaunches);
  cudaStreamDestroy(stream);
  cudaFree(buf);
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("launch failed");
}
BENCHMARK(BM_HostLaunchCost)->ArgNames({"pdl"})->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

// The same chain (132 blocks, work 1, PDL) while `readers` blocks on another stream read 4 GB of HBM
// over and over: how much the chain's L2 round trips slow down under HBM traffic that is not theirs (the
// decode graph's weight loads issued early), and the traffic's own GB/s. At most 66 readers: with a
// reader block on every multiprocessor the chain's blocks find no room and never end (nor do the readers,
// which wait for the chain's end to stop).
void BM_KernelChainUnderLoad(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const int readers = static_cast<int>(state.range(0));
  constexpr int kLinks = kChainLinks, kReplays = 50;
  constexpr size_t kStreamBytes = size_t{4} << 30;
  float* buf = nullptr;
  void* big = nullptr;
  int* stop = nullptr;
  unsigned long long* read = nullptr;
  if (cudaMalloc(&buf, sizeof(float) * 2 * 1024) != cudaSuccess ||
      cudaMalloc(&big, kStreamBytes) != cudaSuccess || cudaMalloc(&stop, 64) != cudaSuccess ||
      cudaMalloc(&read, 64) != cudaSuccess) {
    return state.SkipWithError("cudaMalloc");
  }
  cudaMemset(buf, 0, sizeof(float) * 2 * 1024);
  cudaMemset(big, 1, kStreamBytes);
  cudaStream_t stream, side;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  cudaGraphExec_t exec = CaptureChain(buf, 132, 1, true, stream);
  const bool ok = exec != nullptr;
  cudaEvent_t start, stop_ev, side_start, side_stop;
  for (cudaEvent_t* e : {&start, &stop_ev, &side_start, &side_stop}) cudaEventCreate(e);
  double us = 0, gbps = 0;
  if (ok) {
    cudaGraphLaunch(exec, stream);  // warm-up
    cudaStreamSynchronize(stream);
    for (auto _ : state) {
      cudaMemset(stop, 0, 64);
      cudaMemset(read, 0, 64);
      cudaDeviceSynchronize();
      if (readers > 0) {
        cudaEventRecord(side_start, side);
        (void)bench::LaunchHbmReader(big, kStreamBytes, readers, stop, read,
                                     reinterpret_cast<unsigned*>(read + 1), side);
        cudaEventRecord(side_stop, side);
      }
      cudaEventRecord(start, stream);
      for (int r = 0; r < kReplays; ++r) cudaGraphLaunch(exec, stream);
      cudaEventRecord(stop_ev, stream);
      cudaEventSynchronize(stop_ev);
      const int one = 1;
      cudaMemcpy(stop, &one, sizeof(int), cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();
      float ms = 0, side_ms = 0;
      cudaEventElapsedTime(&ms, start, stop_ev);
      us = ms * 1e3 / (kReplays * kLinks);
      if (readers > 0) {
        unsigned long long bytes = 0;
        cudaMemcpy(&bytes, read, sizeof(bytes), cudaMemcpyDeviceToHost);
        cudaEventElapsedTime(&side_ms, side_start, side_stop);
        gbps = side_ms > 0 ? bytes / (side_ms * 1e6) : 0.0;
      }
    }
    state.counters["us_per_kernel"] = us;
    state.counters["reader_GB_per_s"] = gbps;
  }
  if (exec) cudaGraphExecDestroy(exec);
  for (cudaEvent_t e : {start, stop_ev, side_start, side_stop}) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
  cudaStreamDestroy(side);
  for (void* p : {static_cast<void*>(buf), big, static_cast<void*>(stop), static_cast<void*>(read)}) {
    cudaFree(p);
  }
  if (!ok || cudaGetLastError() != cudaSuccess) state.SkipWithError("graph capture or launch failed");
}
BENCHMARK(BM_KernelChainUnderLoad)
    ->ArgNames({"readers"})
    ->Arg(0)->Arg(8)->Arg(16)->Arg(33)->Arg(66)
    ->Unit(benchmark::kMillisecond)->Iterations(2);

// kernel ids of BM_DraftLayerKernels
enum LayerKernel : int {
  kNormQkv = 0, kQkNormRope = 1, kAttention = 2, kOProj = 3, kNormGateUp = 4, kDown = 5, kNormHead = 6,
  kAttentionGeneric = 7  // LaunchAttention (the Transformer's kernel), for comparison: not in the layer
};
void BM_DraftLayerKernels(benchmark::State& state) {
  namespace kn = kernels;
  auto draft = QwenDraftOrSkip(state);
  if (draft == nullptr) return;
  std::unique_ptr<CudaBackend>* be = &draft->backend;  // (*be)-> / (*lm)-> as for StatusOr results
  std::unique_ptr<Transformer>* lm = &draft->lm;
  const ModelSpec& s = (*lm)->spec();
  int ctx = 32, which = 0;  // set per measurement below
  const int D = static_cast<int>(s.hidden), H = static_cast<int>(s.n_heads),
            Hkv = static_cast<int>(s.n_kv_heads), d = static_cast<int>(s.head_dim),
            F = static_cast<int>(s.ffn_dim), L = static_cast<int>(s.n_layers);
  const int max_past = static_cast<int>((*lm)->max_context()) - 1;
  DeviceArena& a = (*be)->arena();
  const size_t ws_bytes = kn::AttentionWorkspaceBytes(1, H, max_past + 1, d);
  const size_t dec_ws_bytes = kn::DecodeAttentionWorkspaceBytes(H, Hkv, max_past + 1, d);
  const size_t table_bytes = sizeof(float2) * static_cast<size_t>(max_past + 1) * (d / 2);
  auto buf = a.Allocate(sizeof(kn::DecodeState) + ws_bytes + dec_ws_bytes + table_bytes +
                            sizeof(float) * (2 * D + 3 * H * d + 2 * Hkv * d + F + s.vocab_size) + 4096,
                        "layer kernel bench");
  if (!buf.ok()) return state.SkipWithError(std::string(buf.status().message()).c_str());
  char* p = static_cast<char*>(*buf);
  auto take = [&](size_t bytes) { void* r = p; p += (bytes + 255) / 256 * 256; return r; };
  auto* st = static_cast<kn::DecodeState*>(take(sizeof(kn::DecodeState)));
  void* ws = take(ws_bytes);
  void* dec_ws = take(dec_ws_bytes);
  cudaMemset(dec_ws, 0, dec_ws_bytes);  // the decode kernel's counters start at zero
  auto* rope_table = static_cast<float2*>(take(table_bytes));
  auto floats = [&](int64_t n) { return static_cast<float*>(take(static_cast<size_t>(n) * sizeof(float))); };
  float *h = floats(D), *q = floats(H * d), *k = floats(Hkv * d), *v = floats(Hkv * d), *attn = floats(H * d),
        *act = floats(F), *logits = floats(s.vocab_size);
  cudaMemset(*buf, 0, sizeof(kn::DecodeState));
  for (float* f : {h, q, k, v, attn, act}) cudaMemset(f, 0, 4);  // values do not matter for timing
  const cudaStream_t stream = (*be)->stream();
  if (kn::LaunchRopeTable(rope_table, max_past + 1, d, static_cast<double>(s.rope_theta), stream) != cudaSuccess) {
    return state.SkipWithError("RoPE table");
  }
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int max_blocks = sms * 8;  // as GraphedDraft
  const float eps = s.rms_eps, scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto data = [](const Weight* w) { return CudaBackend::Data(*w); };
  const auto type = [](const Weight* w) { return CudaBackend::Type(*w); };
  const auto layer_gemv = [&](const float* x, const void* norm_w, kn::ElemType norm_type,
                              const kn::GemvSegment* seg, int n, kn::ElemType w_type, int in,
                              kn::GemvEpilogue epi) {
    return kn::LaunchFusedGemv(x, norm_w, norm_type, eps, seg, n, w_type, in, epi, max_blocks, stream);
  };
  double bytes = 0;  // what one launch must read (weights; K/V rows for attention)
  const auto launch = [&](int l) -> cudaError_t {
    const Transformer::LayerRefs r = (*lm)->layer_refs(l);
    float* kc = CudaBackend::Data(const_cast<Buffer&>((*lm)->kv_cache().k(l)));
    float* vc = CudaBackend::Data(const_cast<Buffer&>((*lm)->kv_cache().v(l)));
    switch (which) {
      case kNormQkv: {
        const kn::GemvSegment seg[3] = {{data(r.q), q, H * d}, {data(r.k), k, Hkv * d}, {data(r.v), v, Hkv * d}};
        bytes = 2.0 * D * (H * d + 2 * Hkv * d);
        return layer_gemv(h, data(r.attn_norm), type(r.attn_norm), seg, 3, type(r.q), D,
                          kn::GemvEpilogue::kStore);
      }
      case kQkNormRope:
        bytes = 4.0 * (H * d + 4 * Hkv * d);
        return kn::LaunchQkNormRopeAppend(q, k, v, q, data(r.q_norm), data(r.k_norm), type(r.q_norm), eps, kc, vc,
                                          st, H, Hkv, d, rope_table,
                                          s.rope_style == RopeStyle::kRotateHalf ? kn::RopeStyle::kRotateHalf
                                                                                 : kn::RopeStyle::kInterleaved,
                                          stream, /*programmatic=*/false);
      case kAttention:
        bytes = 2.0 * 4 * (ctx + 1) * Hkv * d;
        return kn::LaunchDecodeAttention(q, kc, vc, kn::ElemType::kF32, attn, max_past, H, Hkv, d, scale, dec_ws,
                                         dec_ws_bytes, &st->pos, stream, /*programmatic=*/false);
      case kAttentionGeneric:
        bytes = 2.0 * 4 * (ctx + 1) * Hkv * d;
        return kn::LaunchAttention(q, kc, vc, kn::ElemType::kF32, nullptr, attn, 1, max_past, H, Hkv, d, scale, ws,
                                   ws_bytes, stream, &st->pos);
      case kOProj: {
        const kn::GemvSegment seg[1] = {{data(r.o), h, D}};
        bytes = 2.0 * D * H * d;
        return layer_gemv(attn, nullptr, kn::ElemType::kF32, seg, 1, type(r.o), H * d,
                          kn::GemvEpilogue::kAddTo);
      }
      case kNormGateUp: {
        const kn::GemvSegment seg[2] = {{data(r.gate), act, F}, {data(r.up), act, F}};
        bytes = 2.0 * 2 * D * F;
        return layer_gemv(h, data(r.ffn_norm), type(r.ffn_norm), seg, 2, type(r.gate), D,
                          kn::GemvEpilogue::kSwiGlu);
      }
      case kDown: {
        const kn::GemvSegment seg[1] = {{data(r.down), h, D}};
        bytes = 2.0 * D * F;
        return layer_gemv(act, nullptr, kn::ElemType::kF32, seg, 1, type(r.down), F,
                          kn::GemvEpilogue::kAddTo);
      }
      default: {
        const Weight& head = (*lm)->output_head();
        const kn::GemvSegment seg[1] = {{CudaBackend::Data(head), logits, static_cast<int>(head.rows())}};
        bytes = 2.0 * D * head.rows();
        const Weight& norm = (*lm)->output_norm();
        return kn::LaunchFusedGemv(h, CudaBackend::Data(norm), CudaBackend::Type(norm), eps, seg, 1,
                                   CudaBackend::Type(head), D, kn::GemvEpilogue::kStore, max_blocks, stream);
      }
    }
  };
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  // us per launch of kernel `which` at context `ctx`: 20 rounds of back-to-back launches, one per layer
  // (the head: 4, it is never L2-resident), after one warm-up round.
  const auto measure = [&](int kernel, int context) -> double {
    which = kernel;
    ctx = context;
    (void)kn::LaunchSetDecodeState(st, nullptr, 1, ctx, stream);
    const int per_rep = which == kNormHead ? 4 : L;
    for (int l = 0; l < per_rep; ++l) {
      if (launch(l) != cudaSuccess) return -1;
    }
    cudaEventRecord(start, stream);
    for (int rep = 0; rep < 20; ++rep) {
      for (int l = 0; l < per_rep; ++l) (void)launch(l);
    }
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return cudaGetLastError() == cudaSuccess ? ms * 1e3 / (20.0 * per_rep) : -1;
  };
  static const char* const kKeys[] = {"qkv", "rope", "attn", "o", "gateup", "down", "head"};
  for (auto _ : state) {
    double layer_us = 0, layer_bytes = 0;
    for (int kernel = 0; kernel < 7; ++kernel) {
      const double us = measure(kernel, 32);
      if (us < 0) return state.SkipWithError("a launch failed");
      state.counters[std::string("us_") + kKeys[kernel]] = us;
      state.counters[std::string("hbm_") + kKeys[kernel]] = bytes / kHbmBytesPerSecond / (us * 1e-6);
      if (kernel != kNormHead) {
        layer_us += us;
        layer_bytes += bytes;
      }
    }
    state.counters["us_layer_sum"] = layer_us;
    state.counters["hbm_layer"] = layer_bytes / kHbmBytesPerSecond / (layer_us * 1e-6);
    const double us = measure(kAttention, 1900);
    if (us < 0) return state.SkipWithError("a launch failed");
    state.counters["us_attn_ctx1900"] = us;
    state.counters["us_attn_generic"] = measure(kAttentionGeneric, 32);
    state.counters["us_attn_generic_ctx1900"] = measure(kAttentionGeneric, 1900);
  }
  state.SetLabel("ctx 32 (attn also at 1900; attn_generic: LaunchAttention); one layer's kernels, each alone");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  a.Free(*buf);
}
BENCHMARK(BM_DraftLayerKernels)->Unit(benchmark::kMillisecond)->Iterations(1);

// Where a persistent-kernel token's time goes: per-phase timestamps of one token (after 16 warm-up
// tokens) at context 32, averaged over the layers. A phase's time = the last block's end of it minus
// the last block's end of the phase before (its critical-path share; blocks overlap phases).
// Arg: L2 prefetch of the weights ahead on (1) or off (0). The a* counters split block 0's attention
// (entry after its own QKV rows, K/V appended, q rotated + cache rows staged, the slot loop, the merge).
void BM_PersistentPhases(benchmark::State& state) {
  auto draft = QwenDraftOrSkip(state);
  if (draft == nullptr) return;
  const ModelSpec* spec = &draft->spec;
  std::unique_ptr<CudaBackend>* be = &draft->backend;  // (*be)-> / (*lm)-> as for StatusOr results
  std::unique_ptr<Transformer>* lm = &draft->lm;
  auto g = GraphedDraft::Create(be->get(), lm->get(), DraftDecodePath::kPersistent);
  if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
  if ((*g)->path() != DraftDecodePath::kPersistent) return state.SkipWithError((*g)->fallback_reason().c_str());
  const int nb = (*g)->persistent_blocks(), layers = static_cast<int>(spec->n_layers);
  const int phases = kernels::PersistentDecodePhases(layers);  // + the head
  const size_t entries = kernels::PersistentDecodeTimelineEntries(layers, nb);
  auto dev = (*be)->arena().Allocate(entries * sizeof(unsigned long long), "timeline");
  if (!dev.ok()) return state.SkipWithError(std::string(dev.status().message()).c_str());
  auto* timeline = static_cast<unsigned long long*>(*dev);
  const bool prefetch = state.range(0) != 0;
  std::vector<unsigned long long> t(entries);
  constexpr int kContext = 32;
  std::vector<int32_t> prompt(kContext), pos(kContext);
  for (int i = 0; i < kContext; ++i) prompt[i] = (i * 7919) % static_cast<int>(spec->vocab_size), pos[i] = i;
  // phase kinds: 0 embedding, 1 qkv, 2 attention, 3 o, 4 gate/up, 5 down
  double compute[6] = {}, head = 0, total = 0, attn_inside[5] = {};
  int64_t rounds = 0;
  for (auto _ : state) {
    (void)(*lm)->Truncate(0);
    (void)(*lm)->ForwardResident(prompt, pos, {});
    (*g)->SetPersistentProbe(nullptr, prefetch);
    for (int i = 0; i < 16; ++i) (void)(*g)->Decode(nullptr, 100 + i);
    (*g)->SetPersistentProbe(timeline, prefetch);
    (void)(*g)->Decode(nullptr, 7);
    (void)(*be)->Synchronize(SyncKind::kOther);
    cudaMemcpy(t.data(), timeline, entries * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
    const auto last = [&](int k) {
      double m = 0;
      for (int b = 0; b < nb; ++b) m = std::max(m, static_cast<double>(t[static_cast<size_t>(k) * (nb + 1) + b]));
      return m;
    };
    const auto first = [&](int k) {
      double m = 1e300;
      for (int b = 0; b < nb; ++b) m = std::min(m, static_cast<double>(t[static_cast<size_t>(k) * (nb + 1) + b]));
      return m;
    };
    double prev = last(0);
    for (int k = 1; k < phases; ++k) {
      const double end = last(k);
      compute[1 + (k - 1) % 5] += (end - prev) * 1e-3;
      prev = end;
    }
    head += (last(phases) - prev) * 1e-3;
    // Block 0's attention, inside: entry after its QKV rows, K/V appended, q rotated, slots, merge.
    const size_t pb = static_cast<size_t>(phases + 1) * (nb + 1);
    for (int l = 0; l < layers; ++l) {
      const auto at = [&](int slot) { return static_cast<double>(t[pb + l * kernels::kPersistentProbeSlots + slot]); };
      const double qkv_end = static_cast<double>(t[static_cast<size_t>(1 + 5 * l) * (nb + 1)]);
      attn_inside[0] += (at(0) - qkv_end) * 1e-3;
      for (int s2 = 1; s2 <= 4; ++s2) attn_inside[s2] += (at(s2) - at(s2 - 1)) * 1e-3;
    }
    total += (last(phases) - first(0)) * 1e-3;
    ++rounds;
  }
  const char* names[6] = {"us_embed", "us_qkv", "us_attn", "us_o", "us_gateup", "us_down"};
  for (int i = 1; i < 6; ++i) state.counters[names[i]] = compute[i] / rounds / layers;
  state.counters["us_head"] = head / rounds;
  const char* inside[5] = {"a0_entry", "a1_kv_append", "a2_q_rope", "a3_slots", "a4_merge"};
  for (int i = 0; i < 5; ++i) state.counters[inside[i]] = attn_inside[i] / rounds / layers;
  state.counters["us_token"] = total / rounds;
  state.counters["blocks"] = nb;
  (*be)->arena().Free(*dev);
}
BENCHMARK(BM_PersistentPhases)->ArgNames({"prefetch"})->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

// Generates from prompts[0], [1], .. (round robin) once per benchmark iteration with `dec` and sets
// the loop's counters: tokens/s, acceptance, tau, host syncs and expert-union reads per step, ms per
// step, and (with a draft) which draft decode path ran.
void MeasureGeneration(benchmark::State& state, DeviceSpeculativeDecoder* dec,
                       const std::vector<std::vector<int32_t>>& prompts, bool has_draft) {
  int64_t tokens = 0, steps = 0, drafted = 0, accepted = 0, result_syncs = 0, other = 0, unions = 0;
  double seconds = 0, draft_s = 0, verify_s = 0, accept_s = 0;
  // One generation untimed: the first use of each kernel loads its module (CUDA's lazy loading: 67-94
  // ms for the Qwen3-sized target's single-token pass on the H200) and the first pass of each size
  // captures its graph (1.9 ms for that target's 228 nodes); both would land on whichever variant
  // runs first in the process.
  if (auto warm = dec->Generate(prompts[0]); !warm.ok()) return state.SkipWithError(std::string(warm.status().message()).c_str());
  size_t i = 0;
  for (auto _ : state) {
    auto out = dec->Generate(prompts[i++ % prompts.size()]);
    if (!out.ok()) return state.SkipWithError(std::string(out.status().message()).c_str());
    const SpeculativeStats& s = dec->stats();
    const StepSyncStats& y = dec->syncs();
    tokens += s.tokens;
    seconds += s.total_seconds;
    draft_s += s.draft_seconds;
    verify_s += s.verify_seconds;
    accept_s += s.accept_seconds;
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
  state.counters["draft_persistent_launches"] = static_cast<double>(d.persistent_launches);
  state.counters["draft_overlapped"] = static_cast<double>(d.overlapped);
  state.counters["draft_run_ahead"] = static_cast<double>(d.run_ahead);
  state.counters["draft_run_ahead_used"] = static_cast<double>(d.run_ahead_used);
  state.counters["draft_run_ahead_late"] = static_cast<double>(d.run_ahead_late);
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

// One Transformer::ForwardResident pass of n tokens (the speculative loop's verify at n = k + 1, the
// target alone at n = 1) after a 32-token prompt, launched op by op and waited for as the loop does, on
// synth:qwen3-1.7b (model 0), synth:qwen3-0.6b (1) or the bundled tiny-target (2): us_per_pass, and
// for the synthetic models its floor (every weight read once at 4.2 TB/s) and the share of it reached.
// fused 0: CudaBackendOptions::fused_ops off (the ops one by one, the same bits): what fusing is worth.
// order: CudaBackendOptions::gemv_order (0 FMA, 1 tensor cores). graph 1: the pass replayed from a CUDA
// graph (GraphedTargetPass, SpeculativeOptions::graph_verify, the loop's default), tokens from device memory.
// ncu on qwen3-1.7b showed this pass GPU-bound (the host's launches ran ahead of it); the smaller ones are
// paced by the host's launches eagerly (us_host_launch near us_per_pass).
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
  // had put 1.5-3.5 ms on each of the first benchmark's 24 timed passes.
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

// The benchmarks' `overlap` argument: 0 every draft decode on the backend's stream, 1 the last draft
// beside the verification (SpeculativeOptions::overlap_last_draft), 2 that and the guess of the bonus
// token (run_ahead kAuto: the defaults), 3 the guess in every step (kAlways).
void SetOverlap(SpeculativeOptions& opt, int64_t overlap) {
  opt.overlap_last_draft = overlap >= 1;
  opt.run_ahead = overlap == 2 ? RunAhead::kAuto : overlap == 3 ? RunAhead::kAlways : RunAhead::kOff;
}

// args: k (0: the target alone), greedy (else T = 0.8 rejection), overlap (SetOverlap).
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
  opt.adaptive = state.range(3) != 0;  // k is then the controller's bound (--draft-adaptive)
  SetOverlap(opt, state.range(2));
  opt.graph_verify = state.range(4) != 0;
  auto dec = DeviceSpeculativeDecoder::Create(be->get(), target.get(), k > 0 ? draft.get() : nullptr, opt);
  if (!dec.ok()) return state.SkipWithError(std::string(dec.status().message()).c_str());
  MeasureGeneration(state, dec->get(), prompts, k > 0);
}
BENCHMARK(BM_SpeculativeGeneration)
    ->ArgNames({"k", "greedy", "overlap", "adaptive", "graph_verify"})
    ->Args({0, 1, 2, 0, 1})->Args({2, 1, 2, 0, 1})->Args({4, 1, 2, 0, 1})->Args({6, 1, 2, 0, 1})->Args({0, 0, 2, 0, 1})
    ->Args({2, 0, 2, 0, 1})->Args({4, 0, 2, 0, 1})->Args({3, 1, 2, 0, 1})->Args({3, 0, 2, 0, 1})->Args({6, 0, 2, 0, 1})
    ->Args({2, 1, 0, 0, 1})->Args({4, 1, 0, 0, 1})->Args({4, 0, 0, 0, 1})->Args({2, 1, 1, 0, 1})->Args({4, 1, 1, 0, 1})
    ->Args({4, 0, 1, 0, 1})->Args({2, 1, 3, 0, 1})->Args({4, 1, 3, 0, 1})->Args({4, 0, 3, 0, 1})
    // The adaptive controller bounded by k (the CLI's --draft-adaptive): where it lands against the
    // fixed lengths above.
    ->Args({4, 1, 2, 1, 1})->Args({8, 1, 2, 1, 1})->Args({4, 0, 2, 1, 1})->Args({8, 0, 2, 1, 1})
        // The target's passes launched eagerly (graph_verify off): what the graphs are worth.
    ->Args({0, 1, 2, 0, 0})->Args({2, 1, 2, 0, 0})->Args({4, 1, 2, 0, 0})->Args({2, 0, 2, 0, 0})
    ->Args({4, 1, 2, 1, 0})
->Unit(benchmark::kMillisecond)->Iterations(4);

// A Qwen3-sized pair through the GPU-resident loop: draft synth:qwen3-0.6b, target synth:qwen3-1.7b
// (bf16, 151936-token vocabulary), 64 new tokens after a 32-token prompt. ms_per_step is what the loop
// costs per step at real sizes (args: k, 0 = the target alone; sampling 0 greedy, 1 the CLI's defaults,
// 2 temperature 1 alone (vLLM's defaults: the temperature-only split path); rejection acceptance;
// order: CudaBackendOptions::gemv_order, 0 FMA, 1 tensor cores; overlap: SetOverlap).
// Their random weights give both models the same token (acceptance 1.0 on the H200): this measures
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
  SetOverlap(opt, state.range(3));
  opt.adaptive = state.range(4) != 0;  // k is then the controller's bound (--draft-adaptive)
  opt.graph_verify = state.range(5) != 0;
  opt.sampling = SamplingParams::Greedy();
  if (state.range(1) == 1) {  // the CLI's sampling defaults (T 0.8, top-k 40, top-p 0.95, min-p 0.05)
    opt.sampling = SamplingParams();
    opt.sampling.temperature = 0.8f;
  } else if (state.range(1) == 2) {
    opt.sampling = SamplingParams::Plain(1.0f, 1);
  }
  auto dec = DeviceSpeculativeDecoder::Create(be->get(), target->get(), k > 0 ? draft->get() : nullptr, opt);
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
    // The adaptive controller bounded by k (acceptance 1.0 here: the longest draft is the best).
    ->Args({8, 0, 1, 2, 1, 1})->Args({15, 0, 1, 2, 1, 1})
        // The target's passes launched eagerly (graph_verify off).
    ->Args({0, 0, 1, 2, 0, 0})->Args({4, 0, 1, 2, 0, 0})->Args({15, 0, 1, 2, 0, 0})
->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace specgen

BENCHMARK_MAIN();
