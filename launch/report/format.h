// Text forms of the goodput report's numbers (launch/report/goodput.h), shared by the printed
// report and the HTML page (launch/report/html_page.h) so that both show the same numbers, rounded alike.
#pragma once
#include <string>

#include "launch/report/goodput.h"

namespace tetra::launch::report_format {

std::string fixed(double v, int digits);       // 3.14159, 2 → "3.14"
std::string duration(double seconds);          // "42.0 s", "31m 37s", "1h 23m 39s"
std::string si(double v, int digits = 2);      // 1234567 → "1.23M" (B for billions); small numbers plain
std::string utc(double unix_seconds);          // "2023-11-14 22:13:20"
std::string percent(double part, double whole);  // "59.2" (one decimal), "-" when whole is 0
// The printed name of a goodput category (GoodputBreakdown::badput() names, and "productive").
std::string category_label(const std::string& name);
// Whether a badput category is measured inside kept steps (the report's "step level" group).
bool is_step_level(const std::string& name);
// How an attempt ended: "finished (exit 0)", "no attempt_end: crashed", ...; `last`: the job's last
// attempt (which may still be running).
std::string ended(const AttemptSummary& a, bool last);

}  // namespace tetra::launch::report_format
