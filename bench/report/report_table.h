// `specgen report`'s text: the pairings side by side (one column per pairing and budget, one row per
// draft length), then every benchmark's counters, as Markdown tables with aligned columns so that
// they read in a terminal and paste into a README.
#pragma once

#include <string>
#include <vector>

#include "bench/report/bench_results.h"

namespace specgen::report {

std::string FormatReport(const std::vector<BenchRow>& rows);

// Draft lengths in chart and table order: fixed k ascending, then the adaptive ones by bound.
bool LengthBefore(const BenchRow& a, const BenchRow& b);
// Series names in the order they first appear.
std::vector<std::string> SeriesOrder(const std::vector<BenchRow>& rows);

}  // namespace specgen::report
