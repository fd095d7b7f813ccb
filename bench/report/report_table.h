// `specgen report`'s text: the pairings side by side (one column per pairing and budget, one row per
// draft length), then every benchmark's counters, as Markdown tables with aligned columns so that
// they read in a terminal and paste into a README.
#pragma once

#include <string>
#include <vector>

#include "bench/report/bench_results.h"

namespace specgen::report {

std::string FormatReport(const std::vector<BenchRow>& rows);

// Speedup over the target alone against budget, one row per pairing and acceptance regime, one column
// per budget: the best fixed k's speedup there and the adaptive runs'. Empty unless a pairing ran at
// more than one budget or some run under an acceptance regime.
std::string FormatBudgetTable(const std::vector<BenchRow>& rows);

// Budgets in chart order: by size, the default (empty) last.
std::vector<std::string> BudgetOrder(const std::vector<BenchRow>& rows);
// The best speedup of the fixed k >= 1 rows of a pairing and regime (BenchRow::Profile) at a budget;
// null when none ran without error.
const BenchRow* BestFixed(const std::vector<BenchRow>& rows, const std::string& profile, const std::string& budget);

// Draft lengths in chart and table order: fixed k ascending, then the adaptive ones by bound, then the
// modelled ones.
bool LengthBefore(const BenchRow& a, const BenchRow& b);
// Series names in the order they first appear.
std::vector<std::string> SeriesOrder(const std::vector<BenchRow>& rows);
// BenchRow::Profile names in the order they first appear.
std::vector<std::string> ProfileOrder(const std::vector<BenchRow>& rows);

}  // namespace specgen::report
