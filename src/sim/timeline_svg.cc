#include "sim/timeline_svg.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <vector>

namespace mlaserve {
namespace {

constexpr double kWidth = 900, kChartHeight = 160, kLeft = 70, kRight = 20, kTop = 40, kGap = 50;

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

std::string Fmt(const char* format, double a, double b = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, a, b);
  return buf;
}

// One chart: the per-column maxima of value(point) as a polyline, y from 0 to its largest value.
std::string Chart(std::span<const TimelinePoint> t, double end_s, double top, const std::string& label,
                  const std::function<double(const TimelinePoint&)>& value, bool fraction) {
  std::vector<double> column(kSvgColumns, -1.0);
  for (const TimelinePoint& p : t) {
    const int c = std::min(kSvgColumns - 1, int(p.t_s / end_s * kSvgColumns));
    column[size_t(c)] = std::max(column[size_t(c)], value(p));
  }
  double largest = 1.0;  // a fraction's scale is 0..1; a count's at least 1
  if (!fraction) {
    for (double v : column) largest = std::max(largest, v);
  }
  const double plot_w = kWidth - kLeft - kRight;
  std::string svg = "<text x=\"" + Fmt("%.0f", kLeft) + "\" y=\"" + Fmt("%.0f", top - 8) +
                    "\" font-size=\"13\">" + Escape(label) + "</text>\n";
  svg += "<rect x=\"" + Fmt("%.0f", kLeft) + "\" y=\"" + Fmt("%.0f", top) + "\" width=\"" + Fmt("%.0f", plot_w) +
         "\" height=\"" + Fmt("%.0f", kChartHeight) + "\" fill=\"none\" stroke=\"#999\"/>\n";
  svg += "<text x=\"" + Fmt("%.0f", kLeft - 6) + "\" y=\"" + Fmt("%.0f", top + 10) +
         "\" font-size=\"11\" text-anchor=\"end\">" + (fraction ? Fmt("%.2f", largest) : Fmt("%.0f", largest)) +
         "</text>\n";
  svg += "<text x=\"" + Fmt("%.0f", kLeft - 6) + "\" y=\"" + Fmt("%.0f", top + kChartHeight) +
         "\" font-size=\"11\" text-anchor=\"end\">0</text>\n";
  svg += "<polyline fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"1.5\" points=\"";
  double last = 0;
  for (int c = 0; c < kSvgColumns; ++c) {
    if (column[size_t(c)] >= 0) last = column[size_t(c)];
    const double x = kLeft + plot_w * (c + 0.5) / kSvgColumns;
    const double y = top + kChartHeight * (1.0 - last / largest);
    svg += Fmt("%.1f,%.1f ", x, y);
  }
  svg += "\"/>\n";
  return svg;
}

}  // namespace

std::string TimelineSvg(std::span<const TimelinePoint> t, const std::string& title) {
  const double end_s = t.empty() ? 1.0 : std::max(1e-9, t.back().t_s);
  const double height = kTop + 3 * (kChartHeight + kGap) + 10;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Fmt("%.0f", kWidth) + "\" height=\"" +
                    Fmt("%.0f", height) + "\" font-family=\"sans-serif\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + Fmt("%.0f", kLeft) + "\" y=\"20\" font-size=\"15\">" + Escape(title) + "</text>\n";
  double top = kTop + 14;
  svg += Chart(t, end_s, top, "running requests", [](const TimelinePoint& p) { return double(p.running); }, false);
  top += kChartHeight + kGap;
  svg += Chart(t, end_s, top, "queued requests", [](const TimelinePoint& p) { return double(p.queued); }, false);
  top += kChartHeight + kGap;
  svg += Chart(t, end_s, top, "KV token usage", [](const TimelinePoint& p) { return p.token_usage; }, true);
  svg += "<text x=\"" + Fmt("%.0f", kWidth - kRight) + "\" y=\"" + Fmt("%.0f", top + kChartHeight + 18) +
         "\" font-size=\"11\" text-anchor=\"end\">" + Fmt("simulated time, 0 to %.1f s", end_s) + "</text>\n";
  svg += "</svg>\n";
  return svg;
}

Status WriteTimelineSvg(const std::string& path, std::span<const TimelinePoint> timeline, const std::string& title) {
  std::ofstream out(path);
  if (!(out << TimelineSvg(timeline, title))) return Status::Error(path + ": cannot write");
  return Status::Ok();
}

}  // namespace mlaserve
