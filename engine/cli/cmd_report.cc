// `specgen report RESULTS.json [--svg OUT.svg]`: specgen_bench's results (its JSON from
// --benchmark_format=json or --benchmark_out) as a side-by-side table of the pairings on stdout and,
// with --svg, a chart of tokens/s and acceptance against draft length; with --svg-budget, the speedup
// against the VRAM budget per pairing and acceptance regime.
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "bench/report/bench_results.h"
#include "bench/report/budget_chart.h"
#include "bench/report/report_table.h"
#include "bench/report/svg_chart.h"
#include "engine/cli/command.h"
#include "engine/core/status_macros.h"
#include "engine/io/safe_write.h"

namespace specgen::cli {
namespace {

struct ReportFlags {
  std::string results, svg, svg_budget, title = "specgen_bench";
  std::string subtitle;  // --subtitle; empty: the models and sampling the results name
};

absl::Status RunReport(const ReportFlags& flags) {
  // The chart goes through the safe writer (engine/io/safe_write.h): a unique temporary beside it, never
  // over the results it is drawn from, a symlink planted at a temporary name or a non-regular file.
  SafeWriteOptions output;
  output.inputs = {flags.results};
  output.label = "--svg " + flags.svg;
  if (!flags.svg.empty()) RETURN_IF_ERROR(CheckOutputPath(flags.svg, output));
  SafeWriteOptions budget_output = output;
  budget_output.label = "--svg-budget " + flags.svg_budget;
  if (!flags.svg_budget.empty()) {
    if (flags.svg_budget == flags.svg) return InvalidArgument("--svg-budget ", flags.svg_budget, ": the same file as --svg");
    RETURN_IF_ERROR(CheckOutputPath(flags.svg_budget, budget_output));
  }
  std::ifstream in(flags.results, std::ios::binary);
  if (!in) return NotFound(flags.results, ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  ASSIGN_OR_RETURN(std::vector<report::BenchRow> rows, report::ParseBenchResults(ss.str(), flags.results));
  if (!flags.svg.empty()) {
    // The heading names the device, the models and the sampling that specgen_bench recorded.
    const report::ChartHeading heading = report::HeadingFor(flags.title, report::ParseBenchContext(ss.str()));
    const std::string svg =
        report::RenderSvgChart(rows, heading.title, flags.subtitle.empty() ? heading.subtitle : flags.subtitle);
    RETURN_IF_ERROR(WriteFileSafely(
        flags.svg, {reinterpret_cast<const uint8_t*>(svg.data()), svg.size()}, output));
  }
  if (!flags.svg_budget.empty()) {
    const std::string svg = report::RenderBudgetChart(rows, flags.title);
    RETURN_IF_ERROR(WriteFileSafely(
        flags.svg_budget, {reinterpret_cast<const uint8_t*>(svg.data()), svg.size()}, budget_output));
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
       app.add_option("--svg-budget", f->svg_budget,
                      "also write a chart here: speedup over the target alone against the VRAM budget, one "
                      "line per pairing and acceptance regime (the best fixed k at each budget)");
       app.add_option("--title", f->title,
                      "the chart's title; the device the results were measured on follows it (\" on "
                      "NVIDIA H200\")")
           ->capture_default_str();
       app.add_option("--subtitle", f->subtitle,
                      "the chart's second line (default: the models and the sampling the results name)");
       return [f]() { return RunReport(*f); };
     }}};

}  // namespace
}  // namespace specgen::cli
