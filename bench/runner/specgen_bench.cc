// specgen_bench --config FILE [Google Benchmark flags]: one benchmark per pairing x draft length x
// VRAM budget of a pairing config (configs/*.toml), registered at start so that every Google
// Benchmark flag applies (--benchmark_filter, --benchmark_repetitions, --benchmark_format=json,
// --benchmark_out, --benchmark_min_time). The config and the models' metadata are checked before any
// weights load; each model then loads once per process (ModelCache).
//
// Counters: acceptance_rate (accepted / drafted), mean_accepted_length (tokens per target pass),
// mean_draft_length, tokens_per_second (generated tokens over generation time, prefill excluded),
// time_to_first_token (seconds, prefill included), speedup (tokens_per_second over the same
// pairing's target alone, same sampling and backend, measured once in this process) and
// baseline_tokens_per_second, draft_length (k; the bound for adaptive) and adaptive (0 or 1).
// Offload (on the GPU the target is placed by the planner under the budget, so a budget below what
// holds every expert streams them; all 0 while nothing streams): expert_cache_slots (-1: every
// expert resident), prefill_chunk, h2d_bytes_per_token, expert_cache_hit_rate, mean_distinct_experts
// (per MoE layer per pass), host_experts_per_token (missed experts computed on the host CPU; the
// pairing's moe_host key). Prediction (moe/speed_prediction.h, `specgen plan`'s model with an H200's
// rates; on the CPU as if resident): predicted_tokens_per_second_{uniform,locality} and
// predicted_speedup_{uniform,locality} at the run's k (adaptive: the best k) under the run's
// acceptance profile, or the per-depth acceptance the real draft measured.
// Acceptance regimes (acceptance = [...] in the config, greedy only): a run under a profile's
// scripted draft is named .../accept:PROFILE (bench/acceptance). Routing regimes (routing = [...]): a
// run whose MoE target routes by a uniform or locality trace is named .../routing:REGIME
// (bench/routing), its speedup over the target alone under the same trace.
//
// --parallel N,M: each benchmark again with N (M) sequences at once through the serving pool
// (parallel_run.h), named PAIRING/k:LENGTH[/budget:B]/parallel:N, with the counters of
// RunParallelBenchmark.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/runner/model_cache.h"
#include "bench/runner/pairing_check.h"
#include "bench/runner/pairing_config.h"
#include "bench/runner/pairing_predict.h"
#include "bench/runner/pairing_run.h"
#include "bench/runner/parallel_run.h"
#include "bench/runner/run_context.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "benchmark/benchmark.h"

namespace specgen::bench {
namespace {

struct Process {
  PairingConfig config;
  ModelCache cache;
  std::map<std::string, double> baseline_tps;  // BaselineKey -> target-alone tokens/s
  bool any_error = false;
};

Process& TheProcess() {
  static auto* p = new Process();
  return *p;
}

void SetCounters(benchmark::State& state, const RunSpec& spec, const RunTotals& t, double baseline_tps,
                 size_t vram_budget) {
  state.counters["acceptance_rate"] = t.acceptance_rate();
  state.counters["mean_accepted_length"] = t.mean_accepted_length();
  state.counters["mean_draft_length"] = t.mean_draft_length();
  state.counters["tokens_per_second"] = t.tokens_per_second();
  state.counters["time_to_first_token"] = t.time_to_first_token();
  state.counters["baseline_tokens_per_second"] = baseline_tps;
  state.counters["speedup"] = baseline_tps > 0 ? t.tokens_per_second() / baseline_tps : 0.0;
  state.counters["draft_length"] = spec.length.k;
  state.counters["adaptive"] = spec.length.adaptive ? 1 : 0;
  state.counters["expert_cache_slots"] = static_cast<double>(t.expert_cache_slots);
  state.counters["prefill_chunk"] = static_cast<double>(t.prefill_chunk);
  state.counters["h2d_bytes_per_token"] = t.per_token(t.stats.offload.h2d_bytes);
  state.counters["expert_cache_hit_rate"] = t.stats.offload.hit_rate();
  state.counters["mean_distinct_experts"] = t.stats.offload.mean_distinct_experts();
  state.counters["host_experts_per_token"] = t.per_token(t.stats.offload.host_experts);  // --moe-host
  // `specgen plan`'s prediction of this run beside the measurement: under the regime's profile, or
  // the acceptance per depth the real draft showed. None where the plan cannot be made.
  const absl::StatusOr<moe::AcceptanceProfile> profile =
      spec.acceptance.empty() ? absl::StatusOr<moe::AcceptanceProfile>(MeasuredAcceptance(t.stats))
                              : moe::ParseAcceptance(spec.acceptance, "acceptance");
  if (profile.ok()) {
    const absl::StatusOr<RunPrediction> predicted = PredictRun(spec, vram_budget, *profile);
    if (predicted.ok()) {
      state.counters["predicted_tokens_per_second_uniform"] = predicted->tokens_per_second_uniform;
      state.counters["predicted_tokens_per_second_locality"] = predicted->tokens_per_second_locality;
      state.counters["predicted_speedup_uniform"] = predicted->speedup_uniform;
      state.counters["predicted_speedup_locality"] = predicted->speedup_locality;
    }
  }
}

// The target-alone run's tokens/s that the speedup divides by, run once per key outside the timed loop.
absl::StatusOr<double> BaselineTokensPerSecond(Process& process, const RunSpec& spec) {
  const std::string key = BaselineKey(spec);
  auto it = process.baseline_tps.find(key);
  if (it == process.baseline_tps.end()) {
    ASSIGN_OR_RETURN(const RunTotals baseline, RunPairing(process.cache, WithoutDraft(spec)));
    it = process.baseline_tps.emplace(key, baseline.tokens_per_second()).first;
  }
  return it->second;
}

void RunBenchmark(benchmark::State& state, RunSpec spec) {
  Process& process = TheProcess();
  auto fail = [&](const absl::Status& status) {
    process.any_error = true;
    state.SkipWithError(std::string(status.message()).c_str());
  };
  const absl::StatusOr<double> baseline_tps = BaselineTokensPerSecond(process, spec);
  if (!baseline_tps.ok()) return fail(baseline_tps.status());
  RunTotals totals;
  for (auto _ : state) {
    auto run = RunPairing(process.cache, spec);
    if (!run.ok()) {
      fail(run.status());
      break;
    }
    totals.Add(*run);
  }
  if (totals.prompts > 0) SetCounters(state, spec, totals, *baseline_tps, process.cache.vram_budget());
}

// A --parallel benchmark: the spec's prompts by spec.parallel clients through the serving pool.
// tokens_per_second is the aggregate (every sequence's tokens over the wall time); sequence_latency
// and time_to_first_token are each client's wait, from its request to its reply's last and first
// token; sequences_per_pass is how many sequences the CPU's shared target passes carried.
void RunParallelBenchmark(benchmark::State& state, RunSpec spec) {
  Process& process = TheProcess();
  auto fail = [&](const absl::Status& status) {
    process.any_error = true;
    state.SkipWithError(std::string(status.message()).c_str());
  };
  const absl::StatusOr<double> baseline_tps = BaselineTokensPerSecond(process, spec);
  if (!baseline_tps.ok()) return fail(baseline_tps.status());
  ParallelTotals sum;
  for (auto _ : state) {
    auto run = RunParallel(process.cache, spec);
    if (!run.ok()) {
      fail(run.status());
      break;
    }
    sum.totals.Add(run->totals);
    sum.requests += run->requests;
    sum.wall_seconds += run->wall_seconds;
    sum.sequence_seconds += run->sequence_seconds;
    sum.shared_passes += run->shared_passes;
    sum.shared_pass_sequences += run->shared_pass_sequences;
  }
  if (sum.requests == 0) return;
  SetCounters(state, spec, sum.totals, *baseline_tps, process.cache.vram_budget());
  state.counters["tokens_per_second"] = sum.aggregate_tokens_per_second();
  state.counters["speedup"] = *baseline_tps > 0 ? sum.aggregate_tokens_per_second() / *baseline_tps : 0.0;
  state.counters["time_to_first_token"] = sum.mean_time_to_first_token();
  state.counters["sequence_latency"] = sum.mean_sequence_seconds();
  state.counters["sequences_per_pass"] = sum.sequences_per_pass();
  state.counters["parallel"] = spec.parallel;
}

// Every benchmark of the config, grouped by backend so that each backend (and its models) is made once.
std::vector<RunSpec> Specs(const PairingConfig& config) {
  std::vector<RunSpec> specs;
  for (const Pairing& p : config.pairings) {
    for (const std::string& budget : p.vram_budgets) {
      for (const DraftLength& length : p.draft_lengths) {
        // The target alone is one run whatever the regimes: a script changes only drafted tokens.
        const std::vector<std::string> plain = {""};
        for (const std::string& routing : p.routings) {
          for (const std::string& acceptance : length.k == 0 ? plain : p.acceptances) {
            RunSpec spec;
            spec.pairing = &p;
            spec.prompts = &config.prompt_sets[p.prompt_set];
            spec.length = length;
            spec.backend = BackendKey{ResolveDevice(p.device), budget, p.threads};
            if (spec.backend.device == "cpu") spec.backend.budget.clear();
            spec.routing = routing;
            spec.acceptance = acceptance;
            specs.push_back(spec);
          }
        }
      }
    }
  }
  // Backends in the order the config first uses them; the config's order within each.
  std::vector<BackendKey> order;
  for (const RunSpec& s : specs) {
    if (std::find(order.begin(), order.end(), s.backend) == order.end()) order.push_back(s.backend);
  }
  auto rank = [&](const RunSpec& s) { return std::find(order.begin(), order.end(), s.backend) - order.begin(); };
  std::stable_sort(specs.begin(), specs.end(),
                   [&](const RunSpec& a, const RunSpec& b) { return rank(a) < rank(b); });
  return specs;
}

// Takes --NAME VALUE / --NAME=VALUE out of argv (Google Benchmark rejects flags it does not know).
std::string TakeFlag(const char* name, int* argc, char** argv) {
  const std::string flag = std::string("--") + name, prefix = flag + "=";
  std::string value;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (argv[i] == flag && i + 1 < *argc) {
      value = argv[++i];
    } else if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      value = argv[i] + prefix.size();
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  return value;
}

// The pool holds a pair of KV caches per sequence; 64 bounds what a benchmark asks for.
constexpr int kMaxParallel = 64;

// --parallel 1,4,8: each a number of sequences at once, in [1, kMaxParallel], each once.
bool ParseParallel(const std::string& text, std::vector<int>* out) {
  for (const absl::string_view part : absl::StrSplit(text, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > kMaxParallel) {
      std::fprintf(stderr, "specgen_bench: error: --parallel %s: '%s' is not a number of sequences in [1, %d]\n",
                   text.c_str(), std::string(part).c_str(), kMaxParallel);
      return false;
    }
    if (std::find(out->begin(), out->end(), n) != out->end()) {
      std::fprintf(stderr, "specgen_bench: error: --parallel %s: %d is given twice\n", text.c_str(), n);
      return false;
    }
    out->push_back(n);
  }
  return true;
}

// specgen_bench's own flag, said before Google Benchmark prints its flags for --help (and exits).
constexpr const char* kUsage =
    "usage: specgen_bench --config FILE [--parallel N,...] [--benchmark_* flags]\n"
    "  --config FILE  a pairing config (configs/*.toml): targets, drafts (or none), draft lengths (or\n"
    "                 adaptive, modelled), acceptance rules and regimes, routing regimes, sampling, device,\n"
    "                 VRAM budgets, context and prompt sets; every pairing x draft length x budget x routing\n"
    "                 regime x acceptance regime becomes one benchmark. configs/bundled.toml\n"
    "                 runs the bundled pair; configs/qwen3-moe.toml a Qwen3-30B-A3B pairing (fill in paths).\n"
    "  --parallel N,M,...  also run every benchmark with N (M, ...) sequences at once through the\n"
    "                 serving pool, as `specgen serve --parallel N` does (on the CPU their target passes are\n"
    "                 shared): named .../parallel:N, with aggregate tokens_per_second, sequence_latency and\n"
    "                 time_to_first_token per sequence, sequences_per_pass.\n"
    "  Results: --benchmark_out=results.json, then `specgen report results.json --svg chart.svg`.\n";

int Main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("%s\nGoogle Benchmark's flags:\n", kUsage);
      std::fflush(stdout);
    }
  }
  const std::string config_path = TakeFlag("config", &argc, argv);
  const std::string parallel_flag = TakeFlag("parallel", &argc, argv);
  std::vector<int> parallel;
  if (!parallel_flag.empty() && !ParseParallel(parallel_flag, &parallel)) return 1;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (config_path.empty()) {
    std::fprintf(stderr, "specgen_bench: error: no --config FILE\n%s", kUsage);
    return 1;
  }
  Process& process = TheProcess();
  auto config = LoadPairingConfig(config_path);
  absl::Status status = config.status();
  if (status.ok()) {
    process.config = *std::move(config);
    status = CheckPairingModels(process.config);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "specgen_bench: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  // device = "auto" that resolves to the CPU here has no VRAM to budget: each budget would run the
  // same CPU benchmark under the same name, so the config is refused rather than its budgets dropped.
  for (const Pairing& p : process.config.pairings) {
    const bool budgeted = std::any_of(p.vram_budgets.begin(), p.vram_budgets.end(),
                                      [](const std::string& b) { return !b.empty(); });
    if (budgeted && ResolveDevice(p.device) == "cpu") {
      std::fprintf(stderr,
                   "specgen_bench: error: %s: pairing '%s' sets vram_budget, and it runs on the CPU here "
                   "(device \"%s\": this machine or build has no CUDA device), which has no VRAM budget; "
                   "drop vram_budget or run where a GPU is\n",
                   p.budget_ref.ToString().c_str(), p.name.c_str(), p.device.c_str());
      return 1;
    }
  }
  const std::vector<RunSpec> specs = Specs(process.config);
  for (const RunSpec& spec : specs) {
    if (spec.backend.device == "cuda" && ResolveDevice("auto") != "cuda") {
      std::fprintf(stderr,
                   "specgen_bench: error: %s: pairing '%s' runs on device \"cuda\", and this machine or "
                   "build has no CUDA device (set device = \"cpu\" or \"auto\", or build with "
                   "-DSPECGEN_CUDA=ON)\n",
                   process.config.path.c_str(), spec.pairing->name.c_str());
      return 1;
    }
  }
  benchmark::AddCustomContext("pairing_config", config_path);
  // What `specgen report` names in its chart's heading.
  const RunContext context = DescribeRuns(specs);
  benchmark::AddCustomContext("specgen_device", context.device);
  benchmark::AddCustomContext("specgen_models", context.models);
  benchmark::AddCustomContext("specgen_sampling", context.sampling);
  for (const RunSpec& spec : specs) {
    benchmark::RegisterBenchmark(BenchmarkName(spec).c_str(), RunBenchmark, spec)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    for (const int n : parallel) {
      RunSpec many = spec;
      many.parallel = n;
      benchmark::RegisterBenchmark(BenchmarkName(many).c_str(), RunParallelBenchmark, many)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return process.any_error ? 1 : 0;
}

}  // namespace
}  // namespace specgen::bench

int main(int argc, char** argv) { return specgen::bench::Main(argc, argv); }
