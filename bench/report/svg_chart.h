// `specgen report --svg`: tokens/s and acceptance rate against draft length, one line per pairing
// (and budget), as a self-contained SVG written here (no plotting dependency). Fixed draft lengths
// are joined by a polyline; adaptive runs are drawn as open markers right of the largest k.
#pragma once

#include <string>
#include <vector>

#include "bench/report/bench_results.h"

namespace specgen::report {

// Two panels, <g id="tokens_per_second"> and <g id="acceptance_rate">, each with one
// <polyline class="series" data-series="NAME"> per series that has fixed-k points there (every series
// in the first; those that draft in the second), and a legend.
// The heading (<g id="title">): `title`, then `subtitle` on a second line when not empty.
std::string RenderSvgChart(const std::vector<BenchRow>& rows, const std::string& title,
                           const std::string& subtitle = "");

// What the heading says by default, so that a chart read on its own says what it measured: `name` on
// the device ("specgen_bench on NVIDIA H200"), then the models and the sampling; parts the results'
// context lacks are left out.
struct ChartHeading {
  std::string title, subtitle;
};
ChartHeading HeadingFor(const std::string& name, const BenchContext& context);

}  // namespace specgen::report
