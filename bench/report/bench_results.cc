#include "bench/report/bench_results.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"

namespace specgen::report {
namespace {

// The largest draft length a pairing config accepts (draft_lengths and adaptive_max are in [1, 64]).
constexpr int kMaxDraftLength = 64;

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
      row->modelled = digits.rfind("modelled", 0) == 0;
      row->adaptive = row->modelled || digits.rfind("adaptive", 0) == 0;
      if (row->adaptive) digits = digits.substr(8);  // "adaptive" and "modelled" are 8 letters
      if (!absl::SimpleAtoi(digits, &row->k) || row->k < 0) return false;
      if (row->k > kMaxDraftLength) return false;  // the chart has one x slot per length
      has_k = true;
    } else if (p.rfind("budget:", 0) == 0) {
      row->budget = p.substr(7);
    } else if (p.rfind("accept:", 0) == 0) {
      row->acceptance = p.substr(7);
      if (row->acceptance.empty()) return false;
    } else if (p.rfind("routing:", 0) == 0) {
      row->routing = p.substr(8);
      if (row->routing.empty()) return false;
    } else if (p.rfind("parallel:", 0) == 0) {
      // specgen_bench's --parallel runs at most 64 sequences, the pool's own bound.
      if (!absl::SimpleAtoi(p.substr(9), &row->parallel) || row->parallel < 1 || row->parallel > 64) return false;
    }
  }
  return has_k;
}

// A counter's value, which must lie in [0, most]: a NaN, an infinity or an absurd value (1e308
// tokens/s) would put nan coordinates in the chart or overflow its axis, so it is refused here,
// where the file is read, naming the benchmark and the counter.
struct CounterRange {
  const char* name;
  double most;
};
// Bounds far above anything measured, low enough that every sum and axis computed from them is finite.
constexpr CounterRange kCounters[] = {
    {"tokens_per_second", 1e9},     {"speedup", 1e6},
    {"acceptance_rate", 1.0},       {"mean_accepted_length", kMaxDraftLength + 1},
    {"mean_draft_length", kMaxDraftLength}, {"time_to_first_token", 1e7},
    {"h2d_bytes_per_token", 1e15},  {"expert_cache_hit_rate", 1.0},
    {"predicted_speedup_uniform", 1e6}, {"predicted_speedup_locality", 1e6},
};

absl::StatusOr<double> Counter(const nlohmann::json& b, const char* name, const std::string& file,
                               const std::string& run_name) {
  auto it = b.find(name);
  if (it == b.end()) return 0.0;
  double most = 0;
  for (const CounterRange& c : kCounters) {
    if (std::string_view(c.name) == name) most = c.most;
  }
  // Google Benchmark writes a non-finite counter as the bare word nan or inf, which is not JSON and
  // fails the parse above; a string "nan" or a number out of range lands here.
  if (!it->is_number()) {
    return InvalidArgument(file, ": benchmark '", run_name, "': ", name, " is not a number: ",
                           it->dump().substr(0, 40));
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0 || v > most) {
    return InvalidArgument(file, ": benchmark '", run_name, "': ", name, " = ", v, " is outside [0, ", most,
                           "]");
  }
  return v;
}

// A string or boolean field of a benchmark entry; `fallback` when absent. nlohmann's value() throws
// on an entry that is not an object or a field of another type: here that is a named error.
absl::StatusOr<std::string> StringField(const nlohmann::json& b, const char* key, const std::string& fallback,
                                        const std::string& file) {
  auto it = b.find(key);
  if (it == b.end()) return fallback;
  if (!it->is_string()) return InvalidArgument(file, ": a benchmark's \"", key, "\" is not a string");
  return it->get<std::string>();
}
absl::StatusOr<bool> BoolField(const nlohmann::json& b, const char* key, const std::string& file) {
  auto it = b.find(key);
  if (it == b.end()) return false;
  if (!it->is_boolean()) return InvalidArgument(file, ": a benchmark's \"", key, "\" is not true or false");
  return it->get<bool>();
}

}  // namespace

BenchContext ParseBenchContext(const std::string& json_text) {
  BenchContext c;
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return c;
  auto it = j.find("context");
  if (it == j.end() || !it->is_object()) return c;
  auto text = [&](const char* key) {
    auto v = it->find(key);
    return v != it->end() && v->is_string() ? v->get<std::string>() : std::string();
  };
  c.device = text("specgen_device");
  c.models = text("specgen_models");
  c.sampling = text("specgen_sampling");
  return c;
}

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
    if (!b.is_object()) return InvalidArgument(name, ": \"benchmarks\" holds ", b.type_name(), ", not objects");
    ASSIGN_OR_RETURN(const std::string plain_name, StringField(b, "name", "", name));
    ASSIGN_OR_RETURN(const std::string run_name, StringField(b, "run_name", plain_name, name));
    BenchRow row;
    if (!ParseName(run_name, &row)) {
      return InvalidArgument(name, ": benchmark '", run_name,
                             "' is not specgen_bench's (PAIRING/k:LENGTH, LENGTH at most ", kMaxDraftLength, ")");
    }
    ASSIGN_OR_RETURN(const std::string run_type, StringField(b, "run_type", "iteration", name));
    ASSIGN_OR_RETURN(const std::string aggregate, StringField(b, "aggregate_name", "", name));
    const bool mean = run_type == "aggregate" && aggregate == "mean";
    if (run_type == "aggregate" && !mean) continue;  // median, stddev, cv
    ASSIGN_OR_RETURN(const bool failed, BoolField(b, "error_occurred", name));
    ASSIGN_OR_RETURN(const std::string message, StringField(b, "error_message", "failed", name));
    row.error = failed ? message : "";
    ASSIGN_OR_RETURN(row.tokens_per_second, Counter(b, "tokens_per_second", name, run_name));
    ASSIGN_OR_RETURN(row.speedup, Counter(b, "speedup", name, run_name));
    ASSIGN_OR_RETURN(row.acceptance_rate, Counter(b, "acceptance_rate", name, run_name));
    ASSIGN_OR_RETURN(row.mean_accepted_length, Counter(b, "mean_accepted_length", name, run_name));
    ASSIGN_OR_RETURN(row.mean_draft_length, Counter(b, "mean_draft_length", name, run_name));
    ASSIGN_OR_RETURN(row.time_to_first_token, Counter(b, "time_to_first_token", name, run_name));
    ASSIGN_OR_RETURN(row.h2d_bytes_per_token, Counter(b, "h2d_bytes_per_token", name, run_name));
    ASSIGN_OR_RETURN(row.expert_cache_hit_rate, Counter(b, "expert_cache_hit_rate", name, run_name));
    ASSIGN_OR_RETURN(row.predicted_speedup_uniform, Counter(b, "predicted_speedup_uniform", name, run_name));
    ASSIGN_OR_RETURN(row.predicted_speedup_locality, Counter(b, "predicted_speedup_locality", name, run_name));
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
        r.predicted_speedup_uniform += row.predicted_speedup_uniform;
        r.predicted_speedup_locality += row.predicted_speedup_locality;
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
      r.predicted_speedup_uniform /= n;
      r.predicted_speedup_locality /= n;
    }
    rows.push_back(std::move(r));
  }
  if (rows.empty()) return InvalidArgument(name, ": no benchmarks in the file");
  // The target alone under each acceptance regime of its pairing, budget and routing (the header says
  // why).
  std::vector<BenchRow> out;
  for (const BenchRow& r : rows) {
    const bool plain = r.k == 0 && !r.adaptive && r.acceptance.empty();
    if (!plain) {
      out.push_back(r);
      continue;
    }
    std::vector<std::string> regimes;
    bool real = false;
    for (const BenchRow& o : rows) {
      if (o.pairing != r.pairing || o.budget != r.budget || o.routing != r.routing || (o.k == 0 && !o.adaptive)) {
        continue;
      }
      if (o.acceptance.empty()) {
        real = true;
      } else if (std::find(regimes.begin(), regimes.end(), o.acceptance) == regimes.end()) {
        regimes.push_back(o.acceptance);
      }
    }
    if (real || regimes.empty()) out.push_back(r);
    for (const std::string& a : regimes) {
      out.push_back(r);
      out.back().acceptance = a;
    }
  }
  return out;
}

}  // namespace specgen::report
