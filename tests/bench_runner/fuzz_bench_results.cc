// libFuzzer target: arbitrary bytes as specgen_bench's results JSON, read as `specgen report` reads
// it. Every input must give rows or an error, never a crash, a sanitizer report or an exception; and
// the rows it accepts must draw a chart without a nan or inf coordinate and print a table.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "bench/report/bench_results.h"
#include "bench/report/report_table.h"
#include "bench/report/svg_chart.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto rows = specgen::report::ParseBenchResults(text, "fuzz/results.json");
  if (!rows.ok()) return 0;
  for (const specgen::report::BenchRow& r : *rows) {
    for (double v : {r.tokens_per_second, r.speedup, r.acceptance_rate, r.mean_accepted_length,
                     r.mean_draft_length, r.time_to_first_token, r.h2d_bytes_per_token,
                     r.expert_cache_hit_rate}) {
      if (!std::isfinite(v) || v < 0) std::abort();  // the reader's checks let a bad value through
    }
  }
  const std::string svg = specgen::report::RenderSvgChart(*rows, "fuzz");
  // Coordinates are printed with %.1f: a nan or inf would appear as such (titles are the input's
  // names, escaped, and may hold the word: only attribute values are checked).
  for (const char* bad : {"=\"nan\"", "=\"-nan\"", "=\"inf\"", "=\"-inf\"", ",nan", ",inf", ",-nan", ",-inf"}) {
    if (svg.find(bad) != std::string::npos) std::abort();
  }
  (void)specgen::report::FormatReport(*rows);
  return 0;
}
