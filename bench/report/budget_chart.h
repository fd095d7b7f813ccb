// `specgen report --svg-budget`: the speedup over the target alone against the VRAM budget, one line
// per pairing and acceptance regime (the best fixed draft length at each budget), adaptive runs as open
// markers, and the target alone as a dashed line at 1x. A self-contained SVG.
#pragma once

#include <string>
#include <vector>

#include "bench/report/bench_results.h"

namespace specgen::report {

// One <polyline class="series" data-series="PROFILE"> per BenchRow::Profile with a fixed-k point.
std::string RenderBudgetChart(const std::vector<BenchRow>& rows, const std::string& title);

}  // namespace specgen::report
