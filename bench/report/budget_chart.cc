#include "bench/report/budget_chart.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "absl/strings/str_format.h"
#include "bench/report/report_table.h"

namespace specgen::report {
namespace {

constexpr double kWidth = 560, kHeight = 320, kLeft = 70, kTop = 50;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string RenderBudgetChart(const std::vector<BenchRow>& rows, const std::string& title) {
  const std::vector<std::string> budgets = BudgetOrder(rows);
  const std::vector<std::string> profiles = ProfileOrder(rows);
  // The axis reaches 1.0 (the target alone) and the largest speedup drawn, in halves.
  double y_max = 1.0;
  for (const BenchRow& r : rows) {
    if (r.error.empty() && r.k > 0) y_max = std::max(y_max, r.speedup);
  }
  y_max = std::ceil(y_max * 1.05 * 2) / 2;
  const double legend_top = kTop + kHeight + 55;
  const double width = kLeft + kWidth + 30, height = legend_top + 22 * (profiles.size() + 1) + 10;
  auto px = [&](size_t slot) { return kLeft + kWidth * (slot + 0.5) / static_cast<double>(budgets.size()); };
  auto py = [&](double v) { return kTop + kHeight - kHeight * v / y_max; };
  std::string svg = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"24\" font-size=\"16\" text-anchor=\"middle\">%s</text>\n"
      "<g id=\"speedup_by_budget\">\n"
      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n"
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">speedup over the target alone</text>\n",
      width, height, width, height, width / 2, Escape(title), kLeft, kTop, kWidth, kHeight, kLeft + kWidth / 2,
      kTop - 8);
  const int ticks = static_cast<int>(std::lround(y_max * 2));
  for (int t = 0; t <= ticks; ++t) {
    const double v = 0.5 * t;
    svg += absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.1fx</text>\n",
        kLeft, py(v), kLeft + kWidth, py(v), kLeft - 6, py(v) + 4, v);
  }
  svg += absl::StrFormat(
      "<line class=\"baseline\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\" "
      "stroke-dasharray=\"6,4\"/>\n",
      kLeft, py(1.0), kLeft + kWidth, py(1.0));
  for (size_t b = 0; b < budgets.size(); ++b) {
    svg += absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", px(b),
                           kTop + kHeight + 16, Escape(budgets[b].empty() ? "default" : budgets[b]));
  }
  svg += absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">VRAM budget</text>\n",
                         kLeft + kWidth / 2, kTop + kHeight + 34);
  for (size_t pi = 0; pi < profiles.size(); ++pi) {
    const char* color = kColors[pi % std::size(kColors)];
    std::string points;
    for (size_t b = 0; b < budgets.size(); ++b) {
      if (const BenchRow* best = BestFixed(rows, profiles[pi], budgets[b])) {
        points += absl::StrFormat("%s%.1f,%.1f", points.empty() ? "" : " ", px(b), py(best->speedup));
        svg += absl::StrFormat(
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%s @ %s, k=%d: %.3gx</title></circle>\n",
            px(b), py(best->speedup), color, Escape(profiles[pi]), Escape(budgets[b]), best->k, best->speedup);
      }
      for (const BenchRow& r : rows) {
        if (r.Profile() != profiles[pi] || r.budget != budgets[b] || !r.adaptive || !r.error.empty()) continue;
        svg += absl::StrFormat(
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"white\" stroke=\"%s\" stroke-width=\"2\">"
            "<title>%s @ %s, %s: %.3gx</title></circle>\n",
            px(b), py(r.speedup), color, Escape(profiles[pi]), Escape(budgets[b]), Escape(r.length), r.speedup);
      }
    }
    if (!points.empty()) {
      svg += absl::StrFormat(
          "<polyline class=\"series\" data-series=\"%s\" points=\"%s\" fill=\"none\" stroke=\"%s\" "
          "stroke-width=\"2\"/>\n",
          Escape(profiles[pi]), points, color);
    }
  }
  svg += "</g>\n<g id=\"legend\">\n";
  for (size_t pi = 0; pi < profiles.size(); ++pi) {
    const double y = legend_top + pi * 22;
    svg += absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>"
        "<text x=\"%.1f\" y=\"%.1f\">%s (best fixed k)</text>\n",
        kLeft, y - 4, kLeft + 24, y - 4, kColors[pi % std::size(kColors)], kLeft + 30, y, Escape(profiles[pi]));
  }
  const double y = legend_top + profiles.size() * 22;
  svg += absl::StrFormat(
      "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"white\" stroke=\"#444\" stroke-width=\"2\"/>"
      "<text x=\"%.1f\" y=\"%.1f\">adaptive draft length</text>"
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\" stroke-dasharray=\"6,4\"/>"
      "<text x=\"%.1f\" y=\"%.1f\">target alone (1x)</text>\n",
      kLeft + 12, y - 4, kLeft + 30, y, kLeft + 230, y - 4, kLeft + 254, y - 4, kLeft + 260, y);
  svg += "</g>\n</svg>\n";
  return svg;
}

}  // namespace specgen::report
