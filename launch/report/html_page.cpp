// The report page: one XHTML file assembled from the sections of launch/report/html_sections.h, with
// the goodput summary, breakdown and attempts rendered here from the same GoodputReport and the
// same number formatting (launch/report/format.h) as the printed report.
#include "launch/report/html_page.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "launch/config/config.h"
#include "launch/report/html_sections.h"
#include "launch/report/format.h"
#include "launch/report/svg_chart.h"
#include "runtime/error.h"

namespace tetra::launch {

namespace fs = std::filesystem;
namespace fmt = report_format;

namespace {

// Colours: goodput categories (bar, table, timeline), series s0..s7, and the marks of the curves.
constexpr const char* kStyle = R"css(
*{box-sizing:border-box}
body{margin:0;background:#f4f5f7;color:#1d2433;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{width:1168px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:0 0 2px}
h2{font-size:16px;margin:0 0 10px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:14px 16px;margin:14px 0}
.sub{color:#5b6577;font-size:12.5px}
.status{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;margin-left:8px;vertical-align:3px}
.status.ok{background:#dcf2e3;color:#1e6b3a}.status.bad{background:#fbe0e0;color:#a12626}.status.warn{background:#fdf0d2;color:#7a5400}
.cards{display:flex;gap:10px;flex-wrap:wrap}
.card{flex:1 1 0;min-width:0;background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:10px 12px}
.card .k{color:#5b6577;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:20px;font-weight:650;margin:2px 0;white-space:nowrap}
.card .d{color:#5b6577;font-size:12px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:3px 10px;text-align:left;border-bottom:1px solid #eceef2;white-space:nowrap}
th{font-size:12px;color:#5b6577;font-weight:600}
td.num,th.num{text-align:right}
tr.group td{color:#5b6577;font-size:12px;padding-top:8px;border-bottom:none}
tr.total td{font-weight:650;border-top:2px solid #c9ced8}
td.in{padding-left:26px}td.in2{padding-left:44px;color:#5b6577}
.breakdown{display:flex;gap:24px;align-items:flex-start}
i.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.legend{display:inline-flex;flex-wrap:wrap;gap:4px 14px;margin-left:14px;font-size:12px;color:#3b4456}
.legend i.sw{height:3px;width:16px;vertical-align:3px;border-radius:0}
.legend i.lost-key{height:10px;vertical-align:-1px;background:#e1575944;border:1px solid #e1575988}
.legend i.restart-key{height:12px;width:0;border-left:2px dashed #6b7385;vertical-align:-2px}
.legend i.tri{display:inline-block;width:0;height:0;border-left:5px solid transparent;border-right:5px solid transparent;border-bottom:9px solid #d62728;margin-right:6px}
svg{display:block;overflow:visible}
svg text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:#3b4456}
svg .tick{fill:#6b7385;font-size:10.5px}
svg .plot{fill:#fff}
svg .grid{stroke:#e6e9ee;stroke-width:1;fill:none}
svg .axis{stroke:#9aa2b1;stroke-width:1;fill:none}
svg .ln{fill:none;stroke-width:1.3;stroke-linejoin:round;stroke-linecap:round}
svg .ln.faded{stroke-opacity:.45;stroke-dasharray:3 2}
svg .att-a{fill:#eef3fb}svg .att-b{fill:#f6f1fa}
svg .band-label{fill:#5b6577;font-size:10.5px;stroke:#fff;stroke-width:3px;stroke-linejoin:round;paint-order:stroke}
svg .idle{fill:url(#hatch)}
svg .lost{fill:#e15759;fill-opacity:.22}
svg .restart{stroke:#6b7385;stroke-width:1.2;stroke-dasharray:4 3}
svg .skip{fill:#d62728}
svg .dot{stroke:#fff;stroke-width:1}
svg .seg{stroke:#fff;stroke-width:1}
svg .seg-label{fill:#fff;font-size:11.5px;font-weight:600}svg .seg-label.dark{fill:#1d2433}
svg .row-label{font-size:12px;fill:#1d2433}
svg .row-end{font-size:11.5px;fill:#1e6b3a}svg .row-end.bad{fill:#a12626;font-weight:600}svg .row-end.warn{fill:#7a5400}
svg .replica{fill:#f4f5f7;stroke:#c9ced8}
svg .rank{stroke:#fff}svg .rank.e0{fill:#4e79a7}svg .rank.e1{fill:#76b7b2}svg .rank.e2{fill:#f28e2b}svg .rank.e3{fill:#b07aa1}
svg .rank-id{fill:#fff;font-size:10.5px;font-weight:600}
.s0{stroke:#1f77b4;background:#1f77b4;fill:#1f77b4}.s1{stroke:#ff7f0e;background:#ff7f0e;fill:#ff7f0e}
.s2{stroke:#2ca02c;background:#2ca02c;fill:#2ca02c}.s3{stroke:#9467bd;background:#9467bd;fill:#9467bd}
.s4{stroke:#17becf;background:#17becf;fill:#17becf}.s5{stroke:#8c564b;background:#8c564b;fill:#8c564b}
.s6{stroke:#e377c2;background:#e377c2;fill:#e377c2}.s7{stroke:#7f7f7f;background:#7f7f7f;fill:#7f7f7f}
svg .ln.s0,svg .ln.s1,svg .ln.s2,svg .ln.s3,svg .ln.s4,svg .ln.s5,svg .ln.s6,svg .ln.s7{fill:none}
.c-productive{fill:#2e9e5b;background:#2e9e5b}
.c-startup{fill:#8d99ae;background:#8d99ae}
.c-checkpoint-save{fill:#4e79a7;background:#4e79a7}
.c-checkpoint-load{fill:#59a4b5;background:#59a4b5}
.c-evaluation{fill:#b07aa1;background:#b07aa1}
.c-data-stall{fill:#e9b939;background:#e9b939}
.c-lost-to-failures{fill:#e15759;background:#e15759}
.c-skipped-steps{fill:#b6992d;background:#b6992d}
.c-idle{fill:url(#hatch);background:repeating-linear-gradient(135deg,#c3c7cf 0 2px,#eef0f3 2px 5px)}
.c-other{fill:#9c755f;background:#9c755f}
.c-exposed-comm{fill:#f28e2b;background:#f28e2b}
.c-pipeline-bubble{fill:#ff9da7;background:#ff9da7}
.c-recompute{fill:#7f3c8d;background:#7f3c8d}
.c-optimizer{fill:#3969ac;background:#3969ac}
.c-host-overhead{fill:#a5aa99;background:#a5aa99}
.c-unaccounted{fill:#e4e6ea;background:#e4e6ea}
figure.curve{margin:0 0 14px}
figcaption{margin:0 0 4px 62px}
.xtitle{margin:-2px 0 0 62px;color:#6b7385;font-size:11.5px}
.xswitch>input{position:absolute;opacity:0}
.xswitch>label{display:inline-block;padding:4px 12px;border:1px solid #c9ced8;background:#f4f5f7;cursor:pointer;font-size:13px;margin:0 0 12px}
.xswitch>label[for=x-step]{border-radius:4px 0 0 4px}.xswitch>label[for=x-time]{border-radius:0 4px 4px 0;margin-left:-1px}
#x-step:checked+label,#x-time:checked+label{background:#1d2433;color:#fff;border-color:#1d2433}
.by-time{display:none}
#x-time:checked~.by-step{display:none}
#x-time:checked~.by-time{display:block}
.notes{margin:4px 0 0;padding-left:18px;color:#3b4456;font-size:12.5px}
.note{color:#5b6577}.warn{color:#7a5400}
pre{background:#f7f8fa;border:1px solid #eceef2;border-radius:4px;padding:10px 12px;font:12px/1.4 ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;overflow-x:auto;margin:6px 0 0}
details>summary{cursor:pointer;color:#3b4456}
.tl-legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px;color:#3b4456;margin-top:6px}
table.groups td{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
footer{color:#6b7385;font-size:12px;margin-top:18px}
)css";

std::string esc(const std::string& s) { return xml_escape(s); }

std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string card(const std::string& field, const std::string& key, const std::string& value, const std::string& detail) {
  return "<div class=\"card\" data-field=\"" + field + "\"><div class=\"k\">" + esc(key) + "</div><div class=\"v\">" +
         esc(value) + "</div><div class=\"d\">" + esc(detail) + "</div></div>";
}

std::string summary_cards(const GoodputReport& r) {
  const GoodputBreakdown& b = r.seconds;
  const double wall = r.wall_seconds;
  std::string s = "<div class=\"cards\">";
  s += card("goodput", "goodput", fmt::percent(b.productive, wall) + " %",
            fmt::fixed(b.productive, 1) + " s of productive training");
  s += card("wall", "job wall time", fmt::duration(wall),
            fmt::utc(r.wall_start) + " → " + fmt::utc(r.wall_end) + " UTC");
  s += card("attempts", "attempts",
            std::to_string(r.attempts.size()) + " (" + std::to_string(r.restarts) +
                (r.restarts == 1 ? " restart)" : " restarts)"),
            "the last one: " + fmt::ended(r.attempts.back(), true));
  std::string steps_detail = (r.steps_skipped > 0 ? std::to_string(r.steps_skipped) + " skipped (non-finite); " : "") +
                             std::to_string(r.steps_lost) + " lost to failures; last checkpoint: " +
                             (r.last_checkpoint_step ? "step " + std::to_string(*r.last_checkpoint_step) : "none");
  if (r.steps_at_risk > 0) steps_detail += "; " + std::to_string(r.steps_at_risk) + " not yet in a checkpoint";
  s += card("steps", "steps kept", std::to_string(r.steps_kept),
            (r.steps_kept > 0 ? "steps " + std::to_string(r.first_kept_step) + ".." + std::to_string(r.last_kept_step) + "; "
                              : std::string()) +
                steps_detail);
  s += card("tokens", "tokens/s over the job", fmt::si(r.tokens_per_s),
            fmt::si(static_cast<double>(r.tokens_kept)) + " tokens kept" +
                (r.tokens_lost > 0 ? ", " + fmt::si(static_cast<double>(r.tokens_lost)) + " lost" : std::string()) +
                "; " + fmt::si(r.tokens_per_productive_s) + " per productive second");
  if (r.achieved_flops_per_s && r.mfu)
    s += card("mfu", "MFU", fmt::fixed(100.0 * *r.mfu, 1) + " %",
              fmt::fixed(*r.achieved_flops_per_s / 1e12, 2) + " TFLOP/s achieved" +
                  (r.mfu_in_steps ? "; " + fmt::fixed(100.0 * *r.mfu_in_steps, 1) + " % within kept steps"
                                  : std::string()));
  else if (r.achieved_flops_per_s)
    s += card("mfu", "compute", fmt::fixed(*r.achieved_flops_per_s / 1e12, 2) + " TFLOP/s",
              "MFU unknown (run_info has no peak FLOP/s or device count)");
  else
    s += card("mfu", "compute", "unknown", "no run_info with flops_per_token");
  return s + "</div>";
}

// The breakdown as one stacked bar: productive, then every badput category in report order.
std::string breakdown_bar(const GoodputReport& r) {
  const double wall = r.wall_seconds, width = html::kPageWidth - 2;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bar\" width=\"" + std::to_string(html::kPageWidth) +
                  "\" height=\"34\" viewBox=\"0 0 " + std::to_string(html::kPageWidth) +
                  " 34\" role=\"img\" aria-label=\"where the job's wall time went\">";
  std::vector<std::pair<std::string, double>> parts = {{"productive", r.seconds.productive}};
  for (const auto& p : r.seconds.badput()) parts.push_back(p);
  double x = 1;
  char buf[64];
  for (const auto& [name, seconds] : parts) {
    if (!(seconds > 0) || !(wall > 0)) continue;
    const double w = seconds / wall * width;
    std::snprintf(buf, sizeof buf, "x=\"%.2f\" y=\"1\" width=\"%.2f\" height=\"32\"", x, std::max(w, 0.5));
    s += "<rect class=\"seg " + html::category_class(name) + "\" " + buf + "><title>" + esc(fmt::category_label(name)) +
         ": " + fmt::fixed(seconds, 1) + " s, " + fmt::percent(seconds, wall) + " %</title></rect>";
    const std::string pct = fmt::percent(seconds, wall) + " %";
    const std::string text = fmt::category_label(name) + " " + pct;
    const std::string shown = 7.0 * static_cast<double>(text.size()) + 12 < w   ? text
                              : 7.0 * static_cast<double>(pct.size()) + 10 < w ? pct
                                                                                : "";
    if (!shown.empty()) {
      // Dark text on the light colours.
      const bool light = name == "idle" || name == "unaccounted" || name == "data_stall" || name == "pipeline_bubble";
      std::snprintf(buf, sizeof buf, "x=\"%.1f\" y=\"21.5\"", x + 6);
      s += "<text class=\"seg-label" + std::string(light ? " dark" : "") + "\" " + buf + ">" + esc(shown) + "</text>";
    }
    x += w;
  }
  return s + "</svg>";
}

// The table of the printed report ("where the time went"), row for row.
std::string breakdown_table(const GoodputReport& r) {
  const double wall = r.wall_seconds;
  std::string s = "<table class=\"breakdown-table\"><tr><th>where the time went</th><th class=\"num\">seconds</th>"
                  "<th class=\"num\">%</th></tr>";
  auto row = [&](const std::string& name, double seconds, const char* indent, bool swatch) {
    s += "<tr data-category=\"" + esc(name) + "\" data-seconds=\"" + exact(seconds) + "\"><td class=\"" + indent +
         "\">" + (swatch ? "<i class=\"sw " + html::category_class(name) + "\"></i>" : std::string()) +
         esc(fmt::category_label(name)) + "</td><td class=\"num\">" + fmt::fixed(seconds, 1) + "</td><td class=\"num\">" +
         fmt::percent(seconds, wall) + "</td></tr>";
  };
  row("productive", r.seconds.productive, "", true);
  s += "<tr class=\"group\"><td colspan=\"3\">job level</td></tr>";
  for (const auto& [name, seconds] : r.seconds.badput()) {
    if (name == "exposed_comm") s += "<tr class=\"group\"><td colspan=\"3\">step level</td></tr>";
    row(name, seconds, name == "unaccounted" ? "" : "in", true);
    if (name == "other")
      for (const auto& [other, os] : r.other_by_name)
        s += "<tr data-other=\"" + esc(other) + "\" data-seconds=\"" + exact(os) + "\"><td class=\"in2\">" + esc(other) +
             "</td><td class=\"num\">" + fmt::fixed(os, 1) + "</td><td class=\"num\">" + fmt::percent(os, wall) +
             "</td></tr>";
    if (name == "exposed_comm")  // its part on each mesh axis, as the printed report splits it
      for (const auto& [axis, as] : r.exposed_comm_by_axis)
        s += "<tr data-axis=\"" + esc(axis) + "\" data-seconds=\"" + exact(as) + "\"><td class=\"in2\">" +
             esc(axis) + " axis</td><td class=\"num\">" + fmt::fixed(as, 1) + "</td><td class=\"num\">" +
             fmt::percent(as, wall) + "</td></tr>";
  }
  s += "<tr class=\"total\" data-category=\"total\" data-seconds=\"" + exact(r.seconds.total()) +
       "\"><td>total</td><td class=\"num\">" + fmt::fixed(r.seconds.total(), 1) + "</td><td class=\"num\">" +
       fmt::percent(r.seconds.total(), wall) + "</td></tr></table>";
  return s;
}

std::string attempts_table(const GoodputReport& r) {
  std::string s = "<table class=\"attempts\"><tr><th class=\"num\">attempt</th><th>host</th><th class=\"num\">ranks</th>"
                  "<th>started (UTC)</th><th class=\"num\">duration</th><th class=\"num\">startup</th>"
                  "<th class=\"num\">from ckpt</th><th>steps</th><th>ended</th></tr>";
  for (size_t i = 0; i < r.attempts.size(); ++i) {
    const AttemptSummary& a = r.attempts[i];
    const std::string steps = a.steps == 0 ? "-" : std::to_string(a.first_step) + ".." + std::to_string(a.last_step);
    s += "<tr data-attempt=\"" + std::to_string(a.attempt) + "\"><td class=\"num\">" + std::to_string(a.attempt) +
         "</td><td>" + esc(a.host.empty() ? "?" : a.host) + "</td><td class=\"num\">" + std::to_string(a.world_size) +
         "</td><td>" + fmt::utc(a.start) + "</td><td class=\"num\">" + fmt::duration(a.end - a.start) +
         "</td><td class=\"num\">" + fmt::duration(a.startup_seconds) + "</td><td class=\"num\">" +
         (a.restored_step ? std::to_string(*a.restored_step) : std::string("-")) + "</td><td>" + steps + "</td><td>" +
         esc(fmt::ended(a, i + 1 == r.attempts.size())) + "</td></tr>";
  }
  return s + "</table>";
}

std::string timeline_legend() {
  std::string s = "<div class=\"tl-legend\">";
  for (const char* name : {"startup", "productive", "lost_to_failures", "evaluation", "checkpoint_save",
                           "checkpoint_load", "idle"})
    s += "<span><i class=\"sw " + html::category_class(name) + "\"></i>" +
         (std::string(name) == "productive" ? std::string("training steps") : fmt::category_label(name)) + "</span>";
  return s + "</div>";
}

std::string status_badge(const GoodputReport& r) {
  const AttemptSummary& last = r.attempts.back();
  if (r.finished) return "<span class=\"status ok\">finished</span>";
  if (last.end_reason.empty()) return "<span class=\"status bad\">running, or crashed</span>";
  const bool error = last.end_reason == "error" || last.end_reason == "nonfinite";
  return "<span class=\"status " + std::string(error ? "bad" : "warn") + "\">" + esc(fmt::ended(last, true)) + "</span>";
}

}  // namespace

std::string html_report_path(const std::string& run_dir) { return (fs::path(run_dir) / "report.html").string(); }

std::string render_html_report(const std::string& run_dir, const GoodputReport& report, const MetricsTable& metrics,
                               const std::string& config_yaml) {
  TETRA_CHECK(!report.attempts.empty(), "a goodput report without attempts");
  std::optional<Config> config;
  std::string config_problem;
  if (!config_yaml.empty()) {
    try {
      config = parse_config(config_yaml, run_dir + "/config.yaml");
    } catch (const Error& e) {
      config_problem = e.what();
    }
  }
  const std::string name = config ? config->run.name : fs::path(run_dir).filename().string();
  std::ostringstream text;
  print_report(report, text);

  std::string page;
  page.reserve(size_t{1} << 20);
  page += "<!DOCTYPE html>\n"
          "<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head><meta charset=\"utf-8\"/>"
          "<meta name=\"generator\" content=\"tetra report\"/><title>" +
          esc(name) + " · tetra run report</title><style>" + kStyle + "</style></head><body><main>";
  // Patterns the sections' SVGs refer to (url(#hatch)); drawn nowhere itself.
  page += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"0\" height=\"0\" style=\"position:absolute\">"
          "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
          "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#eef0f3\"/>"
          "<rect width=\"2.5\" height=\"6\" fill=\"#c3c7cf\"/></pattern></defs></svg>";
  page += "<header><h1>" + esc(name) + status_badge(report) + "</h1><div class=\"sub\">" + esc(run_dir) + " · " +
          std::to_string(report.attempts.size()) + (report.attempts.size() == 1 ? " attempt" : " attempts") +
          (report.precision.empty() ? "" : " · " + esc(report.precision)) +
          (report.device_kind.empty() ? "" : " on " + esc(report.device_kind)) + "</div></header>";
  page += "<section id=\"summary\">" + summary_cards(report) + "</section>";
  page += "<section id=\"goodput\"><h2>Where the time went</h2>" + breakdown_bar(report) +
          "<div class=\"breakdown\" style=\"margin-top:12px\">" + breakdown_table(report) +
          "<div class=\"sub\" style=\"max-width:520px\">Goodput is the share of the job's wall time that went into "
          "training steps the final model kept; every other second is badput, counted once, in the category of its "
          "most specific owner (docs/goodput.md). The same numbers as <code>tetra report</code> prints, from "
          "the same ledger.</div></div></section>";
  page += "<section id=\"timeline\"><h2>Attempts on the wall-time axis</h2>" + html::timeline(report) +
          timeline_legend() + "</section>";
  page += "<section id=\"attempts\"><h2>Attempts</h2>" + attempts_table(report) + "</section>";
  if (!report.warnings.empty()) {
    page += "<section id=\"warnings\"><h2>Warnings</h2><ul class=\"notes\">";
    for (const std::string& w : report.warnings) page += "<li class=\"warn\">" + esc(w) + "</li>";
    page += "</ul></section>";
  }
  page += "<section id=\"curves\"><h2>Curves</h2>" + html::curves(report, metrics) + "</section>";
  page += "<section id=\"mesh\"><h2>Mesh</h2>";
  if (config) {
    try {
      page += html::mesh(*config, report.attempts.back().world_size);
    } catch (const Error& e) {  // a shape the mesh refuses: said, and the rest of the page stands
      page += "<p class=\"note warn\">The mesh cannot be drawn: " + esc(e.what()) + "</p>";
    }
  } else {
    page += "<p class=\"note\">" +
            esc(config_yaml.empty() ? "No config.yaml in the run directory." : "config.yaml does not load: " + config_problem) +
            "</p>";
  }
  page += "</section>";
  page += "<section id=\"config\"><h2>Resolved config</h2><details open=\"open\"><summary>" + esc(run_dir) +
          "/config.yaml</summary><pre>" + esc(config_yaml.empty() ? "(none)" : config_yaml) + "</pre></details></section>";
  page += "<section id=\"text-report\"><h2>The text report</h2><details><summary>tetra report " + esc(run_dir) +
          "</summary><pre>" + esc(text.str()) + "</pre></details></section>";
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  page += "<footer>Written by tetra at " + fmt::utc(now) + " UTC from " + esc(run_dir) +
          "/goodput.jsonl, metrics.jsonl and config.yaml. One file: no script, nothing fetched.</footer>";
  page += "</main></body></html>\n";
  return page;
}

std::string write_html_report(const std::string& run_dir, const GoodputReport& report, const std::string& out_path) {
  const std::string path = out_path.empty() ? html_report_path(run_dir) : out_path;
  MetricsTable metrics = read_metrics_table(run_dir + "/metrics.jsonl");
  std::string config_yaml;
  {
    std::ifstream in(fs::path(run_dir) / "config.yaml", std::ios::binary);
    if (in) config_yaml.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string page = render_html_report(run_dir, report, metrics, config_yaml);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) TETRA_FAIL(Data, "cannot write the report page ", tmp, ": ", std::strerror(errno));
    out.write(page.data(), static_cast<std::streamsize>(page.size()));
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignored;
      fs::remove(tmp, ignored);
      TETRA_FAIL(Data, "cannot write the report page ", tmp, ": check free space on its file system");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    TETRA_FAIL(Data, "cannot rename ", tmp, " to ", path, ": ", ec.message());
  }
  return path;
}

}  // namespace tetra::launch
