// The multi-sequence step's target pass on the CPU reference (docs/design.md §14): S sequences, each
// verifying 5 positions (k = 4) after its own 32-token prefix, in ONE Transformer::ForwardSequences
// pass (shared) or in S passes one after another (separate, what a sequence-at-a-time server does).
// Counter tokens_per_second = positions verified per second over all sequences. Each iteration rolls
// every cache back, so every pass sees the same context. Real time: the work runs on backend threads.
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
constexpr int kRows = 5;

void BM_Sequences(benchmark::State& state, const std::string& path, bool shared) {
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
  Transformer& t = **lm;
  const int64_t v = model->spec.vocab_size;
  const int n_seq = static_cast<int>(state.range(0));
  std::vector<KvCache> caches;
  std::vector<std::vector<int32_t>> batches;
  std::vector<float> logits;
  for (int s = 0; s < n_seq; ++s) {
    auto c = t.NewKvCache();
    if (!c.ok()) {
      state.SkipWithError("cache allocation failed");
      return;
    }
    caches.push_back(std::move(c).value());
    std::vector<int32_t> prefix(kPrefix), batch(kRows);
    for (int i = 0; i < kPrefix; ++i) prefix[i] = static_cast<int32_t>((i * 31 + 7 + s * 13) % v);
    for (int i = 0; i < kRows; ++i) batch[i] = static_cast<int32_t>((i * 17 + 3 + s * 5) % v);
    const Transformer::SequenceRows one[] = {{prefix, &caches.back()}};
    if (!t.ForwardSequences(one, &logits).ok()) {
      state.SkipWithError("prefix forward failed");
      return;
    }
    batches.push_back(std::move(batch));
  }
  std::vector<Transformer::SequenceRows> rows;
  for (int s = 0; s < n_seq; ++s) rows.push_back({batches[s], &caches[s]});
  for (auto _ : state) {
    bool ok = true;
    if (shared) {
      ok = t.ForwardSequences(rows, &logits).ok();
    } else {
      for (const auto& r : rows) ok = ok && t.ForwardSequences({&r, 1}, &logits).ok();
    }
    for (KvCache& c : caches) ok = ok && c.Truncate(kPrefix).ok();
    if (!ok) {
      state.SkipWithError("forward failed");
      return;
    }
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens_per_second"] = benchmark::Counter(
      static_cast<double>(state.iterations() * n_seq * kRows), benchmark::Counter::kIsRate);
  state.counters["threads"] = backend.n_threads();
}

const std::string kTarget = std::string(SPECGEN_SOURCE_DIR) + "/models/tiny-target";
BENCHMARK_CAPTURE(BM_Sequences, tiny_target_shared, kTarget, true)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseRealTime();
BENCHMARK_CAPTURE(BM_Sequences, tiny_target_separate, kTarget, false)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseRealTime();

}  // namespace
}  // namespace specgen

BENCHMARK_MAIN();
