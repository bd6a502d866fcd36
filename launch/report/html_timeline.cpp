// The timeline section of the report page: one row per attempt on the job's wall-time axis.
// Evaluations, checkpoint saves and loads and lost steps are merged per pixel, so a long run with
// thousands of them draws at most one rectangle per pixel column and kind.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "launch/report/html_sections.h"
#include "launch/report/format.h"
#include "launch/report/svg_chart.h"

namespace tetra::launch::html {

std::string category_class(const std::string& name) {
  std::string s = "c-" + name;
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

namespace {

constexpr double kLeft = 84, kRight = 200, kTop = 22, kRow = 28, kBar = 18;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

struct Spans {
  const char* kind;         // "evaluation", ...
  std::string css;
  double lane_top, lane_height;  // inside the row's bar: evaluations and saves on lanes of their own
  double min_width;              // pixels
  double min_opacity;            // of a group that covers little of its pixels' time
  std::vector<std::pair<double, double>> times;  // Unix seconds
  std::vector<std::string> what;                  // a tooltip per span
};

class Timeline {
 public:
  explicit Timeline(const GoodputReport& r) : r_(r) {
    width_ = kPageWidth - kLeft - kRight;
    span_ = std::max(r.wall_seconds, 1e-9);
  }

  double px(double unix_time) const {
    return kLeft + std::clamp((unix_time - r_.wall_start) / span_, 0.0, 1.0) * width_;
  }

  void rect(std::string& out, double x0, double x1, double y, const std::string& css, const std::string& title,
            double height = kBar, double opacity = 1.0) const {
    const double w = std::max(x1 - x0, 1.0);
    out += "<rect class=\"" + css + "\" x=\"" + num(x0) + "\" y=\"" + num(y) + "\" width=\"" + num(w) +
           "\" height=\"" + num(height) + "\"";
    if (opacity < 1.0) {
      char buf[40];
      std::snprintf(buf, sizeof buf, " fill-opacity=\"%.2f\"", opacity);
      out += buf;
    }
    out += "><title>" + xml_escape(title) + "</title></rect>";
  }

  // Spans of one kind merged where they touch on screen. A merged group that covers only part of
  // its pixels' time (a save every few minutes of a two-day job) is drawn that much fainter.
  void merged(std::string& out, const Spans& s, double y) const {
    size_t i = 0;
    while (i < s.times.size()) {
      double x0 = px(s.times[i].first), x1 = std::max(px(s.times[i].second), x0 + s.min_width);
      double seconds = s.times[i].second - s.times[i].first;
      size_t j = i + 1;
      while (j < s.times.size() && px(s.times[j].first) <= x1 + 0.5) {
        x1 = std::max(x1, std::max(px(s.times[j].second), px(s.times[j].first) + s.min_width));
        seconds += s.times[j].second - s.times[j].first;
        ++j;
      }
      const std::string title = j - i == 1 ? s.what[i]
                                            : std::to_string(j - i) + " " + s.kind + "s, " +
                                                  report_format::duration(seconds) + " together";
      const double density = std::clamp(seconds / span_ * width_ / (x1 - x0), s.min_opacity, 1.0);
      rect(out, x0, x1, y + s.lane_top, s.css, title, s.lane_height, density);
      i = j;
    }
  }

  std::string render() const {
    const auto& attempts = r_.attempts;
    const double height = kTop + kRow * static_cast<double>(attempts.size()) + 6;
    std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" width=\"" +
                    std::to_string(kPageWidth) + "\" height=\"" + num(height) + "\" viewBox=\"0 0 " +
                    std::to_string(kPageWidth) + " " + num(height) + "\" role=\"img\" aria-label=\"attempts on the "
                    "job's wall-time axis\">";
    // Time axis on top.
    ChartAxis axis;
    axis.lo = 0;
    axis.hi = span_;
    axis.labels = ChartAxis::Labels::Elapsed;
    std::string grid;
    for (const AxisTick& t : axis_ticks(axis, std::max(2, static_cast<int>(width_ / 90)))) {
      const double x = kLeft + t.value / span_ * width_;
      grid += 'M';
      grid += num(x) + "," + num(kTop - 4) + "V" + num(height - 4);
      s += "<text class=\"tick\" x=\"" + num(x) + "\" y=\"" + num(kTop - 8) + "\" text-anchor=\"middle\">" +
           xml_escape(t.label) + "</text>";
    }
    s += "<path class=\"grid\" d=\"" + grid + "\"/>";

    for (size_t i = 0; i < attempts.size(); ++i) {
      const AttemptSummary& a = attempts[i];
      const bool last = i + 1 == attempts.size();
      const double y = kTop + kRow * static_cast<double>(i) + (kRow - kBar) / 2;
      s += "<text class=\"row-label\" x=\"" + num(kLeft - 8) + "\" y=\"" + num(y + kBar - 5) +
           "\" text-anchor=\"end\">attempt " + std::to_string(a.attempt) + "</text>";
      if (i > 0 && a.start > attempts[i - 1].end)
        rect(s, px(attempts[i - 1].end), px(a.start), y, "c-idle",
             "idle between attempts: " + report_format::duration(a.start - attempts[i - 1].end));
      // Startup (the checkpoint loads inside it are drawn over it), then the attempt's working time.
      double work = a.start + a.startup_seconds;
      for (const JobSpan& l : r_.checkpoint_loads)
        if (l.attempt == a.attempt && l.start <= work) work += l.end - l.start;
      work = std::min(work, a.end);
      rect(s, px(a.start), px(work), y, "c-startup",
           "attempt " + std::to_string(a.attempt) + " startup: " + report_format::duration(a.startup_seconds) +
               " (process start to first step, less checkpoint load)");
      if (a.end > work)
        rect(s, px(work), px(a.end), y, "c-productive",
             "attempt " + std::to_string(a.attempt) + " on " + (a.host.empty() ? "?" : a.host) + ", " +
                 std::to_string(a.world_size) + " ranks: " +
                 (a.steps ? "steps " + std::to_string(a.first_step) + ".." + std::to_string(a.last_step)
                          : std::string("no step")) +
                 ", " + report_format::ended(a, last));
      for (const Spans& sp : spans_of(a.attempt)) merged(s, sp, y);
      // How it ended, right of the row.
      const bool crashed = a.end_reason.empty() && !last;
      const bool ok = a.end_reason == "finished";
      s += "<text class=\"row-end" + std::string(crashed ? " bad" : ok ? "" : " warn") + "\" x=\"" +
           num(px(a.end) + 6) + "\" y=\"" + num(y + kBar - 5) + "\">" +
           xml_escape((crashed ? "✕ " : "") + report_format::ended(a, last)) + "</text>";
    }
    return s + "</svg>";
  }

 private:
  std::vector<Spans> spans_of(int attempt) const {
    std::vector<Spans> out;
    Spans lost{"lost step run", "c-lost-to-failures", 0, kBar, 3.0, 1.0, {}, {}};
    for (const LostSteps& l : r_.lost_steps)
      if (l.attempt == attempt) {
        lost.times.push_back({l.start, l.end});
        lost.what.push_back("steps " + std::to_string(l.first_step) + ".." + std::to_string(l.last_step) +
                            " lost to failures: " + report_format::duration(l.end - l.start));
      }
    auto add = [&](const std::vector<JobSpan>& spans, const char* kind, const char* css, double top, double height) {
      Spans s{kind, css, top, height, 1.0, 0.45, {}, {}};
      for (const JobSpan& j : spans)
        if (j.attempt == attempt) {
          s.times.push_back({j.start, j.end});
          s.what.push_back(std::string(kind) + (j.step ? " at step " + std::to_string(*j.step) : std::string()) +
                           ": " + report_format::duration(j.end - j.start) + (j.failed ? " (failed)" : ""));
        }
      out.push_back(std::move(s));
    };
    out.push_back(std::move(lost));
    add(r_.evaluations, "evaluation", "c-evaluation", kBar / 3, kBar / 3);
    add(r_.checkpoint_saves, "checkpoint save", "c-checkpoint-save", 2 * kBar / 3, kBar / 3);
    add(r_.checkpoint_loads, "checkpoint load", "c-checkpoint-load", 0, kBar);
    return out;
  }

  const GoodputReport& r_;
  double width_, span_;
};

}  // namespace

std::string timeline(const GoodputReport& report) { return Timeline(report).render(); }

}  // namespace tetra::launch::html
