// SVG chart primitives: frame, ticks, bands, rules, reduced lines, dots, markers.
#include "launch/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tetra::launch {

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // XML 1.0 allows no control characters but tab, newline and carriage return.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
          out += ' ';
        else
          out += c;
    }
  }
  return out;
}

std::string short_number(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  double a = std::fabs(v);
  if (a >= 1e4) {
    while (a >= 1000 && u < 5) {
      a /= 1000;
      v /= 1000;
      ++u;
    }
  }
  // Every digit before the point is shown (2000, not 2e+03).
  if (a >= 1) digits = std::max(digits, static_cast<int>(std::floor(std::log10(a))) + 1);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*g%s", digits, v, units[u]);
  return buf;
}

std::string elapsed_label(double s) {
  char buf[32];
  const long t = std::lround(s);
  if (std::fabs(s) < 60) {
    std::snprintf(buf, sizeof buf, "%gs", std::round(s * 10) / 10);
  } else if (t < 3600) {
    std::snprintf(buf, sizeof buf, t % 60 ? "%ldm%02lds" : "%ldm", t / 60, t % 60);
  } else if (t < 86400) {
    std::snprintf(buf, sizeof buf, (t % 3600) / 60 ? "%ldh%02ldm" : "%ldh", t / 3600, (t % 3600) / 60);
  } else {
    std::snprintf(buf, sizeof buf, (t % 86400) / 3600 ? "%ldd%ldh" : "%ldd", t / 86400, (t % 86400) / 3600);
  }
  return buf;
}

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// The smallest "nice" step (1, 2, 5 × 10^k) that makes at most `target` intervals of `span`.
double nice_step(double span, int target) {
  const double raw = span / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

// Steps of elapsed time that read well: seconds, minutes, hours, days.
double nice_elapsed_step(double span, int target) {
  const double raw = span / std::max(1, target);
  static const double steps[] = {1,    2,     5,     10,    15,    30,    60,     120,    300,    600,
                                 900,  1800,  3600,  7200,  10800, 21600, 43200,  86400,  172800, 604800};
  for (double s : steps)
    if (s >= raw) return s;
  return nice_step(span / 86400, target) * 86400;
}

}  // namespace

std::vector<AxisTick> axis_ticks(const ChartAxis& a, int target) {
  std::vector<AxisTick> ticks;
  auto label = [&](double v) {
    return a.labels == ChartAxis::Labels::Elapsed ? elapsed_label(v) : short_number(v);
  };
  if (a.log) {
    const int d0 = static_cast<int>(std::floor(std::log10(a.lo))), d1 = static_cast<int>(std::ceil(std::log10(a.hi)));
    const bool few = d1 - d0 <= 2;
    const int every = std::max(1, (d1 - d0) / std::max(1, target));
    for (int d = d0; d <= d1; ++d) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (m != 1.0 && !few) continue;
        if (m == 1.0 && !few && (d - d0) % every != 0) continue;
        const double v = m * std::pow(10.0, d);
        if (v >= a.lo * (1 - 1e-9) && v <= a.hi * (1 + 1e-9)) ticks.push_back({v, label(v)});
      }
    }
    return ticks;
  }
  const double span = a.hi - a.lo;
  if (!(span > 0)) return ticks;
  const double step =
      a.labels == ChartAxis::Labels::Elapsed ? nice_elapsed_step(span, target) : nice_step(span, target);
  const double first = std::ceil(a.lo / step);
  for (double i = 0;; ++i) {
    const double v = (first + i) * step;
    if (v > a.hi + step * 1e-9) break;
    ticks.push_back({std::fabs(v) < step * 1e-9 ? 0.0 : v, ""});
  }
  if (a.labels == ChartAxis::Labels::Elapsed) {
    for (AxisTick& t : ticks) t.label = label(t.value);
    return ticks;
  }
  // One unit for the whole axis ("2k 4k ... 20k", not "2000 ... 10k"), decimals as the step needs.
  double big = 0;
  for (const AxisTick& t : ticks) big = std::max(big, std::fabs(t.value));
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  double div = 1;
  if (big >= 1e4)
    while (big / div >= 1000 && u < 5) {
      div *= 1000;
      ++u;
    }
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step / div) + 1e-9)));
  for (AxisTick& t : ticks) {
    if (decimals > 6) {  // tiny values: the exponent form of short_number
      t.label = short_number(t.value);
      continue;
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, t.value / div);
    std::string l = buf;
    if (l.find('.') != std::string::npos) {  // 2.50 → 2.5, 1.0 → 1 (as d3's "~" formats)
      l.erase(l.find_last_not_of('0') + 1);
      if (l.back() == '.') l.pop_back();
    }
    t.label = l == "0" || l == "-0" ? "0" : l + units[u];
  }
  return ticks;
}

SvgChart::SvgChart(int width, int height, ChartAxis x, ChartAxis y) : width_(width), height_(height), x_(x), y_(y) {
  for (ChartAxis* a : {&x_, &y_}) {
    if (a->log && !(a->lo > 0)) a->log = false;
    if (a->hi > a->lo) continue;
    if (a->log) {  // one value: a decade around it
      a->lo /= 3;
      a->hi *= 3;
    } else {
      const double pad = a->lo == 0 ? 1.0 : std::fabs(a->lo) * 0.05;
      a->lo -= pad;
      a->hi += pad;
    }
  }
}

double SvgChart::px(double x) const {
  double f = x_.log ? (std::log10(x) - std::log10(x_.lo)) / (std::log10(x_.hi) - std::log10(x_.lo))
                    : (x - x_.lo) / (x_.hi - x_.lo);
  return kLeft + std::clamp(f, -0.01, 1.01) * plot_width();
}

double SvgChart::py(double y) const {
  double f;
  if (y_.log)
    f = y > 0 ? (std::log10(y) - std::log10(y_.lo)) / (std::log10(y_.hi) - std::log10(y_.lo)) : -0.01;
  else
    f = (y - y_.lo) / (y_.hi - y_.lo);
  return kTop + (1.0 - std::clamp(f, -0.01, 1.01)) * plot_height();
}

void SvgChart::band(double x0, double x1, const char* css_class, const std::string& title, const std::string& label,
                    double min_width) {
  double a = px(x0), b = px(x1);
  if (b - a < min_width) {  // widened around its centre
    const double mid = (a + b) / 2;
    a = mid - min_width / 2;
    b = mid + min_width / 2;
  }
  bands_ += "<rect class=\"" + std::string(css_class) + "\" x=\"" + num(a) + "\" y=\"" + num(kTop) + "\" width=\"" +
            num(b - a) + "\" height=\"" + num(plot_height()) + "\"><title>" + xml_escape(title) + "</title></rect>";
  // The label goes over the lines (a dense curve along the top would hide it), with a halo.
  if (!label.empty() && b - a >= 7.0 * static_cast<double>(label.size()))
    labels_ += "<text class=\"band-label\" x=\"" + num(a + 6) + "\" y=\"" + num(kTop + 12) + "\">" +
               xml_escape(label) + "</text>";
}

void SvgChart::rule(double x, const char* css_class, const std::string& title) {
  const double a = px(x);
  marks_ += "<line class=\"" + std::string(css_class) + "\" x1=\"" + num(a) + "\" x2=\"" + num(a) + "\" y1=\"" +
            num(kTop) + "\" y2=\"" + num(kTop + plot_height()) + "\"><title>" + xml_escape(title) + "</title></line>";
}

void SvgChart::line(const ReducedSeries& series, const char* css_class) {
  if (series.runs.empty()) return;
  std::string d;
  d.reserve(series.runs.size() * 8 + 32);
  for (const ReducedRun& run : series.runs) {
    std::string prev;
    bool single = run.size() == 1;
    for (size_t i = 0; i < run.size(); ++i) {
      const ReducedColumn& c = run[i];
      const std::string x = num(kLeft + c.column + 0.5);
      prev = num(py(c.first));
      d += (i == 0 ? "M" : "L") + x + "," + prev;
      const double a = c.min_before_max ? c.min : c.max, b = c.min_before_max ? c.max : c.min;
      for (double v : {a, b, c.last}) {
        std::string y = num(py(v));
        if (y != prev) {
          d += "V" + y;
          prev = y;
          single = false;
        }
      }
    }
    if (single) d += "h0.1";  // one point: a round cap draws it as a dot
  }
  lines_ += "<path class=\"" + std::string(css_class) + "\" d=\"" + d + "\"/>";
}

void SvgChart::dot(double x, double y, const char* css_class, const std::string& title) {
  marks_ += "<circle class=\"" + std::string(css_class) + "\" cx=\"" + num(px(x)) + "\" cy=\"" + num(py(y)) +
            "\" r=\"2.5\"><title>" + xml_escape(title) + "</title></circle>";
}

void SvgChart::marker(double x, const char* css_class, const std::string& title) {
  const double a = px(x), b = kTop + plot_height();
  marks_ += "<path class=\"" + std::string(css_class) + "\" d=\"M" + num(a) + "," + num(b - 7) + "l4.5,7h-9z\"><title>" +
            xml_escape(title) + "</title></path>";
}

std::string SvgChart::svg(const std::string& aria_label) const {
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" + std::to_string(width_) +
                  "\" height=\"" + std::to_string(height_) + "\" viewBox=\"0 0 " + std::to_string(width_) + " " +
                  std::to_string(height_) + "\" role=\"img\" aria-label=\"" + xml_escape(aria_label) + "\">";
  const double top = kTop, bottom = kTop + plot_height(), left = kLeft, right = kLeft + plot_width();
  s += "<rect class=\"plot\" x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(plot_width()) +
       "\" height=\"" + num(plot_height()) + "\"/>";
  s += bands_;
  std::string grid, labels;
  for (const AxisTick& t : axis_ticks(y_, 5)) {
    const std::string y = num(py(t.value));
    grid += 'M';
    grid += num(left) + "," + y + "H" + num(right);
    labels += "<text class=\"tick\" x=\"" + num(left - 5) + "\" y=\"" + num(py(t.value) + 3.5) +
              "\" text-anchor=\"end\">" + xml_escape(t.label) + "</text>";
  }
  for (const AxisTick& t : axis_ticks(x_, std::max(2, plot_width() / 90))) {
    const std::string x = num(px(t.value));
    grid += 'M';
    grid += x + "," + num(top) + "V" + num(bottom);
    labels += "<text class=\"tick\" x=\"" + x + "\" y=\"" + num(bottom + 15) + "\" text-anchor=\"middle\">" +
              xml_escape(t.label) + "</text>";
  }
  if (!grid.empty()) s += "<path class=\"grid\" d=\"" + grid + "\"/>";
  s += lines_ + marks_ + labels_;
  s += "<path class=\"axis\" d=\"M" + num(left) + "," + num(top) + "V" + num(bottom) + "H" + num(right) + "\"/>";
  s += labels + "</svg>";
  return s;
}

}  // namespace tetra::launch
