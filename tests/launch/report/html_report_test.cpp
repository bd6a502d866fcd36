// The report page from a synthetic ledger and metrics: the sections, the numbers of the text
// report, the marks on the curves, the chart primitives, and how the page is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "launch/config/config.h"
#include "launch/report/goodput.h"
#include "launch/report/html_page.h"
#include "launch/report/format.h"
#include "launch/report/svg_chart.h"
#include "runtime/error.h"
#include "tests/launch/report/ledger_builder.h"

namespace tetra::launch {
namespace {

using test::kT0;
using test::LedgerBuilder;

// Attempt 1 crashes after step 13 (checkpoint at 10), attempt 2 resumes from 10 and finishes 20.
LedgerBuilder crashed_job() {
  LedgerBuilder l;
  l.start(1, 0, 4, "node-a").run_info(1e9, 1e14, 4, 1000).wait(3).steps(1, 10, 1.0).span("eval", 0.5, 10);
  l.span("ckpt_save", 1, 10).steps(11, 13, 1.0);
  l.start(2, 40, 4, "node-b").wait(2).span("ckpt_load", 1, 10).steps(11, 20, 1.0).span("eval", 0.5, 20).end();
  return l;
}

// metrics.jsonl lines for the same job: step 5 skipped (null loss), evaluations at 10 and 20.
std::string crashed_job_metrics() {
  std::string s;
  auto line = [&](int attempt, int step, double t) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "{\"attempt\":%d,\"step\":%d,\"loss\":%s,\"lr\":0.001,\"grad_norm\":%g,\"tokens\":%d,\"step_ms\":1000,"
                  "\"tokens_per_s\":1000,\"time\":%.3f,\"exposed_comm_ms\":3.5,\"exposed_comm_ms_tp\":1.5,"
                  "\"data_wait_ms\":0.5%s%s}\n",
                  attempt, step, step == 5 ? "null" : std::to_string(4.0 - 0.1 * step).c_str(), 1.0 + step * 0.01,
                  step * 1000, kT0 + 3 + step + (attempt == 2 ? 30 : 0), step == 5 ? ",\"skipped\":true" : "",
                  step % 10 == 0 ? ",\"val_loss\":3.25" : "");
    s += buf;
  };
  for (int i = 1; i <= 13; ++i) line(1, i, 0);
  for (int i = 11; i <= 20; ++i) line(2, i, 0);
  return s;
}

std::string config_yaml() {
  Config c;
  c.run.name = "crash <&> test";
  c.model.vocab_size = 256;
  c.model.seq_len = 32;
  c.model.d_model = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 2;
  c.parallel.dp = 2;
  c.parallel.tp = 2;
  c.train.steps = 20;
  c.train.global_batch = 8;
  c.data.train = "x.h5";
  return to_yaml(c);
}

// `s` as a regular expression that matches exactly it.
std::string regex_text(const std::string& s) { return std::regex_replace(s, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)"); }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(HtmlReport, ShowsTheNumbersOfTheTextReport) {
  const GoodputReport r = compute_goodput(crashed_job().events());
  const std::string page = render_html_report("runs/crash", r, parse_metrics_table(crashed_job_metrics()), config_yaml());
  std::ostringstream text;
  print_report(r, text);
  const double wall = r.wall_seconds;
  std::vector<std::pair<std::string, double>> rows = {{"productive", r.seconds.productive}};
  for (const auto& b : r.seconds.badput()) rows.push_back(b);
  for (const auto& [name, seconds] : rows) {
    const std::string shown = report_format::fixed(seconds, 1), pct = report_format::percent(seconds, wall);
    // The same label, seconds and percent in the text report ...
    std::regex text_row("  " + regex_text(report_format::category_label(name)) + " +" + regex_text(shown) + " +" +
                        regex_text(pct) + "\n");
    EXPECT_TRUE(std::regex_search(text.str(), text_row)) << name << "\n" << text.str();
    // ... and on the page, in the row of that category.
    const size_t at = page.find("<tr data-category=\"" + name + "\"");
    ASSERT_NE(at, std::string::npos) << name;
    const std::string row = page.substr(at, page.find("</tr>", at) - at);
    EXPECT_NE(row.find(">" + report_format::category_label(name) + "</td><td class=\"num\">" + shown +
                       "</td><td class=\"num\">" + pct + "</td>"),
              std::string::npos)
        << row;
  }
  EXPECT_NE(page.find("data-field=\"goodput\"><div class=\"k\">goodput</div><div class=\"v\">" +
                      report_format::percent(r.seconds.productive, wall) + " %"),
            std::string::npos);
  // Every attempt: its table row, its timeline row, its band on the curves.
  for (const AttemptSummary& a : r.attempts) {
    EXPECT_NE(page.find("<tr data-attempt=\"" + std::to_string(a.attempt) + "\">"), std::string::npos);
    EXPECT_NE(page.find(">attempt " + std::to_string(a.attempt) + "</text>"), std::string::npos);
  }
  EXPECT_NE(page.find("no attempt_end: crashed"), std::string::npos);
  EXPECT_NE(page.find("finished (exit 0)"), std::string::npos);
  // The text report itself, escaped.
  EXPECT_NE(page.find("3 lost to failures"), std::string::npos);
}

TEST(HtmlReport, ExposedCommunicationPerAxisAsInTheTextReport) {
  GoodputReport r = compute_goodput(crashed_job().events());
  r.exposed_comm_by_axis = {{"dp", 1.25}, {"tp", 0.5}};
  const std::string page = render_html_report("runs/crash", r, parse_metrics_table(crashed_job_metrics()), config_yaml());
  std::ostringstream text;
  print_report(r, text);
  const size_t comm = page.find("<tr data-category=\"exposed_comm\"");
  ASSERT_NE(comm, std::string::npos);
  size_t prev = comm;
  for (const auto& [axis, seconds] : r.exposed_comm_by_axis) {
    const std::string shown = report_format::fixed(seconds, 1), pct = report_format::percent(seconds, r.wall_seconds);
    EXPECT_TRUE(std::regex_search(text.str(), std::regex("  " + axis + " axis +" + regex_text(shown) + " +" +
                                                         regex_text(pct) + "\n")))
        << text.str();
    const size_t at = page.find("<tr data-axis=\"" + axis + "\"");
    ASSERT_NE(at, std::string::npos) << axis;
    EXPECT_GT(at, prev) << "the axes follow exposed communication, in order";
    prev = at;
    const std::string row = page.substr(at, page.find("</tr>", at) - at);
    EXPECT_NE(row.find(">" + axis + " axis</td><td class=\"num\">" + shown + "</td><td class=\"num\">" + pct + "</td>"),
              std::string::npos)
        << row;
  }
  EXPECT_LT(prev, page.find("<tr data-category=\"pipeline_bubble\""));
}

TEST(HtmlReport, MarksLostStepsSkippedStepsRestartsAndEvaluations) {
  const GoodputReport r = compute_goodput(crashed_job().events());
  const std::string page = render_html_report("runs/crash", r, parse_metrics_table(crashed_job_metrics()), config_yaml());
  // Steps 11..13 of attempt 1 were lost: a band on each curve, against step and against time.
  const std::string lost = "attempt 1: steps 11..13 lost to failures (3 executions thrown away)";
  EXPECT_GE(count(page, "<rect class=\"lost\""), 2u * 6);
  EXPECT_GE(count(page, lost), 2u * 6);
  // Step 5's update was skipped: a marker under each curve.
  EXPECT_GE(count(page, "step 5 (attempt 1): non-finite loss or gradient norm, update skipped"), 2u * 6);
  EXPECT_NE(page.find("1 step with a non-finite loss or gradient norm (update skipped): 5."), std::string::npos);
  // The restart: a rule where attempt 2 takes over (step 11), and at its start in wall time.
  EXPECT_NE(page.find("attempt 2 takes over at step 11, resumed from the checkpoint of step 10"), std::string::npos);
  EXPECT_NE(page.find("attempt 2 starts, resumed from the checkpoint of step 10"), std::string::npos);
  // Evaluations: dots of the validation loss at steps 10 and 20.
  EXPECT_NE(page.find("validation 3.25 at step 10"), std::string::npos);
  EXPECT_NE(page.find("validation 3.25 at step 20"), std::string::npos);
  // Exposed communication per axis and data wait are series of the step-parts chart.
  EXPECT_NE(page.find("exposed communication, tp"), std::string::npos);
  EXPECT_NE(page.find("data wait"), std::string::npos);
  EXPECT_NE(page.find("id=\"step-parts-step\""), std::string::npos);
  EXPECT_NE(page.find("id=\"loss-time\""), std::string::npos);
  // The timeline's spans.
  EXPECT_NE(page.find("checkpoint load at step 10: 1.0 s"), std::string::npos);
  EXPECT_NE(page.find("steps 11..13 lost to failures: 3.0 s"), std::string::npos);
}

TEST(HtmlReport, ConfigAndMeshAreOnThePageEscaped) {
  const GoodputReport r = compute_goodput(crashed_job().events());
  const std::string page = render_html_report("runs/crash", r, parse_metrics_table(crashed_job_metrics()), config_yaml());
  EXPECT_NE(page.find("<title>crash &lt;&amp;&gt; test · tetra run report</title>"), std::string::npos);
  EXPECT_EQ(page.find("crash <&> test"), std::string::npos);
  EXPECT_NE(page.find("<b>world 4</b> = pp 1 × dp 2 × tp 2"), std::string::npos);
  EXPECT_NE(page.find("<title>rank 3: pp 0, dp 1, tp 1</title>"), std::string::npos);
  EXPECT_NE(page.find("  global_batch: 8\n"), std::string::npos);
  // Self-contained: no script, no external reference.
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("href="), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  std::string no_ns = std::regex_replace(page, std::regex("xmlns=\"http://www.w3.org/[0-9]+/(xhtml|svg)\""), "");
  EXPECT_EQ(no_ns.find("http"), std::string::npos);

  // A world that does not fit the config is said, not drawn.
  GoodputReport odd = r;
  odd.attempts.back().world_size = 6;
  const std::string odd_page = render_html_report("runs/crash", odd, MetricsTable{}, config_yaml());
  EXPECT_NE(odd_page.find("does not match the 6 ranks the run had"), std::string::npos);
  EXPECT_NE(odd_page.find("No curves: metrics.jsonl has no lines yet."), std::string::npos);
  // A config that does not load is named, and the page is still written.
  const std::string bad = render_html_report("runs/crash", r, MetricsTable{}, "train: {steps: -1}\n");
  EXPECT_NE(bad.find("config.yaml does not load"), std::string::npos);
}

TEST(HtmlReport, WrittenWholeOrNotAtAll) {
  const std::string dir = test::fresh_dir("html_report");
  crashed_job().write(dir);
  std::ofstream(dir + "/metrics.jsonl") << crashed_job_metrics();
  std::ofstream(dir + "/config.yaml") << config_yaml();
  const GoodputReport r = load_and_compute(dir);
  EXPECT_EQ(write_html_report(dir, r), dir + "/report.html");
  EXPECT_TRUE(std::filesystem::exists(dir + "/report.html"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/report.html.tmp"));
  EXPECT_GT(std::filesystem::file_size(dir + "/report.html"), 10000u);
  try {
    write_html_report(dir, r, dir + "/no/such/folder/page.html");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_NE(std::string(e.what()).find(dir + "/no/such/folder/page.html.tmp"), std::string::npos) << e.what();
  }
}

TEST(SvgChart, EscapesNumbersAndTicks) {
  EXPECT_EQ(xml_escape("a<b>&\"c'\x01"), "a&lt;b&gt;&amp;&quot;c&#39; ");
  EXPECT_EQ(short_number(0.0003), "0.0003");
  EXPECT_EQ(short_number(2812345.0), "2.81M");
  EXPECT_EQ(short_number(400000), "400k");
  EXPECT_EQ(short_number(5), "5");
  EXPECT_EQ(short_number(2000), "2000");
  EXPECT_EQ(short_number(1500), "1500");
  EXPECT_EQ(short_number(3.14159), "3.14");
  EXPECT_EQ(short_number(-12.25), "-12.2");
  EXPECT_EQ(elapsed_label(45), "45s");
  EXPECT_EQ(elapsed_label(720), "12m");
  EXPECT_EQ(elapsed_label(5400), "1h30m");
  EXPECT_EQ(elapsed_label(129600), "1d12h");

  ChartAxis a;
  a.lo = 0.5;
  a.hi = 1000000.5;
  std::vector<AxisTick> t = axis_ticks(a, 10);
  ASSERT_GE(t.size(), 5u);
  EXPECT_LE(t.size(), 11u);
  EXPECT_EQ(t.front().value, 100000);
  EXPECT_EQ(t.back().label, "1M");
  for (const AxisTick& k : t) EXPECT_TRUE(k.value >= a.lo && k.value <= a.hi);
  auto labels = [](double lo, double hi, int target) {
    ChartAxis ax;
    ax.lo = lo;
    ax.hi = hi;
    std::string out;
    for (const AxisTick& k : axis_ticks(ax, target)) out += (out.empty() ? "" : " ") + k.label;
    return out;
  };
  // One unit per axis: 2000 is "2k" where 10000 is "10k".
  EXPECT_EQ(labels(0.5, 20000.5, 10), "2k 4k 6k 8k 10k 12k 14k 16k 18k 20k");
  EXPECT_EQ(labels(0, 1.5e6, 3), "0 0.5M 1M 1.5M");
  EXPECT_EQ(labels(0.5, 12.5, 6), "2 4 6 8 10 12");
  EXPECT_EQ(labels(0, 0.00031, 4), "0 0.0001 0.0002 0.0003");
  EXPECT_EQ(labels(0, 3.1e6, 4), "0 1M 2M 3M");
  EXPECT_EQ(labels(-1.5, 1.5, 6), "-1.5 -1 -0.5 0 0.5 1 1.5");
  EXPECT_EQ(labels(0, 4e-8, 2), "0 2e-08 4e-08");
  ChartAxis lg;
  lg.lo = 0.02;
  lg.hi = 500;
  lg.log = true;
  std::vector<AxisTick> d = axis_ticks(lg, 5);
  ASSERT_FALSE(d.empty());
  for (const AxisTick& k : d) {
    EXPECT_TRUE(k.value >= lg.lo && k.value <= lg.hi) << k.value;
    const double m = k.value / std::pow(10.0, std::floor(std::log10(k.value) + 1e-9));
    EXPECT_NEAR(m, std::round(m), 1e-9) << k.value;  // 1, 2 or 5 × 10^k
  }
  ChartAxis time;
  time.lo = 0;
  time.hi = 7200;
  time.labels = ChartAxis::Labels::Elapsed;
  std::vector<AxisTick> e = axis_ticks(time, 8);
  ASSERT_GE(e.size(), 4u);
  EXPECT_EQ(e[1].value - e[0].value, 900);  // 15 minutes
  EXPECT_EQ(e[1].label, "15m");
}

TEST(SvgChart, AReducedLineHasAtMostFourPointsPerColumn) {
  ChartAxis x, y;
  x.lo = 0;
  x.hi = 100000;
  y.lo = -2;
  y.hi = 2;
  SvgChart c(600, 200, x, y);
  MinMaxReducer red(x.lo, x.hi, c.plot_width());
  for (int i = 0; i < 100000; ++i) red.add(i, std::sin(i * 0.37));
  c.line(red.finish(), "ln s0");
  const std::string svg = c.svg("a test");
  const size_t at = svg.find("<path class=\"ln s0\" d=\"");
  ASSERT_NE(at, std::string::npos);
  const std::string d = svg.substr(at, svg.find("\"/>", at) - at);
  const size_t points = count(d, "M") + count(d, "L") + count(d, "V");
  EXPECT_LE(points, 4u * static_cast<size_t>(c.plot_width()));
  EXPECT_GE(points, 2u * static_cast<size_t>(c.plot_width()));  // noisy: the extremes of every column
  EXPECT_EQ(count(d, "M"), 1u);
}

}  // namespace
}  // namespace tetra::launch
