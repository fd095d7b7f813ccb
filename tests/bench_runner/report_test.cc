// specgen report: a fixed specgen_bench JSON gives a fixed table, and an SVG that is well-formed
// XML with one polyline per pairing in each panel where it has points.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/report/bench_results.h"
#include "bench/report/budget_chart.h"
#include "bench/report/report_table.h"
#include "bench/report/svg_chart.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen::report {
namespace {

const std::string kData = std::string(SPECGEN_SOURCE_DIR) + "/tests/bench_runner/data/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<BenchRow> FixedRows() {
  auto rows = ParseBenchResults(ReadFile(kData + "results.json"), "results.json");
  EXPECT_TRUE(rows.ok()) << rows.status();
  return rows.ok() ? *rows : std::vector<BenchRow>();
}

TEST(BenchResultsTest, NamesSplitAndRepetitionsMerge) {
  const std::vector<BenchRow> rows = FixedRows();
  ASSERT_EQ(rows.size(), 7u);
  EXPECT_EQ(rows[2].pairing, "greedy");
  EXPECT_TRUE(rows[2].adaptive);
  EXPECT_EQ(rows[2].k, 8);
  // sampled k:1 has two repetitions and no aggregate: their mean.
  EXPECT_EQ(rows[3].Series(), "sampled");
  EXPECT_DOUBLE_EQ(rows[3].tokens_per_second, 210.0);
  EXPECT_DOUBLE_EQ(rows[3].acceptance_rate, 0.7);
  // sampled k:2 has a mean aggregate: it wins over its repetitions; the stddev is ignored.
  EXPECT_DOUBLE_EQ(rows[4].tokens_per_second, 230.5);
  EXPECT_EQ(rows[5].Series(), "big<&> @ 8GiB");
  EXPECT_EQ(rows[5].error, "out of VRAM");
  EXPECT_EQ(rows[6].k, 0);
}

TEST(BenchResultsTest, RejectsWhatIsNotSpecgenBenchJson) {
  EXPECT_THAT(std::string(ParseBenchResults("{", "x.json").status().message()), ::testing::HasSubstr("x.json: not valid JSON"));
  EXPECT_THAT(std::string(ParseBenchResults("{\"a\": 1}", "x.json").status().message()),
              ::testing::HasSubstr("no \"benchmarks\" array"));
  EXPECT_THAT(std::string(ParseBenchResults("{\"benchmarks\": [{\"name\": \"BM_Foo/4\"}]}", "x.json")
                              .status()
                              .message()),
              ::testing::HasSubstr("'BM_Foo/4' is not specgen_bench's"));
  EXPECT_FALSE(ParseBenchResults("{\"benchmarks\": []}", "x.json").ok());
}

TEST(ReportTableTest, FixedResultsGiveTheFixedTable) {
  EXPECT_EQ(FormatReport(FixedRows()), ReadFile(kData + "report_table.txt"));
}

// Runs that streamed experts add bytes per token and the cache's hit rate to the detail table (and
// runs that did not show "-" there); without any, the table is the fixed one above.
TEST(ReportTableTest, StreamedRunsAddOffloadColumns) {
  const std::string json = R"({"benchmarks": [
    {"name": "big/k:0/budget:8GiB/real_time", "run_type": "iteration", "tokens_per_second": 40,
     "speedup": 1, "time_to_first_token": 0.5, "h2d_bytes_per_token": 3145728,
     "expert_cache_hit_rate": 0.75},
    {"name": "big/k:0/budget:80GiB/real_time", "run_type": "iteration", "tokens_per_second": 90,
     "speedup": 1, "time_to_first_token": 0.1}]})";
  auto rows = ParseBenchResults(json, "streamed.json");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_DOUBLE_EQ((*rows)[0].h2d_bytes_per_token, 3145728.0);
  EXPECT_DOUBLE_EQ((*rows)[0].expert_cache_hit_rate, 0.75);
  const std::string table = FormatReport(*rows);
  EXPECT_THAT(table, ::testing::HasSubstr("MiB/token"));
  EXPECT_THAT(table, ::testing::HasSubstr("| 3.00 "));
  EXPECT_THAT(table, ::testing::HasSubstr("| 0.750 "));
  EXPECT_EQ(FormatReport(FixedRows()).find("MiB/token"), std::string::npos);
}

// A minimal XML well-formedness check: every element closed in order, attributes quoted, no bare '&'
// or '<' in text. Returns the element names in document order (empty on a malformed document).
std::vector<std::string> Elements(const std::string& xml, std::string* error) {
  std::vector<std::string> stack, names;
  size_t i = 0;
  if (xml.rfind("<?xml", 0) == 0) i = xml.find("?>") + 2;
  while (i < xml.size()) {
    if (xml[i] == '&') {
      const size_t semi = xml.find(';', i);
      const std::string ent = semi == std::string::npos ? "" : xml.substr(i, semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") {
        *error = "bad entity at " + std::to_string(i);
        return {};
      }
      i = semi + 1;
      continue;
    }
    if (xml[i] != '<') {
      ++i;
      continue;
    }
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) {
      *error = "unclosed tag at " + std::to_string(i);
      return {};
    }
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.find('<') != std::string::npos) {
      *error = "'<' inside a tag: " + tag;
      return {};
    }
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) {
        *error = "</" + tag.substr(1) + "> closes " + (stack.empty() ? "nothing" : stack.back());
        return {};
      }
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    const std::string name = tag.substr(0, tag.find_first_of(" \n"));
    size_t quotes = 0;
    for (char c : tag) quotes += c == '"';
    if (quotes % 2 != 0) {
      *error = "unbalanced quotes in <" + name + ">";
      return {};
    }
    names.push_back(name);
    if (!self_closing) stack.push_back(name);
  }
  if (!stack.empty()) {
    *error = "<" + stack.back() + "> never closed";
    return {};
  }
  return names;
}

TEST(SvgChartTest, WellFormedWithOnePolylinePerPairingInEachPanel) {
  const std::string svg = RenderSvgChart(FixedRows(), "bundled <pair>");
  std::string error;
  const std::vector<std::string> names = Elements(svg, &error);
  ASSERT_FALSE(names.empty()) << error;
  EXPECT_EQ(names[0], "svg");
  const size_t tps = svg.find("<g id=\"tokens_per_second\">"), acc = svg.find("<g id=\"acceptance_rate\">"),
               legend = svg.find("<g id=\"legend\">");
  ASSERT_TRUE(tps < acc && acc < legend && legend != std::string::npos);
  auto series_in = [&](size_t from, size_t to) {
    std::vector<std::string> found;
    const std::string mark = "<polyline class=\"series\" data-series=\"";
    for (size_t at = svg.find(mark, from); at < to; at = svg.find(mark, at + 1)) {
      const size_t start = at + mark.size();
      found.push_back(svg.substr(start, svg.find('"', start) - start));
    }
    return found;
  };
  // The failed series has no point; plain decoding has no acceptance.
  EXPECT_EQ(series_in(tps, acc), (std::vector<std::string>{"greedy", "sampled", "plain"}));
  EXPECT_EQ(series_in(acc, legend), (std::vector<std::string>{"greedy", "sampled"}));
  EXPECT_NE(svg.find("big&lt;&amp;&gt; @ 8GiB"), std::string::npos);  // in the legend, escaped
  EXPECT_NE(svg.find("bundled &lt;pair&gt;"), std::string::npos);
  // One open marker per adaptive run, in each panel.
  size_t adaptive = 0;
  for (size_t at = svg.find("adaptive (up to 8)"); at != std::string::npos; at = svg.find("adaptive (up to 8)", at + 1)) {
    ++adaptive;
  }
  EXPECT_EQ(adaptive, 2u);
  // The target alone (plain, k = 0) is a dashed baseline across the tokens/s panel, and the legend
  // names every kind of mark.
  const size_t baseline = svg.find("<line class=\"baseline\"");
  EXPECT_TRUE(baseline > tps && baseline < acc) << svg;
  for (const char* mark : {"fixed draft length k", "adaptive draft length", "target alone (k = 0)"}) {
    EXPECT_NE(svg.find(mark, legend), std::string::npos) << mark;
  }
}

// The acceptance axis ends at the data's nice maximum (0.5 for rates up to 0.47), not always at 1.
TEST(SvgChartTest, TheAcceptanceAxisFitsTheData) {
  std::vector<BenchRow> rows(2);
  rows[0].pairing = rows[1].pairing = "low";
  rows[0].length = "2", rows[0].k = 2, rows[0].tokens_per_second = 10, rows[0].acceptance_rate = 0.31;
  rows[1].length = "4", rows[1].k = 4, rows[1].tokens_per_second = 9, rows[1].acceptance_rate = 0.45;
  const std::string svg = RenderSvgChart(rows, "t");
  const size_t acc = svg.find("<g id=\"acceptance_rate\">");
  ASSERT_NE(acc, std::string::npos);
  const std::string panel = svg.substr(acc, svg.find("</g>", acc) - acc);
  EXPECT_NE(panel.find(">0.5</text>"), std::string::npos) << panel;
  EXPECT_EQ(panel.find(">1.0</text>"), std::string::npos) << panel;
}

// The heading says what was measured: the device after the name, then the models and the sampling
// from the results' context; results without that context keep the bare name.
TEST(SvgChartTest, TheHeadingNamesTheDeviceModelsAndSampling) {
  const std::string json =
      "{\"context\": {\"specgen_device\": \"NVIDIA H200\", \"specgen_models\": \"a.gguf + b.gguf\", "
      "\"specgen_sampling\": \"greedy\"}, \"benchmarks\": []}";
  const BenchContext context = ParseBenchContext(json);
  EXPECT_EQ(context.device, "NVIDIA H200");
  const ChartHeading heading = HeadingFor("specgen_bench", context);
  EXPECT_EQ(heading.title, "specgen_bench on NVIDIA H200");
  EXPECT_EQ(heading.subtitle, "a.gguf + b.gguf; greedy");
  const std::string svg = RenderSvgChart(FixedRows(), heading.title, heading.subtitle);
  const size_t title = svg.find("<g id=\"title\">");
  ASSERT_NE(title, std::string::npos);
  const std::string group = svg.substr(title, svg.find("</g>", title) - title);
  EXPECT_NE(group.find(">specgen_bench on NVIDIA H200</text>"), std::string::npos) << group;
  EXPECT_NE(group.find(">a.gguf + b.gguf; greedy</text>"), std::string::npos) << group;
  std::string error;
  EXPECT_FALSE(Elements(svg, &error).empty()) << error;

  const ChartHeading bare = HeadingFor("t", ParseBenchContext("{\"benchmarks\": [], \"context\": {\"specgen_device\": 3}}"));
  EXPECT_EQ(bare.title, "t");
  EXPECT_EQ(bare.subtitle, "");
  EXPECT_EQ(ParseBenchContext("not json").device, "");
}

// A --parallel row is its own series ("greedy x4"), beside the one-sequence runs of the pairing.
TEST(BenchResultsTest, ParallelRowsAreTheirOwnSeries) {
  auto rows = ParseBenchResults(
      "{\"benchmarks\": [{\"name\": \"g/k:2/real_time\"}, {\"name\": \"g/k:2/parallel:4/real_time\"}]}", "p.json");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].Series(), "g");
  EXPECT_EQ((*rows)[1].parallel, 4);
  EXPECT_EQ((*rows)[1].Series(), "g x4");
  EXPECT_FALSE(ParseBenchResults("{\"benchmarks\": [{\"name\": \"g/k:2/parallel:0\"}]}", "p.json").ok());
}

TEST(SvgChartTest, TheCheckerCatchesMalformedXml) {
  std::string error;
  EXPECT_TRUE(Elements("<svg><g></svg></g>", &error).empty());
  EXPECT_TRUE(Elements("<svg><text>a & b</text></svg>", &error).empty());
  EXPECT_TRUE(Elements("<svg><g>", &error).empty());
  EXPECT_FALSE(Elements("<svg><g a=\"1\"/><text>&amp;</text></svg>", &error).empty());
}

}  // namespace
}  // namespace specgen::report

namespace specgen::report {
namespace {

std::string OneBenchmark(const std::string& name, const std::string& counters) {
  return "{\"benchmarks\": [{\"name\": \"" + name + "\", \"run_type\": \"iteration\"" + counters + "}]}";
}

// Values no run produces (a NaN or infinite counter, 1e308 tokens/s, a draft length of 2^31) would
// put nan coordinates in the chart or size its axis absurdly: each is an error naming the benchmark
// and the counter where the file is read, and so is an entry of the wrong JSON type.
TEST(BenchResultsTest, AbsurdValuesAreNamedErrors) {
  auto error = [](const std::string& json) {
    auto rows = ParseBenchResults(json, "r.json");
    EXPECT_FALSE(rows.ok()) << json;
    return rows.ok() ? std::string() : std::string(rows.status().message());
  };
  EXPECT_THAT(error(OneBenchmark("g/k:2", ", \"tokens_per_second\": 1e308")),
              ::testing::HasSubstr("r.json: benchmark 'g/k:2': tokens_per_second = 1e+308 is outside [0, 1e+09]"));
  EXPECT_THAT(error(OneBenchmark("g/k:2", ", \"acceptance_rate\": 1.5")),
              ::testing::HasSubstr("acceptance_rate = 1.5 is outside [0, 1]"));
  EXPECT_THAT(error(OneBenchmark("g/k:2", ", \"speedup\": -1")), ::testing::HasSubstr("speedup = -1"));
  EXPECT_THAT(error(OneBenchmark("g/k:2", ", \"speedup\": \"nan\"")),
              ::testing::HasSubstr("speedup is not a number"));
  EXPECT_THAT(error(OneBenchmark("g/k:2147483648", "")), ::testing::HasSubstr("is not specgen_bench's"));
  EXPECT_THAT(error(OneBenchmark("g/k:65", "")), ::testing::HasSubstr("LENGTH at most 64"));
  EXPECT_THAT(error("{\"benchmarks\": [1]}"), ::testing::HasSubstr("\"benchmarks\" holds number, not objects"));
  EXPECT_THAT(error("{\"benchmarks\": [{\"name\": 3}]}"), ::testing::HasSubstr("\"name\" is not a string"));
  EXPECT_THAT(error(OneBenchmark("g/k:2", ", \"error_occurred\": \"yes\"")),
              ::testing::HasSubstr("\"error_occurred\" is not true or false"));
  // The largest values allowed still draw finite coordinates.
  auto rows = ParseBenchResults(OneBenchmark("g/k:64", ", \"tokens_per_second\": 1e9, \"acceptance_rate\": 1"),
                                "r.json");
  ASSERT_TRUE(rows.ok()) << rows.status();
  const std::string svg = RenderSvgChart(*rows, "t");
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

// The seeds of fuzz_bench_results (tests/data/fuzz/) parse, and their chart has no nan or inf.
TEST(BenchResultsFuzzSeeds, ParseAndDrawFinite) {
  const std::string dir = std::string(SPECGEN_SOURCE_DIR) + "/tests/data/fuzz/fuzz_bench_results/";
  auto rows = ParseBenchResults(ReadFile(dir + "seed-results"), "seed-results");
  ASSERT_TRUE(rows.ok()) << rows.status();
  const std::string svg = RenderSvgChart(*rows, "seed");
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}


// The grid of acceptance regimes: a target-alone run (k = 0, run once) starts each regime's line, the
// runs split by regime, the budget table gives the best fixed k per budget and the adaptive runs, and
// the budget chart has one line per regime with the speedups as its points.
TEST(ReportTableTest, AcceptanceRegimesAcrossBudgets) {
  const std::string json = R"({"benchmarks": [
    {"name": "moe/k:0/budget:8GiB", "tokens_per_second": 100, "speedup": 1},
    {"name": "moe/k:2/budget:8GiB/accept:typical", "tokens_per_second": 150, "speedup": 1.5,
     "acceptance_rate": 0.77, "predicted_speedup_uniform": 0.9, "predicted_speedup_locality": 1.4},
    {"name": "moe/k:4/budget:8GiB/accept:typical", "tokens_per_second": 140, "speedup": 1.4, "acceptance_rate": 0.7},
    {"name": "moe/k:modelled8/budget:8GiB/accept:typical", "tokens_per_second": 149, "speedup": 1.49},
    {"name": "moe/k:4/budget:8GiB/accept:flat:0.9", "tokens_per_second": 210, "speedup": 2.1},
    {"name": "moe/k:0/budget:16GiB", "tokens_per_second": 200, "speedup": 1},
    {"name": "moe/k:2/budget:16GiB/accept:typical", "tokens_per_second": 250, "speedup": 1.25},
    {"name": "moe/k:4/budget:16GiB/accept:flat:0.9", "tokens_per_second": 300, "speedup": 1.5}
  ]})";
  absl::StatusOr<std::vector<BenchRow>> rows = ParseBenchResults(json, "grid.json");
  ASSERT_TRUE(rows.ok()) << rows.status();
  // Each k = 0 row appears once per regime (2 budgets x 2 regimes), never under the real draft here.
  int alone = 0;
  for (const BenchRow& r : *rows) {
    if (r.k != 0 || r.adaptive) continue;
    ++alone;
    EXPECT_FALSE(r.acceptance.empty());
  }
  EXPECT_EQ(alone, 4);
  EXPECT_EQ(rows->size(), 10u);
  EXPECT_EQ((*rows)[2].Series(), "moe @ 8GiB [typical]");
  EXPECT_EQ((*rows)[2].Profile(), "moe [typical]");
  EXPECT_TRUE((*rows)[4].modelled && (*rows)[4].adaptive);
  EXPECT_EQ((*rows)[4].k, 8);
  EXPECT_EQ(BudgetOrder(*rows), (std::vector<std::string>{"8GiB", "16GiB"}));
  const std::string table = FormatReport(*rows);
  EXPECT_THAT(table, ::testing::HasSubstr("speedup over the target alone by VRAM budget"));
  EXPECT_THAT(table, ::testing::HasSubstr("| moe [typical]        | 1.50x k=2, 1.49x modelled8 | 1.25x k=2 |"));
  EXPECT_THAT(table, ::testing::HasSubstr("| moe [flat:0.9]       | 2.10x k=4                  | 1.50x k=4 |"));
  EXPECT_THAT(table, ::testing::HasSubstr("0.90-1.40x"));  // the prediction beside the run
  const std::string svg = RenderBudgetChart(*rows, "grid");
  EXPECT_NE(svg.find("data-series=\"moe [typical]\""), std::string::npos);
  EXPECT_NE(svg.find("data-series=\"moe [flat:0.9]\""), std::string::npos);
  EXPECT_NE(svg.find("moe [typical] @ 8GiB, modelled8: 1.49x"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  // Two polylines, two points each.
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 2u);
  // Malformed regime names are refused.
  EXPECT_FALSE(ParseBenchResults(R"({"benchmarks": [{"name": "moe/k:2/accept:"}]})", "x.json").ok());
}

// Routing regimes are series of their own, each with its own target-alone row under each acceptance
// regime (a locality run is never divided by, nor drawn from, the own router's baseline).
TEST(ReportTableTest, RoutingRegimesAreTheirOwnSeries) {
  const std::string json = R"({"benchmarks": [
    {"name": "moe/k:0/budget:8GiB", "tokens_per_second": 100, "speedup": 1},
    {"name": "moe/k:2/budget:8GiB/accept:typical", "tokens_per_second": 150, "speedup": 1.5},
    {"name": "moe/k:0/budget:8GiB/routing:locality", "tokens_per_second": 120, "speedup": 1},
    {"name": "moe/k:2/budget:8GiB/routing:locality/accept:typical", "tokens_per_second": 200, "speedup": 1.67}
  ]})";
  absl::StatusOr<std::vector<BenchRow>> rows = ParseBenchResults(json, "routing.json");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);
  EXPECT_EQ((*rows)[0].Series(), "moe @ 8GiB [typical]");  // the own router's k = 0 under its regime
  EXPECT_EQ((*rows)[2].routing, "locality");
  EXPECT_EQ((*rows)[2].Series(), "moe @ 8GiB (locality) [typical]");
  EXPECT_EQ((*rows)[3].Profile(), "moe (locality) [typical]");
  EXPECT_THAT(FormatReport(*rows), ::testing::HasSubstr("moe (locality) [typical]"));
  EXPECT_FALSE(ParseBenchResults(R"({"benchmarks": [{"name": "moe/k:2/routing:"}]})", "x.json").ok());
}

}  // namespace
}  // namespace specgen::report
