// SVG chart primitives for the HTML report (launch/report/html_page.h): a plot frame with linear or
// logarithmic axes, nice ticks, shaded x-ranges, vertical rules, reduced lines (one pixel column
// of the plot per column of a launch/report/chart_downsample.h reduction), dots and markers under the axis.
// Output is well-formed XML for inline use in XHTML; class names are styled by the page's CSS.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "launch/report/chart_downsample.h"

namespace tetra::launch {

// Text with &, <, >, " and ' escaped for XML content and attribute values.
std::string xml_escape(std::string_view text);

// A number in at most `digits` significant digits, with k/M/G/T above 10,000 ("2.8M", "0.0003").
std::string short_number(double v, int digits = 3);
// Seconds as elapsed time for an axis: "45s", "12m", "1h30m", "2d4h".
std::string elapsed_label(double seconds);

struct ChartAxis {
  enum class Labels { Number, Elapsed };
  double lo = 0, hi = 1;  // hi > lo (the constructor of SvgChart widens an empty range)
  bool log = false;       // log10; needs lo > 0
  Labels labels = Labels::Number;
};

struct AxisTick {
  double value;
  std::string label;
};
// About `target` ticks at 1-2-5 steps inside [lo, hi] (decades, with 2 and 5 when few, on a log axis).
// A linear number axis labels every tick in one unit, decimals as its step needs: 0 0.5M 1M 1.5M.
std::vector<AxisTick> axis_ticks(const ChartAxis& axis, int target);

class SvgChart {
 public:
  static constexpr int kLeft = 62, kRight = 14, kTop = 8, kBottom = 24;

  SvgChart(int width, int height, ChartAxis x, ChartAxis y);

  int plot_width() const { return width_ - kLeft - kRight; }  // also the columns of a reduction
  int plot_height() const { return height_ - kTop - kBottom; }
  double px(double x) const;
  double py(double y) const;
  const ChartAxis& x_axis() const { return x_; }

  // A shaded x-range behind the lines, at least min_width pixels wide, with a tooltip and an
  // optional label at its top left.
  void band(double x0, double x1, const char* css_class, const std::string& title, const std::string& label = "",
            double min_width = 1.0);
  // A vertical rule over the plot's height.
  void rule(double x, const char* css_class, const std::string& title);
  // A reduced series (its columns are this plot's pixel columns).
  void line(const ReducedSeries& series, const char* css_class);
  // Points drawn as small circles, each with a tooltip.
  void dot(double x, double y, const char* css_class, const std::string& title);
  // A small triangle under the plot at x (a skipped step, a restart), with a tooltip.
  void marker(double x, const char* css_class, const std::string& title);

  // The finished <svg> element: grid and tick labels, then bands, lines, dots and markers, then
  // the bands' labels.
  std::string svg(const std::string& aria_label) const;

 private:
  int width_, height_;
  ChartAxis x_, y_;
  std::string bands_, lines_, marks_, labels_;  // labels_: the bands' labels, drawn last
};

}  // namespace tetra::launch
