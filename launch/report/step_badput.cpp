#include "launch/report/step_badput.h"

#include <algorithm>
#include <map>

namespace tetra::launch {

using ledger::RunInfoEvent;
using ledger::StepExec;

namespace {

// The step's tokens: its own "tokens", else its attempt's (or the last) run_info tokens_per_step.
int64_t tokens_of(const StepExec& s, const std::map<int, const RunInfoEvent*>& info_of_attempt,
                  const RunInfoEvent* last_info, ledger::WarningTally& tally) {
  if (s.tokens) return *s.tokens;
  auto it = info_of_attempt.find(s.attempt);
  const RunInfoEvent* info = it != info_of_attempt.end() ? it->second : last_info;
  if (info && info->tokens_per_step > 0) {
    tally.add("step events without \"tokens\" were counted with run_info's tokens_per_step");
    return info->tokens_per_step;
  }
  tally.add("step events without \"tokens\" (and no run_info tokens_per_step) were counted as 0 tokens");
  return 0;
}

// A step execution whose result was thrown away, joined to the run of lost steps it continues.
void add_lost(const StepExec& s, int64_t tokens, GoodputReport& r) {
  r.seconds.lost_to_failures += s.covered;
  r.steps_lost += 1;
  r.tokens_lost += tokens;
  LostSteps* run = r.lost_steps.empty() ? nullptr : &r.lost_steps.back();
  if (run && run->attempt == s.attempt && s.step == run->last_step + 1) {
    run->last_step = s.step;
    run->executions += 1;
    run->end = std::max(run->end, s.end);
  } else {
    r.lost_steps.push_back({s.attempt, s.step, s.step, 1, s.start, s.end});
  }
}

// A kept step's covered seconds: its step-level parts, scaled to the share the sweep gave it, and
// the rest productive.
void add_kept(const StepExec& s, GoodputReport& r, ledger::WarningTally& tally) {
  GoodputBreakdown& b = r.seconds;
  r.kept_step_seconds += s.covered;
  const double duration = s.end - s.start;
  if (duration <= 0 || s.covered <= 0) return;
  double parts = s.exposed_comm + s.bubble + s.recompute + s.optimizer + s.data_wait + s.host_overhead;
  double scale = s.covered / duration;  // the share of the step the sweep gave it (1 unless overlapped)
  if (parts > duration) {
    tally.add("steps whose breakdown adds up to more than the step's time were scaled down to fit");
    scale *= duration / parts;
  }
  double exposed = s.exposed_comm * scale, bubble = s.bubble * scale, recompute = s.recompute * scale,
         optimizer = s.optimizer * scale, data = s.data_wait * scale, host = s.host_overhead * scale;
  b.exposed_comm += exposed;
  for (const auto& [axis, v] : s.exposed_by_axis) r.exposed_comm_by_axis[axis] += v * scale;
  b.pipeline_bubble += bubble;
  b.recompute += recompute;
  b.optimizer += optimizer;
  b.data_stall += data;
  b.host_overhead += host;
  b.productive += s.covered - (exposed + bubble + recompute + optimizer + data + host);
}

}  // namespace

std::set<int64_t> account_steps(const ledger::Events& events, GoodputReport& r, ledger::WarningTally& tally) {
  std::map<int, const RunInfoEvent*> info_of_attempt;
  for (const RunInfoEvent& info : events.infos) info_of_attempt[info.attempt] = &info;
  const RunInfoEvent* last_info = events.infos.empty() ? nullptr : &events.infos.back();

  std::set<int64_t> kept_numbers;
  for (const StepExec& s : events.steps) {
    const int64_t tokens = tokens_of(s, info_of_attempt, last_info, tally);
    if (!s.kept) {
      add_lost(s, tokens, r);
      continue;
    }
    if (s.skipped) {  // ran, but changed nothing: badput, and not a kept step
      r.seconds.skipped_steps += s.covered;
      r.steps_skipped += 1;
      continue;
    }
    kept_numbers.insert(s.step);
    r.tokens_kept += tokens;
    add_kept(s, r, tally);
  }
  r.steps_kept = static_cast<int64_t>(kept_numbers.size());
  if (!kept_numbers.empty()) {
    r.first_kept_step = *kept_numbers.begin();
    r.last_kept_step = *kept_numbers.rbegin();
  }
  return kept_numbers;
}

}  // namespace tetra::launch
