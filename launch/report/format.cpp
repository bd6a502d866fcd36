// Text forms of the goodput report's numbers, shared by the printed report and the HTML page.
#include "launch/report/format.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <map>
#include <sstream>

namespace tetra::launch::report_format {

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

std::string duration(double s) {
  if (s < 60) return fixed(s, 1) + " s";
  long total = std::lround(s);
  long h = total / 3600, m = (total % 3600) / 60, sec = total % 60;
  char buf[64];
  if (h > 0)
    std::snprintf(buf, sizeof buf, "%ldh %02ldm %02lds", h, m, sec);
  else
    std::snprintf(buf, sizeof buf, "%ldm %02lds", m, sec);
  return buf;
}

std::string si(double v, int digits) {
  const char* units[] = {"", "k", "M", "B", "T", "P", "E"};  // token counts: B for billions
  int u = 0;
  while (std::fabs(v) >= 1000 && u < 6) {
    v /= 1000;
    ++u;
  }
  return fixed(v, u == 0 ? 0 : digits) + units[u];
}

std::string utc(double unix_seconds) {
  std::time_t t = static_cast<std::time_t>(std::floor(unix_seconds));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string percent(double part, double whole) { return whole > 0 ? fixed(100.0 * part / whole, 1) : "-"; }

std::string category_label(const std::string& name) {
  static const std::map<std::string, const char*> labels = {
      {"productive", "productive"},
      {"startup", "startup"},
      {"checkpoint_save", "checkpoint save (blocking)"},
      {"checkpoint_load", "checkpoint load"},
      {"evaluation", "evaluation"},
      {"data_stall", "data stalls"},
      {"lost_to_failures", "steps lost to failures"},
      {"skipped_steps", "steps skipped (non-finite)"},
      {"idle", "idle between attempts"},
      {"other", "other spans"},
      {"exposed_comm", "exposed communication"},
      {"pipeline_bubble", "pipeline bubble"},
      {"recompute", "recomputation"},
      {"optimizer", "optimizer"},
      {"host_overhead", "host overhead"},
      {"unaccounted", "unaccounted"}};
  auto it = labels.find(name);
  return it == labels.end() ? name : it->second;
}

bool is_step_level(const std::string& name) {
  return name == "exposed_comm" || name == "pipeline_bubble" || name == "recompute" || name == "optimizer" ||
         name == "host_overhead";
}

std::string ended(const AttemptSummary& a, bool last) {
  if (a.end_reason.empty()) return last ? "no attempt_end: running, or crashed" : "no attempt_end: crashed";
  std::string s = a.end_reason;
  if (a.exit_code) s += " (exit " + std::to_string(*a.exit_code) + ")";
  return s;
}

}  // namespace tetra::launch::report_format
