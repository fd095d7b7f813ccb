#include "bench/report/report_table.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "engine/core/byte_size.h"

#include "absl/strings/str_format.h"

namespace specgen::report {
namespace {

// A Markdown table padded so that its pipes line up.
std::string Table(const std::vector<std::vector<std::string>>& cells) {
  std::vector<size_t> width;
  for (const auto& row : cells) {
    width.resize(std::max(width.size(), row.size()), 3);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      out += "| " + cell + std::string(width[c] - cell.size(), ' ') + " ";
    }
    out += "|\n";
  };
  line(cells[0]);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  line(rule);
  for (size_t r = 1; r < cells.size(); ++r) line(cells[r]);
  return out;
}

std::string Cell(const BenchRow& r) {
  if (!r.error.empty()) return "error";
  std::string cell = absl::StrFormat("%.1f %.2fx", r.tokens_per_second, r.speedup);
  if (r.k > 0) cell += absl::StrFormat(" %.1f%%", 100 * r.acceptance_rate);
  return cell;
}

}  // namespace

bool LengthBefore(const BenchRow& a, const BenchRow& b) {
  return std::make_tuple(a.adaptive, a.modelled, a.k) < std::make_tuple(b.adaptive, b.modelled, b.k);
}

std::vector<std::string> ProfileOrder(const std::vector<BenchRow>& rows) {
  std::vector<std::string> order;
  for (const BenchRow& r : rows) {
    if (std::find(order.begin(), order.end(), r.Profile()) == order.end()) order.push_back(r.Profile());
  }
  return order;
}

std::vector<std::string> BudgetOrder(const std::vector<BenchRow>& rows) {
  std::vector<std::string> order;
  for (const BenchRow& r : rows) {
    if (std::find(order.begin(), order.end(), r.budget) == order.end()) order.push_back(r.budget);
  }
  // A budget the reader cannot size sorts after the sized ones, as written; the default comes last.
  auto size = [](const std::string& b) -> double {
    if (b.empty()) return 2e300;
    const absl::StatusOr<size_t> bytes = ParseByteSize(b);
    return bytes.ok() ? static_cast<double>(*bytes) : 1e300;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string& a, const std::string& b) { return size(a) < size(b); });
  return order;
}

const BenchRow* BestFixed(const std::vector<BenchRow>& rows, const std::string& profile, const std::string& budget) {
  const BenchRow* best = nullptr;
  for (const BenchRow& r : rows) {
    if (r.Profile() != profile || r.budget != budget || r.adaptive || r.k == 0 || !r.error.empty()) continue;
    if (best == nullptr || r.speedup > best->speedup) best = &r;
  }
  return best;
}

std::string FormatBudgetTable(const std::vector<BenchRow>& rows) {
  const std::vector<std::string> budgets = BudgetOrder(rows);
  const bool regimes = std::any_of(rows.begin(), rows.end(), [](const BenchRow& r) { return !r.acceptance.empty(); });
  // Only where a pairing ran at two budgets or more, or under a regime: else the side-by-side table
  // above says it all.
  bool spans = false;
  for (const std::string& profile : ProfileOrder(rows)) {
    std::vector<std::string> seen;
    for (const BenchRow& r : rows) {
      if (r.Profile() != profile) continue;
      if (std::find(seen.begin(), seen.end(), r.budget) == seen.end()) seen.push_back(r.budget);
    }
    spans |= seen.size() > 1;
  }
  if (!spans && !regimes) return "";
  std::vector<std::vector<std::string>> cells{{"pairing [acceptance]"}};
  for (const std::string& b : budgets) cells[0].push_back(b.empty() ? "default" : b);
  for (const std::string& profile : ProfileOrder(rows)) {
    std::vector<std::string> line{profile};
    for (const std::string& b : budgets) {
      std::string cell;
      if (const BenchRow* best = BestFixed(rows, profile, b)) {
        cell = absl::StrFormat("%.2fx k=%d", best->speedup, best->k);
      }
      for (const BenchRow& r : rows) {
        if (r.Profile() != profile || r.budget != b || !r.adaptive || !r.error.empty()) continue;
        cell += absl::StrFormat("%s%.2fx %s", cell.empty() ? "" : ", ", r.speedup, r.length);
      }
      line.push_back(cell);
    }
    cells.push_back(std::move(line));
  }
  return "speedup over the target alone by VRAM budget (best fixed k; adaptive runs):\n\n" + Table(cells) + "\n";
}

std::vector<std::string> SeriesOrder(const std::vector<BenchRow>& rows) {
  std::vector<std::string> order;
  for (const BenchRow& r : rows) {
    if (std::find(order.begin(), order.end(), r.Series()) == order.end()) order.push_back(r.Series());
  }
  return order;
}

std::string FormatReport(const std::vector<BenchRow>& rows) {
  const std::vector<std::string> series = SeriesOrder(rows);
  // Side by side: one row per draft length, one column per series.
  std::vector<const BenchRow*> lengths;
  for (const BenchRow& r : rows) {
    auto same = [&](const BenchRow* o) { return o->length == r.length; };
    if (std::find_if(lengths.begin(), lengths.end(), same) == lengths.end()) lengths.push_back(&r);
  }
  std::stable_sort(lengths.begin(), lengths.end(),
                   [](const BenchRow* a, const BenchRow* b) { return LengthBefore(*a, *b); });
  std::vector<std::vector<std::string>> side{{"k"}};
  for (const std::string& s : series) side[0].push_back(s);
  for (const BenchRow* length : lengths) {
    std::vector<std::string> line{length->length};
    for (const std::string& s : series) {
      std::string cell;
      for (const BenchRow& r : rows) {
        if (r.Series() == s && r.length == length->length) cell = Cell(r);
      }
      line.push_back(cell);
    }
    side.push_back(std::move(line));
  }

  std::vector<std::vector<std::string>> detail{{"pairing", "budget", "k", "tokens/s", "speedup",
                                                "acceptance", "tokens/pass", "mean k", "TTFT ms"}};
  // The regime and the prediction only where some run has them.
  const bool regimes = std::any_of(rows.begin(), rows.end(), [](const BenchRow& r) { return !r.acceptance.empty(); });
  const bool predicted =
      std::any_of(rows.begin(), rows.end(), [](const BenchRow& r) { return r.predicted_speedup_locality > 0; });
  if (regimes) detail[0].insert(detail[0].begin() + 2, "regime");
  if (predicted) detail[0].insert(detail[0].begin() + 5 + (regimes ? 1 : 0), "predicted");
  // Offload columns only where some run streamed.
  const bool streamed = std::any_of(rows.begin(), rows.end(), [](const BenchRow& r) { return r.h2d_bytes_per_token > 0; });
  if (streamed) {
    detail[0].push_back("MiB/token");
    detail[0].push_back("hit rate");
  }
  std::vector<std::string> errors;
  for (const BenchRow& r : rows) {
    if (!r.error.empty()) {
      detail.push_back({r.pairing, r.budget, r.length, "error"});
      if (regimes) detail.back().insert(detail.back().begin() + 2, r.acceptance.empty() ? "real" : r.acceptance);
      errors.push_back(r.Series() + " k:" + r.length + ": " + r.error);
      continue;
    }
    detail.push_back({r.pairing, r.budget, r.length, absl::StrFormat("%.1f", r.tokens_per_second),
                      absl::StrFormat("%.2fx", r.speedup),
                      r.k > 0 ? absl::StrFormat("%.3f", r.acceptance_rate) : "-",
                      absl::StrFormat("%.2f", r.mean_accepted_length),
                      absl::StrFormat("%.2f", r.mean_draft_length),
                      absl::StrFormat("%.1f", 1000 * r.time_to_first_token)});
    if (predicted) {
      // Uniform routing (the cache's worst case) to locality, as `specgen plan` prints it.
      detail.back().insert(detail.back().begin() + 5,
                           r.predicted_speedup_locality > 0
                               ? absl::StrFormat("%.2f-%.2fx", r.predicted_speedup_uniform, r.predicted_speedup_locality)
                               : "-");
    }
    if (regimes) detail.back().insert(detail.back().begin() + 2, r.acceptance.empty() ? "real" : r.acceptance);
    if (streamed) {
      detail.back().push_back(absl::StrFormat("%.2f", r.h2d_bytes_per_token / 1048576.0));
      detail.back().push_back(r.h2d_bytes_per_token > 0 ? absl::StrFormat("%.3f", r.expert_cache_hit_rate) : "-");
    }
  }
  std::string out = "tokens/s, speedup over the target alone, acceptance rate:\n\n" + Table(side) + "\n" +
                    FormatBudgetTable(rows) + Table(detail);
  for (const std::string& e : errors) out += "error: " + e + "\n";
  return out;
}

}  // namespace specgen::report
