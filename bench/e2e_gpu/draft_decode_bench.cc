// The draft's single-token decode against its HBM floor (docs/design.md §3; the goal is >= 60% of it):
//  - BM_DraftDecode: single-token decode of synth:qwen3-0.6b in bf16 on the CudaBackend; time per
//    token (CUDA events over 64 tokens, no host wait between tokens) against the floor of the bytes a
//    token reads (every weight once; the tied embedding is read whole by the head) / kHbmBytesPerSecond.
//    path: 0 Transformer::ForwardResident (Backend ops), 1 GraphedDraft's fused kernels launched
//    eagerly, 2 the same replayed from the captured CUDA graph (the speculative loop's default); the
//    label names the path that actually ran (a fallback says why). narrow 1: the same chain of kernels on shrunk matrices (see
//    MakeQwenDraft): the floor the chain sets by itself; narrow 2: the full matrices, every layer on
//    layer 0's (GraphedDraftHooks::share_layer_weights: L2-resident): the decode without HBM.
//    grid: the fused GEMVs' blocks per multiprocessor.
//    pdl 0: paths 1-2 without programmatic dependent launch (what PDL is worth). qkv_rows, gu_rows > 0:
//    one GEMV shape (GraphedDraftHooks::qkv_rows_per_warp) at every position instead of the draft's choice.
//  - BM_DraftDecodeQwen3_1_7B: the graph path on synth:qwen3-1.7b (4x the bytes a layer, the same chain).
//  - BM_BundledDraftDecode: the bundled draft's single-token decode by path: what a proposal costs
//    against the bundled target's pass.
// Skips (with an error message) without a device or without the bundled pair.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/e2e_gpu/bench_models.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "draft/cuda/graphed_draft.h"

namespace specgen::e2e {
namespace {

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
    GraphedDraftHooks hooks;
    hooks.disable_programmatic_launch = !pdl;
    hooks.gemv_blocks_per_sm = grid;
    hooks.qkv_rows_per_warp = qkv_rows;
    hooks.gate_up_rows_per_warp = gu_rows;
    hooks.share_layer_weights = share_layer_weights;
    auto g = GraphedDraft::Create(be->get(), lm->get(), path, hooks);
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
  if (graphed) {
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
    ->Args({1900, 2, 0, 1, 8, 0, 0})->Args({32, 2, 1, 1, 8, 0, 0})
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
  o.gemv_order = kernels::GemvOrder::kFma;  // the order this benchmark's recorded rows measure
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

}  // namespace
}  // namespace specgen::e2e
