// The curves section of the report page: metrics.jsonl against step and against wall time.
// Against step, each step is drawn once, from its kept execution; executions lost to failures are
// drawn faded over a red band, so a restart's redone steps show both. Against wall time, every
// execution is drawn where it happened, attempt by attempt, with idle gaps between attempts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <ranges>
#include <string>
#include <vector>

#include "launch/report/html_sections.h"
#include "launch/report/chart_downsample.h"
#include "launch/report/format.h"
#include "launch/report/svg_chart.h"
#include "runtime/text_join.h"

namespace tetra::launch::html {

namespace {

constexpr int kChartHeight = 200;
constexpr double kLostMinWidth = 3;  // pixels: a few lost steps of a long run stay visible
constexpr size_t kMaxDots = 60;      // evaluations drawn as dots as well as a line up to this many

struct SeriesSpec {
  std::string column;
  std::string label;
  std::string css;  // colour class
};

struct CurveSpec {
  std::string id, title, note;
  std::vector<SeriesSpec> series;
  bool from_zero = false;  // the y axis starts at 0
  bool may_log = false;    // a logarithmic y axis when the values span more than ~2 decades
  bool dots = false;       // the second series is sparse (evaluations): dots as well as a line
};

// Which rows of the metrics go where.
struct Rows {
  const std::vector<double>* step = nullptr;
  const std::vector<double>* attempt = nullptr;
  const std::vector<double>* time = nullptr;
  std::vector<size_t> kept;  // one row per step number, in step order
  std::vector<size_t> lost;  // executions whose results were thrown away, in file order
  std::vector<size_t> timed; // rows with a time, in file order
  std::vector<size_t> skipped;  // rows of skipped (non-finite) steps
  std::map<int, std::pair<double, double>> kept_span;  // attempt → first and last step it kept
  double step_lo = 0, step_hi = 0;
};

int attempt_of(const Rows& r, size_t row) {
  if (!r.attempt) return 0;
  const double a = (*r.attempt)[row];
  return std::isfinite(a) ? static_cast<int>(a) : 0;
}

// A row is kept when it is the last line of its step and the ledger did not count that execution
// as lost (docs/goodput.md, "Which step executions are kept"); other rows are lost executions.
Rows classify(const GoodputReport& report, const MetricsTable& m) {
  Rows r;
  r.step = m.column("step");
  r.attempt = m.column("attempt");
  r.time = m.column("time");
  if (!r.step) return r;
  const std::vector<double>& step = *r.step;
  std::map<int, std::vector<const LostSteps*>> lost_by_attempt;
  for (const LostSteps& l : report.lost_steps) lost_by_attempt[l.attempt].push_back(&l);
  auto in_lost_run = [&](int attempt, int64_t s) {
    auto it = lost_by_attempt.find(attempt);
    if (it == lost_by_attempt.end()) return false;
    for (const LostSteps* l : it->second)
      if (s >= l->first_step && s <= l->last_step) return true;
    return false;
  };
  // The last row of each step number.
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (size_t i = 0; i < m.rows; ++i)
    if (std::isfinite(step[i])) {
      lo = std::min(lo, static_cast<int64_t>(step[i]));
      hi = std::max(hi, static_cast<int64_t>(step[i]));
    }
  if (lo > hi) return r;
  r.step_lo = static_cast<double>(lo);
  r.step_hi = static_cast<double>(hi);
  std::vector<bool> last(m.rows, false);
  if (static_cast<uint64_t>(hi - lo) <= 4 * m.rows + 1024) {
    std::vector<int64_t> last_row(static_cast<size_t>(hi - lo + 1), -1);
    for (size_t i = 0; i < m.rows; ++i)
      if (std::isfinite(step[i])) last_row[static_cast<size_t>(static_cast<int64_t>(step[i]) - lo)] = static_cast<int64_t>(i);
    for (int64_t i : last_row)
      if (i >= 0) last[static_cast<size_t>(i)] = true;
  } else {  // sparse step numbers
    std::map<int64_t, size_t> last_row;
    for (size_t i = 0; i < m.rows; ++i)
      if (std::isfinite(step[i])) last_row[static_cast<int64_t>(step[i])] = i;
    for (const auto& [s, i] : last_row) last[i] = true;
  }
  const std::vector<double>* skipped = m.column("skipped");
  const std::vector<double>* loss = m.column("loss");
  for (size_t i = 0; i < m.rows; ++i) {
    if (!std::isfinite(step[i])) continue;
    const bool kept = last[i] && !in_lost_run(attempt_of(r, i), static_cast<int64_t>(step[i]));
    (kept ? r.kept : r.lost).push_back(i);
    if (r.time && std::isfinite((*r.time)[i])) r.timed.push_back(i);
    // A skipped update is marked; a non-finite loss without the mark (train.on_nonfinite: stop) too.
    if ((skipped && (*skipped)[i] == 1.0) || (loss && !std::isfinite((*loss)[i]))) r.skipped.push_back(i);
  }
  if (!std::is_sorted(r.kept.begin(), r.kept.end(), [&](size_t a, size_t b) { return step[a] < step[b]; }))
    std::stable_sort(r.kept.begin(), r.kept.end(), [&](size_t a, size_t b) { return step[a] < step[b]; });
  for (size_t row : r.kept) {
    auto [it, fresh] = r.kept_span.try_emplace(attempt_of(r, row), step[row], step[row]);
    if (!fresh) {
      it->second.first = std::min(it->second.first, step[row]);
      it->second.second = std::max(it->second.second, step[row]);
    }
  }
  return r;
}

// Every column whose name says it is a part of a step's time (NAME_ms, and exposed_comm_ms_AXIS per
// mesh axis), for the "inside each step" chart.
std::vector<SeriesSpec> step_parts(const MetricsTable& m) {
  std::vector<SeriesSpec> out;
  auto label_of = [](const std::string& name) -> std::string {
    static const std::map<std::string, std::string> known = {
        {"exposed_comm_ms", "exposed communication"}, {"data_wait_ms", "data wait"},
        {"bubble_ms", "pipeline bubble"},             {"pipeline_bubble_ms", "pipeline bubble"},
        {"recompute_ms", "recomputation"},            {"optimizer_ms", "optimizer"},
        {"host_overhead_ms", "host overhead"}};
    auto it = known.find(name);
    if (it != known.end()) return it->second;
    const std::string comm = "exposed_comm_ms_";
    if (name.rfind(comm, 0) == 0) return "exposed communication, " + name.substr(comm.size());
    return name.substr(0, name.size() - 3);
  };
  // Known parts first, in this order, then any other *_ms column.
  std::vector<std::string> names;
  for (const char* n : {"exposed_comm_ms", "data_wait_ms", "bubble_ms", "pipeline_bubble_ms", "recompute_ms",
                        "optimizer_ms", "host_overhead_ms"})
    if (m.column(n)) names.push_back(n);
  std::vector<std::string> comm_axes, others;
  for (const std::string& n : m.names) {
    const bool per_axis = n.rfind("exposed_comm_ms_", 0) == 0;  // exposed_comm_ms_tp, ...
    if (!per_axis && (n.size() <= 3 || n.compare(n.size() - 3, 3, "_ms") != 0 || n == "step_ms")) continue;
    if (std::find(names.begin(), names.end(), n) != names.end()) continue;
    (per_axis ? comm_axes : others).push_back(n);
  }
  names.insert(names.begin() + (m.column("exposed_comm_ms") ? 1 : 0), comm_axes.begin(), comm_axes.end());
  names.insert(names.end(), others.begin(), others.end());
  for (size_t i = 0; i < names.size(); ++i)
    out.push_back({names[i], label_of(names[i]), "s" + std::to_string(i % 8)});
  return out;
}

std::vector<CurveSpec> curve_specs(const MetricsTable& m) {
  std::vector<CurveSpec> specs = {
      {"loss", "loss", "training loss of each step; validation loss at each evaluation",
       {{"loss", "training", "s0"}, {"val_loss", "validation", "s1"}}, false, true, true},
      {"lr", "learning rate", "", {{"lr", "learning rate", "s2"}}, true, false, false},
      {"grad-norm", "gradient norm", "global, before clipping", {{"grad_norm", "gradient norm", "s3"}}, false, true,
       false},
      {"tokens-per-s", "throughput", "tokens per second of each step", {{"tokens_per_s", "tokens/s", "s4"}}, true,
       false, false},
      {"step-ms", "step time", "milliseconds", {{"step_ms", "step time", "s5"}}, true, false, false},
  };
  std::vector<SeriesSpec> parts = step_parts(m);
  if (!parts.empty())
    specs.push_back({"step-parts", "inside each step",
                     "milliseconds: exposed communication (per axis where logged), data wait, pipeline bubble, ...",
                     parts, true, false, false});
  specs.push_back({"memory", "memory", "peak device memory, GiB", {{"mem_peak_gib", "peak memory", "s6"}}, true,
                   false, false});
  return specs;
}

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

ChartAxis value_axis(const CurveSpec& spec, Range r) {
  ChartAxis a;
  if (spec.may_log && r.lo > 0 && r.hi / r.lo > 200) {
    a.log = true;
    a.lo = r.lo / 1.15;
    a.hi = r.hi * 1.15;
    return a;
  }
  if (spec.from_zero && r.lo >= 0) r.lo = 0;
  const double pad = (r.hi - r.lo) * 0.05;
  a.lo = spec.from_zero && r.lo == 0 ? 0 : r.lo - pad;
  a.hi = r.hi + pad;
  return a;
}

std::string legend(const CurveSpec& spec, const std::vector<bool>& present, bool lost, bool skipped, bool restarts) {
  std::string s = "<div class=\"legend\">";
  for (size_t i = 0; i < spec.series.size(); ++i)
    if (present[i])
      s += "<span class=\"key\"><i class=\"sw " + spec.series[i].css + "\"></i>" + xml_escape(spec.series[i].label) +
           "</span>";
  if (lost) s += "<span class=\"key\"><i class=\"sw lost-key\"></i>lost to failures</span>";
  if (restarts) s += "<span class=\"key\"><i class=\"sw restart-key\"></i>restart</span>";
  if (skipped) s += "<span class=\"key\"><i class=\"tri\"></i>skipped non-finite step</span>";
  return s + "</div>";
}

struct View {
  bool by_time = false;
  ChartAxis x;
  std::string x_title;
};

class CurvesRenderer {
 public:
  CurvesRenderer(const GoodputReport& report, const MetricsTable& m) : report_(report), m_(m), rows_(classify(report, m)) {}

  std::string render() {
    if (!rows_.step || rows_.kept.empty()) {
      std::string why = m_.rows == 0 ? "metrics.jsonl has no lines yet" : "metrics.jsonl has no \"step\" numbers";
      return "<p class=\"note\">No curves: " + why + ".</p>";
    }
    View by_step;
    by_step.x.lo = rows_.step_lo - 0.5;
    by_step.x.hi = rows_.step_hi + 0.5;
    by_step.x_title = "step";
    View by_time;
    by_time.by_time = true;
    by_time.x.labels = ChartAxis::Labels::Elapsed;
    by_time.x.lo = 0;
    double end = report_.wall_seconds;
    for (size_t i : rows_.timed) end = std::max(end, (*rows_.time)[i] - report_.wall_start);
    by_time.x.hi = end;
    by_time.x_title = "wall time since the job's start (" + report_format::utc(report_.wall_start) + " UTC)";

    std::string step_charts, time_charts;
    for (const CurveSpec& spec : curve_specs(m_)) {
      std::vector<const std::vector<double>*> cols;
      std::vector<bool> present;
      Range range;
      for (const SeriesSpec& s : spec.series) {
        const std::vector<double>* c = m_.column(s.column);
        bool any = false;
        if (c)
          for (double v : *c)
            if (std::isfinite(v)) {
              range.add(v);
              any = true;
            }
        cols.push_back(any ? c : nullptr);
        present.push_back(any);
      }
      if (range.empty()) continue;
      const ChartAxis y = value_axis(spec, range);
      step_charts += chart(spec, cols, present, by_step, y);
      if (rows_.time) time_charts += chart(spec, cols, present, by_time, y);
    }
    std::string s = "<div class=\"xswitch\">";
    s += "<input type=\"radio\" name=\"xaxis\" id=\"x-step\" checked=\"checked\"/><label for=\"x-step\">against step</label>";
    s += "<input type=\"radio\" name=\"xaxis\" id=\"x-time\"/><label for=\"x-time\">against wall time</label>";
    s += "<div class=\"by-step\">" + step_charts + "</div>";
    s += "<div class=\"by-time\">" +
         (rows_.time ? time_charts : std::string("<p class=\"note\">metrics.jsonl has no \"time\" field.</p>")) +
         "</div></div>";
    s += notes();
    return s;
  }

 private:
  double x_of(const View& v, size_t row) const {
    return v.by_time ? (*rows_.time)[row] - report_.wall_start : (*rows_.step)[row];
  }

  // Attempt spans, idle gaps, lost steps and restarts behind the lines of one chart.
  void context(SvgChart& c, const View& v) const {
    const auto& attempts = report_.attempts;
    if (v.by_time) {
      for (size_t i = 0; i < attempts.size(); ++i) {
        const AttemptSummary& a = attempts[i];
        const double s = a.start - report_.wall_start, e = a.end - report_.wall_start;
        c.band(s, e, i % 2 ? "att-b" : "att-a",
               "attempt " + std::to_string(a.attempt) + ": " + report_format::duration(a.end - a.start) + ", " +
                   report_format::ended(a, i + 1 == attempts.size()),
               "attempt " + std::to_string(a.attempt));
        if (i > 0) {
          const double prev_end = attempts[i - 1].end - report_.wall_start;
          if (s > prev_end)
            c.band(prev_end, s, "idle", "idle between attempts: " + report_format::duration(s - prev_end));
          c.rule(s, "restart", "attempt " + std::to_string(a.attempt) + " starts" + restored_text(a));
        }
      }
      for (const LostSteps& l : report_.lost_steps)
        c.band(l.start - report_.wall_start, l.end - report_.wall_start, "lost", lost_text(l), "", kLostMinWidth);
      return;
    }
    // By step: each attempt over the steps it kept.
    size_t i = 0;
    for (const auto& [a, span] : rows_.kept_span) {
      c.band(span.first - 0.5, span.second + 0.5, i % 2 ? "att-b" : "att-a",
             "attempt " + std::to_string(a) + " kept steps " + std::to_string(static_cast<int64_t>(span.first)) + ".." +
                 std::to_string(static_cast<int64_t>(span.second)),
             a > 0 ? "attempt " + std::to_string(a) : "");
      if (i > 0) {
        const AttemptSummary* s = summary(a);
        c.rule(span.first - 0.5, "restart",
               "attempt " + std::to_string(a) + " takes over at step " + std::to_string(static_cast<int64_t>(span.first)) +
                   (s ? restored_text(*s) : std::string()));
      }
      ++i;
    }
    for (const LostSteps& l : report_.lost_steps)
      c.band(static_cast<double>(l.first_step) - 0.5, static_cast<double>(l.last_step) + 0.5, "lost", lost_text(l), "",
             kLostMinWidth);
  }

  std::string chart(const CurveSpec& spec, const std::vector<const std::vector<double>*>& cols,
                    const std::vector<bool>& present, const View& v, const ChartAxis& y) const {
    SvgChart c(kPageWidth, kChartHeight, v.x, y);
    context(c, v);
    const double x0 = c.x_axis().lo, x1 = c.x_axis().hi;
    for (size_t k = 0; k < spec.series.size(); ++k) {
      const std::vector<double>* col = cols[k];
      if (!col) continue;
      const std::string css = "ln " + spec.series[k].css;
      // A sparse series (evaluations) joins its points; a dense one breaks at a missing value.
      const bool sparse = spec.dots && k > 0;
      auto feed = [sparse](MinMaxReducer& red, double x, double value) {
        if (!sparse || std::isfinite(value)) red.add(x, value);
      };
      if (v.by_time) {
        MinMaxReducer red(x0, x1, c.plot_width());
        int prev = -1;
        for (size_t row : rows_.timed) {
          const int a = attempt_of(rows_, row);
          if (a != prev) red.gap();
          prev = a;
          feed(red, x_of(v, row), (*col)[row]);
        }
        c.line(red.finish(), css.c_str());
      } else {
        if (!rows_.lost.empty()) {
          MinMaxReducer lost(x0, x1, c.plot_width());
          int prev_a = -1;
          double prev_s = 0;
          for (size_t row : rows_.lost) {
            const int a = attempt_of(rows_, row);
            const double s = (*rows_.step)[row];
            if (a != prev_a || s != prev_s + 1) lost.gap();
            prev_a = a;
            prev_s = s;
            feed(lost, s, (*col)[row]);
          }
          c.line(lost.finish(), (css + " faded").c_str());
        }
        MinMaxReducer kept(x0, x1, c.plot_width());
        for (size_t row : rows_.kept) feed(kept, (*rows_.step)[row], (*col)[row]);
        c.line(kept.finish(), css.c_str());
      }
      if (sparse) dots(c, v, *col, spec.series[k]);
    }
    // Skipped steps under the axis, at most one marker per pixel column.
    std::vector<bool> marked(static_cast<size_t>(c.plot_width()) + 1, false);
    for (size_t row : rows_.skipped) {
      if (v.by_time && !std::isfinite((*rows_.time)[row])) continue;
      const double x = x_of(v, row);
      const size_t col = static_cast<size_t>(std::clamp(c.px(x) - SvgChart::kLeft, 0.0, double(c.plot_width())));
      if (marked[col]) continue;
      marked[col] = true;
      c.marker(x, "skip",
               "step " + std::to_string(static_cast<int64_t>((*rows_.step)[row])) + " (attempt " +
                   std::to_string(attempt_of(rows_, row)) + "): non-finite loss or gradient norm, update skipped");
    }
    std::string id = spec.id + (v.by_time ? "-time" : "-step");
    std::string s = "<figure class=\"curve\" id=\"" + id + "\"><figcaption><b>" + xml_escape(spec.title) + "</b>";
    if (!spec.note.empty()) s += " <span class=\"sub\">" + xml_escape(spec.note) + "</span>";
    s += legend(spec, present, !report_.lost_steps.empty(), !rows_.skipped.empty(), report_.attempts.size() > 1);
    s += "</figcaption>" + c.svg(spec.title + " against " + v.x_title);
    s += "<div class=\"xtitle\">" + xml_escape(v.x_title) + (y.log ? " · logarithmic y axis" : "") + "</div></figure>";
    return s;
  }

  // Sparse series (evaluations): a dot per point when there are few.
  void dots(SvgChart& c, const View& v, const std::vector<double>& col, const SeriesSpec& s) const {
    const std::vector<size_t>& rows = v.by_time ? rows_.timed : rows_.kept;
    size_t n = 0;
    for (size_t row : rows) n += std::isfinite(col[row]) ? 1 : 0;
    if (n == 0 || n > kMaxDots) return;
    const std::string css = "dot " + s.css;
    for (size_t row : rows)
      if (std::isfinite(col[row]))
        c.dot(x_of(v, row), col[row], css.c_str(),
              s.label + " " + short_number(col[row], 5) + " at step " +
                  std::to_string(static_cast<int64_t>((*rows_.step)[row])));
  }

  const AttemptSummary* summary(int attempt) const {
    for (const AttemptSummary& a : report_.attempts)
      if (a.attempt == attempt) return &a;
    return nullptr;
  }

  static std::string restored_text(const AttemptSummary& a) {
    return a.restored_step ? ", resumed from the checkpoint of step " + std::to_string(*a.restored_step)
                           : ", from the start (no checkpoint loaded)";
  }

  static std::string lost_text(const LostSteps& l) {
    return "attempt " + std::to_string(l.attempt) + ": steps " + std::to_string(l.first_step) + ".." +
           std::to_string(l.last_step) + " lost to failures (" + std::to_string(l.executions) +
           (l.executions == 1 ? " execution" : " executions") + " thrown away)";
  }

  std::string notes() const {
    std::string s = "<ul class=\"notes\">";
    s += "<li>" + std::to_string(rows_.kept.size()) + " steps drawn from " + std::to_string(m_.rows) +
         " lines of metrics.jsonl; each curve keeps the smallest, largest, first and last value of every pixel "
         "column, so no spike is lost to the reduction.</li>";
    if (!report_.lost_steps.empty()) {
      s += "<li>Shaded red: step executions lost to failures (done, then redone after a restart): ";
      s += join_text(report_.lost_steps | std::views::take(8), "; ", lost_text);
      if (report_.lost_steps.size() > 8) s += "; … (" + std::to_string(report_.lost_steps.size()) + " runs)";
      s += ". Against step, their values are drawn faded under the kept ones.</li>";
    }
    if (!rows_.skipped.empty()) {
      s += "<li>Red triangles: " + std::to_string(rows_.skipped.size()) +
           (rows_.skipped.size() == 1 ? " step" : " steps") + " with a non-finite loss or gradient norm (update skipped): ";
      s += join_text(rows_.skipped | std::views::take(10), ", ",
                     [&](size_t row) { return std::to_string(static_cast<int64_t>((*rows_.step)[row])); });
      if (rows_.skipped.size() > 10) s += ", …";
      s += ".</li>";
    }
    for (const std::string& w : m_.warnings) s += "<li class=\"warn\">" + xml_escape(w) + "</li>";
    return s + "</ul>";
  }

  const GoodputReport& report_;
  const MetricsTable& m_;
  Rows rows_;
};

}  // namespace

std::string curves(const GoodputReport& report, const MetricsTable& metrics) {
  return CurvesRenderer(report, metrics).render();
}

}  // namespace tetra::launch::html
