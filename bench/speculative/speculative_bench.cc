// End-to-end speculative generation on the CPU reference: the bundled pair (models/tiny-target +
// models/tiny-draft) on its held-out prompts (models/pair_prompts.json) with the settings PyTorch
// measured (models/pair_stats.json: T = 0.8 without filters, and greedy), for k = 1..8 and both
// acceptance modes, and plain decoding for the speedup baseline. Counters: tokens_per_second,
// acceptance_rate, tau (tokens per target pass, bonus included), and pytorch_acceptance_rate, the
// training script's figure for the same k and mode (rejection only). Skips when the pair is absent.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "draft/model_proposer.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "engine/speculative/speculative_decoder.h"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

const std::string kModels = std::string(SPECGEN_SOURCE_DIR) + "/models/";

struct Pair {
  CpuBackend backend;
  std::unique_ptr<Transformer> target, draft;
  std::vector<std::vector<int32_t>> prompts;
  int64_t new_tokens = 64;
  float temperature = 0.8f;
  nlohmann::json stats;
  std::string error;
};

std::unique_ptr<Transformer> LoadLm(const std::string& path, Backend* backend, std::string* error) {
  auto loaded = LoadModel(path);
  if (!loaded.ok()) {
    *error = std::string(loaded.status().message());
    return nullptr;
  }
  std::shared_ptr<const LoadedModel> model = std::move(loaded).value();
  TransformerOptions options;
  options.max_context = 512;
  auto lm = Transformer::Create(model, backend, options);
  if (!lm.ok()) {
    *error = std::string(lm.status().message());
    return nullptr;
  }
  return std::move(lm).value();
}

Pair& BundledPair() {
  static Pair* pair = [] {
    auto* p = new Pair();
    if (!std::filesystem::exists(kModels + "tiny-target") ||
        !std::filesystem::exists(kModels + "pair_prompts.json")) {
      p->error = "bundled pair not present in " + kModels;
      return p;
    }
    p->target = LoadLm(kModels + "tiny-target", &p->backend, &p->error);
    if (p->target) p->draft = LoadLm(kModels + "tiny-draft", &p->backend, &p->error);
    try {
      const auto prompts = nlohmann::json::parse(std::ifstream(kModels + "pair_prompts.json"));
      p->prompts = prompts.at("prompts").get<std::vector<std::vector<int32_t>>>();
      p->new_tokens = prompts.value("new_tokens", 64);
      p->temperature = prompts.value("temperature", 0.8f);
      if (std::filesystem::exists(kModels + "pair_stats.json")) {
        p->stats = nlohmann::json::parse(std::ifstream(kModels + "pair_stats.json"));
      }
    } catch (const std::exception& e) {
      p->error = std::string("pair json: ") + e.what();
    }
    return p;
  }();
  return *pair;
}

// args: k (0 = plain decoding), mode (0 rejection, 1 coupled), greedy (0/1), adaptive (0/1: the
// --draft-adaptive controller bounded by k).
void BM_BundledPair(benchmark::State& state) {
  Pair& pair = BundledPair();
  if (!pair.error.empty() || !pair.target || !pair.draft) {
    state.SkipWithError(pair.error.c_str());
    return;
  }
  const int k = static_cast<int>(state.range(0));
  const AcceptMode mode = state.range(1) ? AcceptMode::kCoupled : AcceptMode::kRejection;
  const bool greedy = state.range(2) != 0;
  SpeculativeOptions options;
  options.draft_max = k;
  options.adaptive = state.range(3) != 0;
  options.accept = mode;
  options.max_new_tokens = pair.new_tokens;
  options.sampling = greedy ? SamplingParams::Greedy() : SamplingParams::Plain(pair.temperature, 0);
  SpeculativeStats sum;
  for (auto _ : state) {
    for (size_t i = 0; i < pair.prompts.size(); ++i) {
      options.sampling.seed = i + 1;
      ModelProposer proposer(pair.draft.get(), pair.target->vocab_size(), options.sampling, mode);
      SpeculativeDecoder decoder(pair.target.get(), k > 0 ? &proposer : nullptr, options);
      auto out = decoder.Generate(pair.prompts[i]);
      if (!out.ok()) {
        state.SkipWithError(std::string(out.status().message()).c_str());
        return;
      }
      sum += decoder.stats();
    }
  }
  state.counters["tokens_per_second"] = sum.tokens_per_second();
  state.counters["acceptance_rate"] = sum.acceptance_rate();
  state.counters["tau"] = sum.mean_accepted_length();
  state.counters["mean_k"] = sum.mean_draft_length();
  if (k > 0 && mode == AcceptMode::kRejection && pair.stats.contains("acceptance")) {
    const auto& acc = pair.stats["acceptance"][greedy ? "greedy" : "sampled"];
    if (acc.contains(std::to_string(k))) {
      state.counters["pytorch_acceptance_rate"] = acc[std::to_string(k)].value("acceptance_rate", 0.0);
    }
  }
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"k", "coupled", "greedy", "adaptive"});
  for (int greedy : {0, 1}) {
    b->Args({0, 0, greedy, 0});
    for (int k = 1; k <= 8; ++k) {
      for (int coupled : {0, 1}) {
        if (greedy && coupled) continue;  // identical rules at temperature 0
        b->Args({k, coupled, greedy, 0});
      }
    }
    b->Args({8, 0, greedy, 1});  // where the controller lands among the fixed lengths
  }
}
BENCHMARK(BM_BundledPair)->Apply(Args)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace specgen

BENCHMARK_MAIN();
