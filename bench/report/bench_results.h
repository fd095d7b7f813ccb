// specgen_bench's results read back from Google Benchmark's JSON (--benchmark_format=json or
// --benchmark_out): one BenchRow per benchmark, its name split into pairing, draft length and budget
// (BenchmarkName in bench/runner/pairing_run.h). With --benchmark_repetitions the "mean" aggregate
// is used where Google Benchmark wrote one, else the repetitions are averaged.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace specgen::report {

struct BenchRow {
  std::string pairing;
  std::string length;  // "0", "4", "adaptive8", "modelled8"
  std::string budget;  // empty: the default
  std::string acceptance;  // the acceptance regime's profile (".../accept:PROFILE"); empty: the real draft
  std::string routing;     // the routing regime (".../routing:REGIME"); empty: the target's own router
  int parallel = 0;    // sequences generating at once (specgen_bench --parallel); 0: one, the loop alone
  int k = 0;           // the fixed k, or the adaptive bound
  bool adaptive = false;
  bool modelled = false;  // adaptive with modelled step costs (the bytes-aware policy)
  std::string error;   // the benchmark's error, if it failed (counters then 0)
  double tokens_per_second = 0, speedup = 0, acceptance_rate = 0, mean_accepted_length = 0,
         mean_draft_length = 0, time_to_first_token = 0;
  // Offload (0 while nothing streamed): bytes streamed per token and the expert cache's hit rate.
  double h2d_bytes_per_token = 0, expert_cache_hit_rate = 0;
  // `specgen plan`'s prediction of the run's speedup (0: none recorded).
  double predicted_speedup_uniform = 0, predicted_speedup_locality = 0;

  // "greedy", "greedy @ 8GiB", "greedy @ 8GiB (locality) [typical]" or "greedy x4" (4 sequences at
  // once): one line of the chart, one column of the table.
  std::string Series() const {
    const std::string s = SeriesAcrossBudgets(budget.empty() ? pairing : pairing + " @ " + budget);
    return parallel > 0 ? s + " x" + std::to_string(parallel) : s;
  }
  // "greedy", "greedy (locality)" or "greedy [typical]": one line of the chart against budget.
  std::string Profile() const { return SeriesAcrossBudgets(pairing); }

 private:
  std::string SeriesAcrossBudgets(const std::string& base) const {
    const std::string routed = routing.empty() ? base : base + " (" + routing + ")";
    return acceptance.empty() ? routed : routed + " [" + acceptance + "]";
  }
};

// What specgen_bench wrote in the results' "context" to say what ran: the device (the GPU's name, or
// CPU), the models and the sampling of its pairings. Empty where absent (an older runner's results,
// or not specgen_bench's): the chart then names what it has.
struct BenchContext {
  std::string device, models, sampling;
};
BenchContext ParseBenchContext(const std::string& json_text);

// Rows in the order of the file. `name` is used in errors (usually the path). A target-alone row
// (k = 0, which specgen_bench runs once whatever the acceptance regimes) is repeated under every
// regime of its pairing and budget, so that each regime's line starts from it; it stays as it is
// where runs of the real draft share it.
absl::StatusOr<std::vector<BenchRow>> ParseBenchResults(const std::string& json_text, const std::string& name);

}  // namespace specgen::report
