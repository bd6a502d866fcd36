// The sections of the report page (launch/report/html_page.h), each rendered on its own as XHTML.
#pragma once
#include <string>

#include "launch/config/config.h"
#include "launch/report/goodput.h"
#include "launch/report/metrics_table.h"

namespace tetra::launch::html {

// Page width the sections draw for, in CSS pixels.
inline constexpr int kPageWidth = 1080;

// The attempts on one wall-time axis: startup, steps kept and lost, evaluations, checkpoint saves
// and loads, idle gaps, how each attempt ended (launch/report/html_timeline.cpp).
std::string timeline(const GoodputReport& report);

// The curves of metrics.jsonl against step and against wall time, with a switch between the two
// (launch/report/html_curves.cpp). Notes about missing data go into the section itself.
std::string curves(const GoodputReport& report, const MetricsTable& metrics);

// The process mesh of the run's resolved config with `world` ranks: its shape, the groups along
// each axis, and every rank placed by (pp, dp, tp) (launch/report/html_mesh.cpp).
std::string mesh(const Config& config, int world);

// Colour class of a goodput category (the bar, the table, the timeline share them).
std::string category_class(const std::string& name);

}  // namespace tetra::launch::html
