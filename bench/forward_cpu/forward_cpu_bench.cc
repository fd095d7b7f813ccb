// CPU forward throughput: one pass of `batch` new positions after a 32-token prefix (decode at batch 1,
// verification-sized passes at 4 and 8), for synth tiny-moe and the bundled tiny pair. Counter
// tokens_per_second = positions processed per second. The cache is rolled back after every pass so
// each iteration sees the same context length. Real time: the work runs on the backend's threads.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"

namespace specgen {
namespace {

constexpr int kPrefix = 32;

void BM_Forward(benchmark::State& state, const std::string& path) {
  if (path.rfind("synth:", 0) != 0 && !std::filesystem::exists(path)) {
    state.SkipWithError(("model not present: " + path).c_str());
    return;
  }
  auto loaded = LoadModel(path);
  if (!loaded.ok()) {
    state.SkipWithError(std::string(loaded.status().message()).c_str());
    return;
  }
  std::shared_ptr<const LoadedModel> model = std::move(loaded).value();
  CpuBackend backend;
  auto lm = Transformer::Create(model, &backend);
  if (!lm.ok()) {
    state.SkipWithError(std::string(lm.status().message()).c_str());
    return;
  }
  const int64_t v = model->spec.vocab_size;
  std::vector<int32_t> prefix(kPrefix), batch(state.range(0));
  for (int i = 0; i < kPrefix; ++i) prefix[i] = static_cast<int32_t>((i * 31 + 7) % v);
  for (size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<int32_t>((i * 17 + 3) % v);
  std::vector<float> logits;
  if (!(*lm)->Forward(prefix, &logits).ok()) {
    state.SkipWithError("prefix forward failed");
    return;
  }
  for (auto _ : state) {
    if (!(*lm)->Forward(batch, &logits).ok() || !(*lm)->Truncate(kPrefix).ok()) {
      state.SkipWithError("forward failed");
      return;
    }
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens_per_second"] =
      benchmark::Counter(static_cast<double>(state.iterations() * batch.size()), benchmark::Counter::kIsRate);
  state.counters["threads"] = backend.n_threads();
}

const std::string kModels = std::string(SPECGEN_SOURCE_DIR) + "/models/";
BENCHMARK_CAPTURE(BM_Forward, tiny_moe, std::string("synth:tiny-moe"))->Arg(1)->Arg(4)->Arg(8)->UseRealTime();
BENCHMARK_CAPTURE(BM_Forward, tiny_target, kModels + "tiny-target")->Arg(1)->Arg(4)->Arg(8)->UseRealTime();
BENCHMARK_CAPTURE(BM_Forward, tiny_draft, kModels + "tiny-draft")->Arg(1)->Arg(4)->Arg(8)->UseRealTime();

}  // namespace
}  // namespace specgen

BENCHMARK_MAIN();
