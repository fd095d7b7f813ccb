// `specgen report RESULTS.json [--svg OUT.svg]`: specgen_bench's results (its JSON from
// --benchmark_format=json or --benchmark_out) as a side-by-side table of the pairings on stdout and,
// with --svg, a chart of tokens/s and acceptance against draft length.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "bench/report/bench_results.h"
#include "bench/report/report_table.h"
#include "bench/report/svg_chart.h"
#include "engine/cli/command.h"
#include "engine/core/status_macros.h"

namespace specgen::cli {
namespace {

struct ReportFlags {
  std::string results, svg, title = "specgen_bench";
};

// Writes `text` to `path` through a temporary file in the same folder, so that a failed write leaves
// no partial chart behind.
absl::Status WriteWhole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return NotFound("--svg ", path, ": cannot write ", tmp);
    out << text;
    out.close();
    if (!out) {
      std::filesystem::remove(tmp);
      return DataLoss("--svg ", path, ": writing ", tmp, " failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    return NotFound("--svg ", path, ": ", ec.message());
  }
  return absl::OkStatus();
}

absl::Status RunReport(const ReportFlags& flags) {
  std::ifstream in(flags.results, std::ios::binary);
  if (!in) return NotFound(flags.results, ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  ASSIGN_OR_RETURN(std::vector<report::BenchRow> rows, report::ParseBenchResults(ss.str(), flags.results));
  if (!flags.svg.empty()) {
    RETURN_IF_ERROR(WriteWhole(flags.svg, report::RenderSvgChart(rows, flags.title)));
  }
  std::fputs(report::FormatReport(rows).c_str(), stdout);
  return absl::OkStatus();
}

Registrar kReport{
    {"report", "Tabulate and chart specgen_bench results (its JSON): the pairings side by side",
     [](CLI::App& app) {
       auto f = std::make_shared<ReportFlags>();
       app.add_option("results", f->results,
                      "specgen_bench's JSON (--benchmark_format=json or --benchmark_out=FILE)")
           ->required();
       app.add_option("--svg", f->svg,
                      "also write a chart here: tokens/s and acceptance against draft length, one line "
                      "per pairing");
       app.add_option("--title", f->title, "the chart's title")->capture_default_str();
       return [f]() { return RunReport(*f); };
     }}};

}  // namespace
}  // namespace specgen::cli
