// The goodput accounting, phase by phase: the ledger parsed (launch/report/ledger.h), the attempts
// and the steps they kept (launch/report/attempts.h), the sweep that gives every second of wall time
// to one owner (launch/report/sweep.h), the kept steps split into productive time and step-level
// badput (launch/report/step_badput.h); then throughput and MFU from the last run_info.
#include "launch/report/goodput.h"

#include <algorithm>
#include <filesystem>

#include "launch/report/attempts.h"
#include "launch/report/ledger.h"
#include "launch/report/step_badput.h"
#include "launch/report/sweep.h"
#include "runtime/error.h"
#include "runtime/goodput_clock.h"
#include "runtime/jsonl_file.h"

namespace tetra::launch {

using nlohmann::json;

std::vector<std::pair<std::string, double>> GoodputBreakdown::badput() const {
  return {{"startup", startup},
          {"checkpoint_save", checkpoint_save},
          {"checkpoint_load", checkpoint_load},
          {"evaluation", evaluation},
          {"data_stall", data_stall},
          {"lost_to_failures", lost_to_failures},
          {"skipped_steps", skipped_steps},
          {"idle", idle},
          {"other", other},
          {"exposed_comm", exposed_comm},
          {"pipeline_bubble", pipeline_bubble},
          {"recompute", recompute},
          {"optimizer", optimizer},
          {"host_overhead", host_overhead},
          {"unaccounted", unaccounted}};
}

double GoodputBreakdown::total() const {
  double t = productive;
  for (const auto& [name, s] : badput()) t += s;
  return t;
}

namespace {

std::vector<JobSpan> job_spans(const std::vector<ledger::Span>& spans) {
  std::vector<JobSpan> out;
  out.reserve(spans.size());
  for (const ledger::Span& s : spans) out.push_back({s.attempt, s.start, s.end, s.step, s.failed});
  std::sort(out.begin(), out.end(), [](const JobSpan& x, const JobSpan& y) { return x.start < y.start; });
  return out;
}

// Precision, device, data path and FLOP counts from the last run_info (infos sorted by attempt,
// then time), and the FLOP/s and MFU they give with the report's tokens and times.
void add_run_info(const std::vector<ledger::RunInfoEvent>& infos, GoodputReport& r) {
  const ledger::RunInfoEvent* last_info = infos.empty() ? nullptr : &infos.back();
  if (last_info) {
    for (const ledger::RunInfoEvent& info : infos)
      if (info.flops_per_token != last_info->flops_per_token || info.peak != last_info->peak ||
          info.devices != last_info->devices) {
        r.warnings.push_back("run_info differs between attempts; FLOP/s and MFU use attempt " +
                             std::to_string(last_info->attempt) + "'s");
        break;
      }
    r.precision = last_info->precision;
    r.device_kind = last_info->device_kind;
    r.data_io = last_info->data_io;
    r.data_io_reason = last_info->data_io_reason;
    if (last_info->flops_per_token > 0) r.flops_per_token = last_info->flops_per_token;
    if (last_info->peak > 0) r.peak_flops_per_device = last_info->peak;
    int devices = last_info->devices;
    if (devices <= 0 && r.attempts.back().world_size > 0) {
      devices = r.attempts.back().world_size;
      r.warnings.push_back("run_info has no device count; MFU uses the last attempt's world size");
    }
    if (devices > 0) r.devices = devices;
  } else {
    r.warnings.push_back("no run_info event: TFLOP/s and MFU cannot be computed");
  }
  if (r.flops_per_token) {
    r.achieved_flops_per_s = *r.flops_per_token * r.tokens_per_s;
    if (r.peak_flops_per_device && r.devices) {
      const double peak = *r.peak_flops_per_device * *r.devices;
      r.mfu = *r.achieved_flops_per_s / peak;
      if (r.kept_step_seconds > 0)
        r.mfu_in_steps = *r.flops_per_token * static_cast<double>(r.tokens_kept) / r.kept_step_seconds / peak;
    }
  }
}

}  // namespace

GoodputReport compute_goodput(const std::vector<json>& events) {
  GoodputReport r;
  ledger::WarningTally tally;
  ledger::Events parsed = ledger::parse(events, tally);
  resolve_attempts(parsed, r, tally);
  mark_kept_steps(parsed);

  WallShares shares = sweep_wall_time(parsed, r.wall_start, r.wall_end);
  r.seconds = shares.seconds;
  r.other_by_name = std::move(shares.other_by_name);
  const std::set<int64_t> kept_numbers = account_steps(parsed, r, tally);
  r.evaluations = job_spans(parsed.evals);
  r.checkpoint_saves = job_spans(parsed.saves);
  r.checkpoint_loads = job_spans(parsed.loads);

  r.attempts = summarize_attempts(parsed, shares.startup_of_attempt);
  r.restarts = static_cast<int>(r.attempts.size()) - 1;
  r.finished = r.attempts.back().end_reason == "finished";
  r.last_checkpoint_step = last_checkpoint_step(parsed);
  if (!r.finished) {
    int64_t saved = r.last_checkpoint_step.value_or(0);
    r.steps_at_risk = std::count_if(kept_numbers.begin(), kept_numbers.end(), [&](int64_t n) { return n > saved; });
  }

  const GoodputBreakdown& b = r.seconds;
  if (r.wall_seconds > 0) r.tokens_per_s = static_cast<double>(r.tokens_kept) / r.wall_seconds;
  if (b.productive > 0) r.tokens_per_productive_s = static_cast<double>(r.tokens_kept) / b.productive;
  r.goodput = r.wall_seconds > 0 ? b.productive / r.wall_seconds : 0;
  add_run_info(parsed.infos, r);
  tally.flush(r.warnings);
  return r;
}

GoodputReport load_and_compute(const std::string& run_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec))
    TETRA_FAIL(Usage, "run directory '", run_dir, "' does not exist or is not a directory; pass the RUN_DIR of a ",
               "training run (run.output_dir/run.name of its config)");
  const std::string ledger = GoodputLedger::path_in(run_dir);
  if (!fs::exists(ledger, ec))
    TETRA_FAIL(Usage, "no goodput ledger in '", run_dir, "' (expected ", ledger, "); `tetra train` writes it ",
               "when a run starts: check that this is the run's directory");
  std::vector<JsonlProblem> problems;
  std::vector<json> events = read_jsonl(ledger, &problems);
  if (events.empty())
    TETRA_FAIL(Data, "the goodput ledger ", ledger, " holds no events", problems.empty() ? "" : " that can be read",
               "; the run may have stopped before its first event was written");
  GoodputReport r = compute_goodput(events);
  r.source = ledger;
  std::vector<std::string> notes;
  for (const JsonlProblem& p : problems) notes.push_back("goodput.jsonl line " + std::to_string(p.line) + ": " + p.what);
  r.warnings.insert(r.warnings.begin(), notes.begin(), notes.end());
  return r;
}

}  // namespace tetra::launch
