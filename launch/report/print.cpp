// Printing and saving the goodput report: the table `tetra report` shows, and RUN_DIR/goodput.json.
#include <filesystem>
#include <fstream>
#include <iomanip>

#include "launch/report/goodput.h"
#include "launch/report/format.h"
#include "runtime/error.h"

namespace tetra::launch {

using nlohmann::json;

namespace {

using report_format::category_label;
using report_format::duration;
using report_format::ended;
using report_format::fixed;
using report_format::percent;
using report_format::si;
using report_format::utc;

}  // namespace

void print_report(const GoodputReport& r, std::ostream& out) {
  const GoodputBreakdown& b = r.seconds;
  const double wall = r.wall_seconds;
  out << "goodput report" << (r.source.empty() ? "" : " of " + r.source) << "\n";
  out << "  job wall time   " << duration(wall) << (wall < 60 ? "" : " (" + fixed(wall, 1) + " s)") << ", "
      << utc(r.wall_start) << " → " << utc(r.wall_end) << " UTC\n";
  out << "  attempts        " << r.attempts.size() << " (" << r.restarts << (r.restarts == 1 ? " restart" : " restarts")
      << "); the last one: " << ended(r.attempts.back(), true) << "\n";
  out << "  goodput         " << percent(b.productive, wall) << " %  (" << fixed(b.productive, 1)
      << " s of productive training)\n\n";

  out << "  " << std::left << std::setw(30) << "where the time went" << std::right << std::setw(12) << "seconds"
      << std::setw(8) << "%" << "\n";
  auto row = [&](const std::string& name, double s) {
    out << "  " << std::left << std::setw(30) << name << std::right << std::setw(12) << fixed(s, 1) << std::setw(8)
        << percent(s, wall) << "\n";
  };
  row("productive", b.productive);
  out << "  job level\n";
  const auto badput = b.badput();
  for (const auto& [name, s] : badput) {
    if (name == "exposed_comm") out << "  step level\n";
    row(std::string(name == "unaccounted" ? "" : "  ") + category_label(name), s);
    if (name == "other")
      for (const auto& [other, os] : r.other_by_name) row("      " + other, os);
    if (name == "exposed_comm")
      for (const auto& [axis, as] : r.exposed_comm_by_axis) row("      " + axis + " axis", as);
  }
  out << "  " << std::string(50, '-') << "\n";
  row("total", b.total());
  out << "\n";

  out << "  steps           " << r.steps_kept << " kept";
  if (r.steps_kept > 0) out << " (" << r.first_kept_step << ".." << r.last_kept_step << ")";
  if (r.steps_skipped > 0) out << ", " << r.steps_skipped << " skipped (non-finite)";
  out << ", " << r.steps_lost << " lost to failures; last checkpoint: "
      << (r.last_checkpoint_step ? "step " + std::to_string(*r.last_checkpoint_step) : std::string("none"));
  if (r.steps_at_risk > 0) out << "; " << r.steps_at_risk << " kept steps not yet in a checkpoint";
  out << "\n";
  out << "  tokens          " << si(static_cast<double>(r.tokens_kept)) << " kept";
  if (r.tokens_lost > 0) out << ", " << si(static_cast<double>(r.tokens_lost)) << " lost";
  out << "; " << si(r.tokens_per_s) << " tokens/s over the job, " << si(r.tokens_per_productive_s)
      << " per productive second\n";
  out << "  compute         ";
  if (r.achieved_flops_per_s) {
    out << fixed(*r.achieved_flops_per_s / 1e12, 2) << " TFLOP/s achieved";
    if (r.devices) out << " (" << fixed(*r.achieved_flops_per_s / 1e12 / *r.devices, 2) << " per device)";
    if (r.mfu) {
      out << ", MFU " << fixed(100.0 * *r.mfu, 1) << " %";
      if (r.mfu_in_steps) out << " (" << fixed(100.0 * *r.mfu_in_steps, 1) << " % within kept steps)";
      out << "; peak " << *r.devices << " × " << fixed(*r.peak_flops_per_device / 1e12, 1) << " TFLOP/s";
    } else {
      out << "; MFU unknown (run_info has no peak FLOP/s or device count)";
    }
    if (!r.precision.empty() || !r.device_kind.empty()) out << ", " << r.precision << " on " << r.device_kind;
    out << "\n";
  } else {
    out << "unknown (no run_info with flops_per_token)\n";
  }
  if (!r.data_io.empty())
    out << "  data            read by " << r.data_io << (r.data_io_reason.empty() ? "" : " — " + r.data_io_reason)
        << "\n";

  out << "\n  " << std::right << std::setw(7) << "attempt" << "  " << std::left << std::setw(16) << "host" << std::right
      << std::setw(6) << "ranks" << "  " << std::left << std::setw(20) << "started (UTC)" << std::right << std::setw(12)
      << "duration" << std::setw(11) << "startup" << std::setw(11) << "from ckpt" << "  " << std::left << std::setw(14) << "steps"
      << "ended\n";
  for (size_t i = 0; i < r.attempts.size(); ++i) {
    const AttemptSummary& a = r.attempts[i];
    std::string steps = a.steps == 0 ? "-" : std::to_string(a.first_step) + ".." + std::to_string(a.last_step);
    out << "  " << std::right << std::setw(7) << a.attempt << "  " << std::left << std::setw(16)
        << (a.host.empty() ? "?" : a.host) << std::right << std::setw(6) << a.world_size << "  " << std::left
        << std::setw(20) << utc(a.start) << std::right << std::setw(12) << duration(a.end - a.start)
        << std::setw(11) << duration(a.startup_seconds) << std::setw(11)
        << (a.restored_step ? std::to_string(*a.restored_step) : std::string("-")) << "  " << std::left << std::setw(14)
        << steps
        << ended(a, i + 1 == r.attempts.size()) << "\n";
  }
  if (!r.warnings.empty()) {
    out << "\n  warnings\n";
    for (const std::string& w : r.warnings) out << "  - " << w << "\n";
  }
  out << std::right;
}

json to_json(const GoodputReport& r) {
  auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  json seconds = {{"productive", r.seconds.productive}};
  json fraction = {{"productive", r.wall_seconds > 0 ? r.seconds.productive / r.wall_seconds : 0.0}};
  for (const auto& [name, s] : r.seconds.badput()) {
    seconds[name] = s;
    fraction[name] = r.wall_seconds > 0 ? s / r.wall_seconds : 0.0;
  }
  json attempts = json::array();
  for (const AttemptSummary& a : r.attempts)
    attempts.push_back({{"attempt", a.attempt},
                        {"host", a.host},
                        {"world_size", a.world_size},
                        {"start", a.start},
                        {"end", a.end},
                        {"seconds", a.end - a.start},
                        {"startup_seconds", a.startup_seconds},
                        {"end_reason", a.end_reason.empty() ? json(nullptr) : json(a.end_reason)},
                        {"exit_code", opt(a.exit_code)},
                        {"steps", a.steps},
                        {"first_step", a.first_step},
                        {"last_step", a.last_step},
                        {"restored_step", opt(a.restored_step)}});
  return {{"source", r.source},
          {"wall_start", r.wall_start},
          {"wall_end", r.wall_end},
          {"wall_seconds", r.wall_seconds},
          {"goodput", r.goodput},
          {"seconds", seconds},
          {"fraction", fraction},
          {"other_by_name", r.other_by_name},
          {"exposed_comm_by_axis", r.exposed_comm_by_axis},
          {"attempts", attempts},
          {"restarts", r.restarts},
          {"finished", r.finished},
          {"steps",
           {{"kept", r.steps_kept},
            {"lost", r.steps_lost},
            {"skipped", r.steps_skipped},
            {"first_kept", r.first_kept_step},
            {"last_kept", r.last_kept_step},
            {"last_checkpoint", opt(r.last_checkpoint_step)},
            {"at_risk", r.steps_at_risk}}},
          {"tokens", {{"kept", r.tokens_kept}, {"lost", r.tokens_lost}}},
          {"throughput",
           {{"tokens_per_s", r.tokens_per_s},
            {"tokens_per_productive_s", r.tokens_per_productive_s},
            {"kept_step_seconds", r.kept_step_seconds},
            {"achieved_flops_per_s", opt(r.achieved_flops_per_s)},
            {"mfu", opt(r.mfu)},
            {"mfu_in_steps", opt(r.mfu_in_steps)}}},
          {"run_info",
           {{"flops_per_token", opt(r.flops_per_token)},
            {"peak_flops_per_device", opt(r.peak_flops_per_device)},
            {"devices", opt(r.devices)},
            {"precision", r.precision},
            {"device_kind", r.device_kind},
            {"data_io", r.data_io},
            {"data_io_reason", r.data_io_reason}}},
          {"warnings", r.warnings}};
}

void write_report(const std::string& run_dir, const GoodputReport& report) {
  const std::string path = run_dir + "/goodput.json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) TETRA_FAIL(Data, "cannot write ", tmp, ": check that ", run_dir, " is writable");
    // Every text in the report came through the JSON parser, so it is valid UTF-8; should one not
    // be, it is written with U+FFFD rather than leaving a half-written file behind.
    out << to_json(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    out.flush();
    if (!out) TETRA_FAIL(Data, "cannot write ", tmp, ": check free space on its file system");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) TETRA_FAIL(Data, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

}  // namespace tetra::launch
