// A pass with dense layers streamed through the VRAM layer ring (docs/design.md §3.1, §12):
// synth:qwen3-1.7b in bf16, every layer's FFN (gate, up, down) kept in pinned host memory and copied,
// pass by pass, into a ring of R layer buffers on a copy stream while earlier layers compute.
// BM_StreamedDensePass: a pass of n positions replayed from a CUDA graph (the loop's way), beside the
// same pass of the fully resident model in the same process. Counters: ms_per_pass, ms_resident,
// mb_streamed (bytes copied per pass), gb_per_s (those bytes over the pass's time) and floor_ratio =
// floor / time, floor = streamed bytes / kPcieBytesPerSecond (a pass cannot beat its copies; the
// resident time is what the compute costs by itself).
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench/e2e_gpu/bench_models.h"
#include "engine/core/status_macros.h"
#include "engine/io/synth.h"
#include "engine/speculative/graphed_target_pass.h"
#include "moe/apply_plan.h"

namespace specgen::e2e {
namespace {

constexpr double kPcieBytesPerSecond = 55e9;  // pinned host-to-device copies (docs/design.md §2)
constexpr int64_t kContext = 512;
constexpr int64_t kPrompt = 32;

// One backend holding the resident model and the streamed one (its ring of `ring` buffers), kept while
// the ring size is.
struct DenseRig {
  int ring = 0;
  std::shared_ptr<const LoadedModel> weights;
  std::unique_ptr<CudaBackend> backend;
  std::unique_ptr<Transformer> resident, streamed;
  int32_t* d_tokens = nullptr;  // arena
  std::unique_ptr<GraphedTargetPass> resident_pass, streamed_pass;
};
std::unique_ptr<DenseRig>& Current() {
  static std::unique_ptr<DenseRig> r;
  return r;
}

absl::StatusOr<DenseRig*> MakeRig(int ring) {
  std::unique_ptr<DenseRig>& cur = Current();
  if (cur && cur->ring == ring) return cur.get();
  std::shared_ptr<const LoadedModel> weights = cur ? cur->weights : nullptr;
  cur.reset();
  if (!weights) {
    ASSIGN_OR_RETURN(ModelSpec spec, SynthSpec("qwen3-1.7b"));
    ASSIGN_OR_RETURN(auto w, SynthWeights(spec, DType::kBF16, 0));
    weights = std::move(w);
  }
  auto r = std::make_unique<DenseRig>();
  r->ring = ring;
  r->weights = weights;
  CudaBackendOptions o;
  o.arena_bytes = size_t{16} << 30;
  ASSIGN_OR_RETURN(r->backend, CudaBackend::Create(o));
  TransformerOptions t;
  t.max_context = kContext;
  ASSIGN_OR_RETURN(r->resident, Transformer::Create(weights, r->backend.get(), t));
  moe::RunPlan every;  // every FFN through the ring, placed as a plan would be
  for (int l = 0; l < weights->spec.n_layers; ++l) every.streamed_dense_layers.push_back(l);
  every.dense_ring_layers = ring;
  moe::ApplyRunPlan(every, r->backend.get(), &t);
  ASSIGN_OR_RETURN(r->streamed, Transformer::Create(weights, r->backend.get(), t));
  ASSIGN_OR_RETURN(void* d, r->backend->arena().Allocate(16 * sizeof(int32_t), "the pass's token ids"));
  r->d_tokens = static_cast<int32_t*>(d);
  ASSIGN_OR_RETURN(r->resident_pass,
                   GraphedTargetPass::Create(r->backend.get(), r->resident.get(), r->d_tokens, 16));
  ASSIGN_OR_RETURN(r->streamed_pass,
                   GraphedTargetPass::Create(r->backend.get(), r->streamed.get(), r->d_tokens, 16));
  cur = std::move(r);
  return cur.get();
}

void BM_StreamedDensePass(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const int ring = static_cast<int>(state.range(0));
  const int n = static_cast<int>(state.range(1));
  auto made = MakeRig(ring);
  if (!made.ok()) return state.SkipWithError(std::string(made.status().message()).c_str());
  DenseRig& rig = **made;
  auto fail = [&](const absl::Status& st) { state.SkipWithError(std::string(st.message()).c_str()); };
  const int64_t vocab = rig.streamed->vocab_size();
  for (Transformer* lm : {rig.resident.get(), rig.streamed.get()}) {
    if (lm->n_past() == kPrompt) continue;
    if (!lm->Truncate(0).ok()) return fail(absl::InternalError("truncate"));
    std::vector<int32_t> prompt(kPrompt);
    for (int i = 0; i < kPrompt; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 11) % vocab);
    if (auto r = lm->ForwardResident(prompt); !r.ok()) return fail(r.status());
  }
  // One pass of n new tokens at kPrompt.. of `lm` through `graphed`, rolled back afterwards.
  auto pass = [&](Transformer& lm, GraphedTargetPass& graphed) -> absl::StatusOr<double> {
    std::vector<int32_t> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 104729 + 5) % vocab);
    if (cudaMemcpy(rig.d_tokens, ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice) != cudaSuccess) {
      return absl::InternalError("token copy failed");
    }
    RETURN_IF_ERROR(rig.backend->Synchronize(SyncKind::kOther));
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(graphed.Forward(n).status());
    RETURN_IF_ERROR(rig.backend->Synchronize(SyncKind::kOther));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RETURN_IF_ERROR(lm.Truncate(kPrompt));
    return sec;
  };
  // Untimed: each graph's capture and warm-up.
  for (int i = 0; i < 2; ++i) {
    if (auto r = pass(*rig.resident, *rig.resident_pass); !r.ok()) return fail(r.status());
    if (auto r = pass(*rig.streamed, *rig.streamed_pass); !r.ok()) return fail(r.status());
  }
  for (GraphedTargetPass* g : {rig.resident_pass.get(), rig.streamed_pass.get()}) {
    if (!g->fallback_reason().empty()) return state.SkipWithError(g->fallback_reason().c_str());
  }
  double streamed_sec = 0, resident_sec = 0;
  int64_t passes = 0;
  for (auto _ : state) {
    for (int r = 0; r < 4; ++r) {  // alternated, so that drift affects both alike
      auto a = pass(*rig.resident, *rig.resident_pass);
      auto b = pass(*rig.streamed, *rig.streamed_pass);
      if (!a.ok()) return fail(a.status());
      if (!b.ok()) return fail(b.status());
      resident_sec += *a;
      streamed_sec += *b;
      ++passes;
    }
  }
  auto stats = rig.streamed->dense_stream_stats();
  if (!stats.ok()) return fail(stats.status());
  const double bytes = static_cast<double>(stats->pass_bytes);
  const double sec = streamed_sec / passes;
  state.counters["layers"] = static_cast<double>(stats->layers);
  state.counters["ms_per_pass"] = sec * 1e3;
  state.counters["ms_resident"] = resident_sec / passes * 1e3;
  state.counters["mb_streamed"] = bytes / 1e6;
  state.counters["gb_per_s"] = bytes / sec / 1e9;
  state.counters["floor_ms"] = bytes / kPcieBytesPerSecond * 1e3;
  state.counters["floor_ratio"] = bytes / kPcieBytesPerSecond / sec;
}
BENCHMARK(BM_StreamedDensePass)
    ->ArgNames({"ring", "n"})
    ->Apply([](benchmark::internal::Benchmark* b) {  // ring outermost: one rig per ring size
      for (int ring : {2, 3}) {
        for (int n : {1, 4, 16}) b->Args({ring, n});
      }
    })
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace
}  // namespace specgen::e2e
