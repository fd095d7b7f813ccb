#include "bench/report/bench_results.h"

#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"

namespace specgen::report {
namespace {

// Splits "PAIRING/k:LENGTH[/budget:B][/...]" into `row`; false when the name is not specgen_bench's.
bool ParseName(const std::string& run_name, BenchRow* row) {
  std::vector<std::string> parts = absl::StrSplit(run_name, '/');
  if (parts.size() < 2 || parts[0].empty()) return false;
  row->pairing = parts[0];
  bool has_k = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p.rfind("k:", 0) == 0) {
      row->length = p.substr(2);
      std::string digits = row->length;
      row->adaptive = digits.rfind("adaptive", 0) == 0;
      if (row->adaptive) digits = digits.substr(8);
      if (!absl::SimpleAtoi(digits, &row->k) || row->k < 0) return false;
      has_k = true;
    } else if (p.rfind("budget:", 0) == 0) {
      row->budget = p.substr(7);
    }
  }
  return has_k;
}

double Counter(const nlohmann::json& b, const char* name) {
  auto it = b.find(name);
  return it != b.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

absl::StatusOr<std::vector<BenchRow>> ParseBenchResults(const std::string& json_text, const std::string& name) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(name, ": not valid JSON");
  if (!j.is_object() || !j.contains("benchmarks") || !j["benchmarks"].is_array()) {
    return InvalidArgument(name, ": no \"benchmarks\" array: give the JSON of specgen_bench "
                                 "--benchmark_format=json or --benchmark_out=FILE");
  }
  struct Group {
    BenchRow row;
    int iterations = 0;  // iteration entries summed into row
    bool has_mean = false;
  };
  std::vector<std::string> order;
  std::map<std::string, Group> groups;
  for (const nlohmann::json& b : j["benchmarks"]) {
    const std::string run_name = b.value("run_name", b.value("name", std::string()));
    BenchRow row;
    if (!ParseName(run_name, &row)) {
      return InvalidArgument(name, ": benchmark '", run_name, "' is not specgen_bench's (PAIRING/k:LENGTH)");
    }
    const std::string run_type = b.value("run_type", std::string("iteration"));
    const bool mean = run_type == "aggregate" && b.value("aggregate_name", std::string()) == "mean";
    if (run_type == "aggregate" && !mean) continue;  // median, stddev, cv
    row.error = b.value("error_occurred", false) ? b.value("error_message", std::string("failed")) : "";
    row.tokens_per_second = Counter(b, "tokens_per_second");
    row.speedup = Counter(b, "speedup");
    row.acceptance_rate = Counter(b, "acceptance_rate");
    row.mean_accepted_length = Counter(b, "mean_accepted_length");
    row.mean_draft_length = Counter(b, "mean_draft_length");
    row.time_to_first_token = Counter(b, "time_to_first_token");
    row.h2d_bytes_per_token = Counter(b, "h2d_bytes_per_token");
    row.expert_cache_hit_rate = Counter(b, "expert_cache_hit_rate");
    auto [it, inserted] = groups.try_emplace(run_name);
    if (inserted) order.push_back(run_name);
    Group& g = it->second;
    if (mean) {
      g.row = row;
      g.has_mean = true;
    } else if (!g.has_mean) {
      if (g.iterations == 0) {
        g.row = row;
      } else {
        BenchRow& r = g.row;
        r.tokens_per_second += row.tokens_per_second;
        r.speedup += row.speedup;
        r.acceptance_rate += row.acceptance_rate;
        r.mean_accepted_length += row.mean_accepted_length;
        r.mean_draft_length += row.mean_draft_length;
        r.time_to_first_token += row.time_to_first_token;
        r.h2d_bytes_per_token += row.h2d_bytes_per_token;
        r.expert_cache_hit_rate += row.expert_cache_hit_rate;
        if (r.error.empty()) r.error = row.error;
      }
      ++g.iterations;
    }
  }
  std::vector<BenchRow> rows;
  for (const std::string& run_name : order) {
    Group& g = groups[run_name];
    BenchRow r = g.row;
    if (!g.has_mean && g.iterations > 1) {
      const double n = g.iterations;
      r.tokens_per_second /= n;
      r.speedup /= n;
      r.acceptance_rate /= n;
      r.mean_accepted_length /= n;
      r.mean_draft_length /= n;
      r.time_to_first_token /= n;
      r.h2d_bytes_per_token /= n;
      r.expert_cache_hit_rate /= n;
    }
    rows.push_back(std::move(r));
  }
  if (rows.empty()) return InvalidArgument(name, ": no benchmarks in the file");
  return rows;
}

}  // namespace specgen::report
