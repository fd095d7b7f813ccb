#include "bench/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_format.h"
#include "bench/report/report_table.h"

namespace specgen::report {
namespace {

// kTop leaves room for the two heading lines above the panels' own titles.
constexpr double kPanelWidth = 420, kPanelHeight = 300, kLeft = 70, kTop = 66, kGap = 90;
constexpr double kLegendTop = kTop + kPanelHeight + 55;
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

// The smallest "nice" axis maximum (1, 2 or 5 times a power of ten) at or above `v`.
double NiceMax(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

struct Panel {
  std::string id, title;
  std::function<double(const BenchRow&)> value;
  std::function<bool(const BenchRow&)> shown;
  double y_max = 1;
};

}  // namespace

ChartHeading HeadingFor(const std::string& name, const BenchContext& context) {
  ChartHeading h;
  h.title = context.device.empty() ? name : name + " on " + context.device;
  if (!context.models.empty()) h.subtitle = context.models;
  if (!context.sampling.empty()) h.subtitle += (h.subtitle.empty() ? "" : "; ") + context.sampling;
  return h;
}

std::string RenderSvgChart(const std::vector<BenchRow>& rows, const std::string& title, const std::string& subtitle) {
  const std::vector<std::string> series = SeriesOrder(rows);
  int max_k = 1;
  bool any_adaptive = false, any_modelled = false;
  for (const BenchRow& r : rows) {
    if (r.modelled) {
      any_modelled = true;
    } else if (r.adaptive) {
      any_adaptive = true;
    } else {
      max_k = std::max(max_k, r.k);
    }
  }
  // Right of the largest k: a slot for the adaptive runs, then one for the modelled (bytes-aware) ones.
  const int modelled_slot = max_k + 1 + (any_adaptive ? 1 : 0);
  const double x_slots = max_k + (any_adaptive ? 1.0 : 0.0) + (any_modelled ? 1.0 : 0.0) +
                         (any_adaptive || any_modelled ? 0.5 : 0.0);
  std::vector<Panel> panels(2);
  panels[0] = {"tokens_per_second", "tokens/s", [](const BenchRow& r) { return r.tokens_per_second; },
               [](const BenchRow& r) { return r.error.empty(); }, 1};
  panels[1] = {"acceptance_rate", "acceptance rate", [](const BenchRow& r) { return r.acceptance_rate; },
               [](const BenchRow& r) { return r.error.empty() && r.k > 0; }, 1};
  double tps_max = 0;
  for (const BenchRow& r : rows) {
    if (panels[0].shown(r)) tps_max = std::max(tps_max, r.tokens_per_second);
  }
  panels[0].y_max = NiceMax(tps_max * 1.05);
  // Acceptance is at most 1; the axis stops at the data's nice maximum so low rates are not flat.
  double acc_max = 0;
  for (const BenchRow& r : rows) {
    if (panels[1].shown(r)) acc_max = std::max(acc_max, r.acceptance_rate);
  }
  panels[1].y_max = std::min(1.0, NiceMax(acc_max * 1.05));
  bool any_baseline = false;
  for (const BenchRow& r : rows) any_baseline |= panels[0].shown(r) && r.k == 0 && !r.adaptive;

  const double width = kLeft + 2 * kPanelWidth + kGap + 30;
  const double height = kLegendTop + 22 * ((series.size() + 2) / 3) + 22 + 10;
  std::string svg = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<g id=\"title\"><text x=\"%.0f\" y=\"22\" font-size=\"16\" text-anchor=\"middle\">%s</text>",
      width, height, width, height, width / 2, Escape(title));
  if (!subtitle.empty()) {
    svg += absl::StrFormat("<text x=\"%.0f\" y=\"40\" text-anchor=\"middle\">%s</text>", width / 2,
                           Escape(subtitle));
  }
  svg += "</g>\n";

  for (size_t pi = 0; pi < panels.size(); ++pi) {
    const Panel& panel = panels[pi];
    const double x0 = kLeft + pi * (kPanelWidth + kGap), y0 = kTop + kPanelHeight;
    auto px = [&](double slot) { return x0 + kPanelWidth * (slot + 0.5) / (x_slots + 1); };
    auto py = [&](double v) { return y0 - kPanelHeight * v / panel.y_max; };
    svg += absl::StrFormat("<g id=\"%s\">\n", panel.id);
    svg += absl::StrFormat(
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n", x0, kTop,
        kPanelWidth, kPanelHeight);
    svg += absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                           x0 + kPanelWidth / 2, kTop - 8, Escape(panel.title));
    for (int t = 0; t <= 5; ++t) {  // y grid and labels
      const double v = panel.y_max * t / 5;
      svg += absl::StrFormat(
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
          x0, py(v), x0 + kPanelWidth, py(v), x0 - 6, py(v) + 4, pi == 0 ? absl::StrFormat("%g", v) : absl::StrFormat("%.1f", v));
    }
    for (int k = 0; k <= max_k; ++k) {  // x labels
      svg += absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", px(k), y0 + 16, k);
    }
    if (any_adaptive) {
      svg += absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">adaptive</text>\n",
                             px(max_k + 1), y0 + 16);
    }
    if (any_modelled) {
      svg += absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">modelled</text>\n",
                             px(modelled_slot), y0 + 16);
    }
    svg += absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">draft length k</text>\n",
                           x0 + kPanelWidth / 2, y0 + 34);
    for (size_t si = 0; si < series.size(); ++si) {
      const char* color = kColors[si % std::size(kColors)];
      std::vector<const BenchRow*> fixed;
      for (const BenchRow& r : rows) {
        if (r.Series() != series[si] || !panel.shown(r)) continue;
        if (r.modelled) {
          svg += absl::StrFormat(
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\" fill=\"white\" stroke=\"%s\" "
              "stroke-width=\"2\"><title>%s modelled (up to %d): %.4g</title></rect>\n",
              px(modelled_slot) - 4.5, py(panel.value(r)) - 4.5, color, Escape(series[si]), r.k, panel.value(r));
        } else if (r.adaptive) {
          svg += absl::StrFormat(
              "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"white\" stroke=\"%s\" stroke-width=\"2\">"
              "<title>%s adaptive (up to %d): %.4g</title></circle>\n",
              px(max_k + 1), py(panel.value(r)), color, Escape(series[si]), r.k, panel.value(r));
        } else {
          fixed.push_back(&r);
        }
      }
      if (fixed.empty()) continue;
      // The target alone (k = 0): a dashed line across the tokens/s panel, the baseline every drafted
      // point is read against.
      for (const BenchRow* r : fixed) {
        if (pi != 0 || r->k != 0) continue;
        svg += absl::StrFormat(
            "<line class=\"baseline\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-dasharray=\"6,4\"><title>%s, target alone: %.4g</title></line>\n",
            x0, py(panel.value(*r)), x0 + kPanelWidth, py(panel.value(*r)), color, Escape(series[si]),
            panel.value(*r));
      }
      std::stable_sort(fixed.begin(), fixed.end(),
                       [](const BenchRow* a, const BenchRow* b) { return LengthBefore(*a, *b); });
      std::string points;
      for (const BenchRow* r : fixed) {
        points += absl::StrFormat("%s%.1f,%.1f", points.empty() ? "" : " ", px(r->k), py(panel.value(*r)));
      }
      svg += absl::StrFormat(
          "<polyline class=\"series\" data-series=\"%s\" points=\"%s\" fill=\"none\" stroke=\"%s\" "
          "stroke-width=\"2\"/>\n",
          Escape(series[si]), points, color);
      for (const BenchRow* r : fixed) {
        svg += absl::StrFormat("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%s k=%d: %.4g</title></circle>\n",
                               px(r->k), py(panel.value(*r)), color, Escape(series[si]), r->k, panel.value(*r));
      }
    }
    svg += "</g>\n";
  }
  svg += "<g id=\"legend\">\n";
  for (size_t si = 0; si < series.size(); ++si) {
    const double x = kLeft + (si % 3) * 260, y = kLegendTop + (si / 3) * 22;
    svg += absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>"
        "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
        x, y - 4, x + 24, y - 4, kColors[si % std::size(kColors)], x + 30, y, Escape(series[si]));
  }
  // What each kind of mark means.
  const double y = kLegendTop + ((series.size() + 2) / 3) * 22;
  double x = kLeft;
  svg += absl::StrFormat(
      "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#444\"/><text x=\"%.1f\" y=\"%.1f\">fixed draft "
      "length k</text>\n", x + 12, y - 4, x + 30, y);
  x += 200;
  if (any_adaptive) {
    svg += absl::StrFormat(
        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"white\" stroke=\"#444\" stroke-width=\"2\"/>"
        "<text x=\"%.1f\" y=\"%.1f\">adaptive draft length</text>\n", x + 12, y - 4, x + 30, y);
    x += 200;
  }
  if (any_baseline) {
    svg += absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\" stroke-dasharray=\"6,4\"/>"
        "<text x=\"%.1f\" y=\"%.1f\">target alone (k = 0)</text>\n", x, y - 4, x + 24, y - 4, x + 30, y);
  }
  svg += "</g>\n</svg>\n";
  return svg;
}

}  // namespace specgen::report
