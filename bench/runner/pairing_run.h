// One benchmark's work: a pairing at one draft length on one backend, generating from every prompt
// of its set through one loop (each prompt with the pairing's seed), with the counters specgen_bench
// reports.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "bench/runner/model_cache.h"
#include "bench/runner/pairing_config.h"
#include "moe/run_plan.h"
#include "engine/speculative/speculative_loop.h"
#include "engine/speculative/stats.h"

namespace specgen::bench {

// Sums over the prompts of one run.
struct RunTotals {
  int64_t prompts = 0;
  // The loop's stats summed (SpeculativeStats::operator+=): tokens, passes, drafts, generation time
  // (prefill excluded) and what the target streamed (zero while every expert is resident).
  SpeculativeStats stats;
  double ttft_seconds = 0;  // summed: from the start of Generate to the first token out
  int64_t expert_cache_slots = -1;  // the target's placement (-1: every expert resident)
  int64_t prefill_chunk = 0;

  void Add(const RunTotals& other);
  double acceptance_rate() const { return stats.acceptance_rate(); }
  // Tokens per target pass, the target's own token included.
  double mean_accepted_length() const { return stats.mean_accepted_length(); }
  double mean_draft_length() const { return stats.mean_draft_length(); }
  double tokens_per_second() const { return stats.tokens_per_second(); }
  double time_to_first_token() const { return prompts ? ttft_seconds / prompts : 0.0; }
  double per_token(int64_t bytes) const { return stats.tokens ? double(bytes) / stats.tokens : 0.0; }
};

struct RunSpec {
  const Pairing* pairing = nullptr;
  const PromptSet* prompts = nullptr;
  DraftLength length;  // k = 0: the target alone
  BackendKey backend;
  // The acceptance regime: a profile's name (moe/acceptance_profile.h) the scripted draft follows
  // (bench/acceptance), or empty for the draft's own tokens.
  std::string acceptance;
  // The routing regime (bench/routing/routing_trace.h): empty for the target's own router, else
  // "uniform" or "locality" (each prompt a trace of its own seed).
  std::string routing;
  // specgen_bench --parallel: this many sequences at once through the serving pool (parallel_run.h);
  // 0: one loop, one prompt after another.
  int parallel = 0;
};

// The benchmark's name: PAIRING/k:LENGTH[/budget:BUDGET][/routing:REGIME][/accept:PROFILE][/parallel:N]
// (specgen report reads it back).
std::string BenchmarkName(const RunSpec& spec);

// Prompt `prompt`'s routing under the run's regime: the target's own router (a cached model's override
// switched off), or a trace of the regime over the context keyed by the sampling seed and the prompt,
// so that prompts do not replay one another's experts into the cache.
absl::Status UseRouting(const RunSpec& spec, Transformer& target, size_t prompt);

// The same run without a draft, one sequence: what the speedup counter divides by.
RunSpec WithoutDraft(const RunSpec& spec);
// Runs that share this key measure the same target-alone generation.
std::string BaselineKey(const RunSpec& spec);

// What the run asks moe::PlanFor for its target: the pairing's target and draft, its longest draft
// length (so that every run of the pairing, the target alone included, shares one placement of the
// target), its context and the KV cache type the CLI defaults to (moe::kDefaultKvType).
moe::RunRequest RunRequestFor(const RunSpec& spec);

// What a run needs before it generates: its models placed and loaded, the loop's options and the
// prompts as ids.
struct PreparedRun {
  CachedLm* target = nullptr;
  CachedLm* draft = nullptr;  // null: k = 0
  SpeculativeOptions options;
  std::vector<std::vector<int32_t>> ids;
  int64_t expert_cache_slots = -1;
};
absl::StatusOr<PreparedRun> PrepareRun(ModelCache& cache, const RunSpec& spec);

// On the GPU the target is placed as the planner says (experts streamed through a cache of slots when
// the budget is below what holds them), and only the run's models stay on the backend.
absl::StatusOr<RunTotals> RunPairing(ModelCache& cache, const RunSpec& spec);

}  // namespace specgen::bench
