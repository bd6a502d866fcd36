// The run as a picture: one self-contained XHTML page (inline SVG and CSS, no script, nothing
// fetched) with the goodput breakdown as a bar and table (the numbers of the text report, from the
// same GoodputReport), a timeline of the attempts, the attempts table, the curves of metrics.jsonl
// against step and against wall time (attempts, restarts, lost steps, skipped non-finite steps and
// evaluations marked), the mesh and the resolved config. Curves are reduced to min/max per pixel
// column (launch/report/chart_downsample.h), so a run of a million steps gives a page of well under 2 MB.
// docs/goodput.md, "The report page", describes it.
#pragma once
#include <string>

#include "launch/report/goodput.h"
#include "launch/report/metrics_table.h"

namespace tetra::launch {

std::string html_report_path(const std::string& run_dir);  // RUN_DIR/report.html

// The page of a run from its report, its metrics, and its resolved config.yaml (its text, "" if
// none). `run_dir` names the run on the page.
std::string render_html_report(const std::string& run_dir, const GoodputReport& report, const MetricsTable& metrics,
                               const std::string& config_yaml);

// Reads RUN_DIR/metrics.jsonl and RUN_DIR/config.yaml, renders the page and writes it to `out_path`
// (RUN_DIR/report.html when empty) through a temporary file and a rename, so a reader never sees
// half a page. Returns the path written; fails (ErrorKind::Data) when it cannot write.
std::string write_html_report(const std::string& run_dir, const GoodputReport& report,
                              const std::string& out_path = "");

}  // namespace tetra::launch
