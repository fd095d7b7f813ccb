// SynthWeights throughput: bytes of weights generated per second, by dtype and thread count, on a
// real model's shape (qwen3-0.6b: 0.75 GB as f32) so per-tensor overheads are realistic.
#include <thread>

#include "benchmark/benchmark.h"
#include "engine/io/synth.h"

namespace specgen {
namespace {

void BM_SynthWeights(benchmark::State& state) {
  const DType dtype = static_cast<DType>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const ModelSpec spec = *SynthSpec(state.range(2) ? "qwen3-0.6b" : "tiny-moe");
  const size_t bytes = *SynthBytes(spec, dtype);
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<LoadedModel>> m = SynthWeights(spec, dtype, 1, threads);
    if (!m.ok()) {
      state.SkipWithError(std::string(m.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(m->get());
  }
  state.counters["bytes_per_second"] =
      benchmark::Counter(static_cast<double>(bytes) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["threads"] = threads;
  state.SetLabel(std::string(Name(dtype)));
}

void Args(benchmark::internal::Benchmark* b) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (DType t : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_K}) {
    for (int threads : {1, hw}) b->Args({static_cast<int64_t>(t), threads, 1});
  }
  b->Args({static_cast<int64_t>(DType::kF32), 1, 0});  // tiny: fixed costs
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_SynthWeights)->Apply(Args);

}  // namespace
}  // namespace specgen

BENCHMARK_MAIN();
