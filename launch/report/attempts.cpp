#include "launch/report/attempts.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "launch/report/format.h"

namespace tetra::launch {

using ledger::Attempt;
using ledger::kInf;
using ledger::Span;
using ledger::StepExec;

void resolve_attempts(ledger::Events& events, GoodputReport& r, ledger::WarningTally& tally) {
  for (auto& [id, a] : events.attempts) {
    if (!a.has_start) {
      tally.add("attempt " + std::to_string(id) + " has no attempt_start line; its first event is taken as its start");
      a.start = a.first_event;
    }
    if (a.first_event < a.start - 1e-3)
      tally.add("attempt " + std::to_string(id) + " has events that begin before its attempt_start");
    a.end = std::max({a.start, a.last_event, a.has_end ? a.end_time : -kInf});
  }
  r.wall_start = kInf;
  r.wall_end = -kInf;
  for (const auto& [id, a] : events.attempts) {
    r.wall_start = std::min(r.wall_start, a.start);
    r.wall_end = std::max(r.wall_end, a.end);
  }
  r.wall_seconds = r.wall_end - r.wall_start;
  const Attempt* prev = nullptr;
  for (const auto& [id, a] : events.attempts) {
    if (prev && a.start < prev->end - 1e-3)
      r.warnings.push_back("attempts " + std::to_string(prev->id) + " and " + std::to_string(id) + " overlap by " +
                           report_format::fixed(prev->end - a.start, 3) +
                           " s (clocks of different hosts disagree, or a process outlived its job); "
                           "time they share is counted once");
    prev = &a;
  }
}

namespace {

// Where restores put each attempt back to.
struct Restores {
  std::map<int, int64_t> from_later;  // attempt → the lowest restore point of the attempts after it
  std::map<int, std::vector<std::pair<double, int64_t>>> loads_in;  // attempt → its (time, step) loads, by time
};

Restores restores(const ledger::Events& events) {
  Restores out;
  std::map<int, int64_t> own_restore;  // restore point each attempt began from
  std::map<int, double> first_start;
  for (const StepExec& s : events.steps) {
    auto it = first_start.find(s.attempt);
    if (it == first_start.end() || s.start < it->second) {
      first_start[s.attempt] = s.start;
      own_restore[s.attempt] = s.step - 1;
    }
  }
  for (const Span& l : events.loads) {
    if (l.failed || !l.step) continue;
    out.loads_in[l.attempt].push_back({l.start, *l.step});
    auto fs = first_start.find(l.attempt);
    if (fs == first_start.end() || l.start <= fs->second) {
      auto it = own_restore.find(l.attempt);
      own_restore[l.attempt] = it == own_restore.end() ? *l.step : std::min(it->second, *l.step);
    }
  }
  int64_t running = std::numeric_limits<int64_t>::max();
  for (auto it = events.attempts.rbegin(); it != events.attempts.rend(); ++it) {
    out.from_later[it->first] = running;
    auto own = own_restore.find(it->first);
    if (own != own_restore.end()) running = std::min(running, own->second);
  }
  for (auto& [id, v] : out.loads_in) std::sort(v.begin(), v.end());
  return out;
}

}  // namespace

void mark_kept_steps(ledger::Events& events) {
  std::vector<StepExec>& steps = events.steps;
  std::sort(steps.begin(), steps.end(), [](const StepExec& x, const StepExec& y) {
    if (x.attempt != y.attempt) return x.attempt < y.attempt;
    if (x.end != y.end) return x.end < y.end;
    return x.order < y.order;
  });
  std::map<int64_t, size_t> last_exec;
  for (size_t i = 0; i < steps.size(); ++i) last_exec[steps[i].step] = i;
  Restores rs = restores(events);
  for (size_t i = 0; i < steps.size(); ++i) {
    StepExec& s = steps[i];
    bool kept = last_exec[s.step] == i && s.step <= rs.from_later[s.attempt];
    if (kept) {
      auto it = rs.loads_in.find(s.attempt);
      if (it != rs.loads_in.end())
        for (const auto& [t, restored] : it->second)
          if (t >= s.end && s.step > restored) kept = false;
    }
    s.kept = kept;
  }
}

std::vector<AttemptSummary> summarize_attempts(const ledger::Events& events,
                                               const std::vector<double>& startup_seconds) {
  std::vector<AttemptSummary> out;
  size_t i = 0;
  for (const auto& [id, a] : events.attempts) {
    AttemptSummary s{.attempt = a.id, .host = a.host, .world_size = a.world_size, .start = a.start, .end = a.end,
                     .end_reason = a.has_end ? a.reason : "", .exit_code = a.exit_code,
                     .startup_seconds = startup_seconds[i++]};
    for (const StepExec& e : events.steps) {
      if (e.attempt != a.id) continue;
      s.first_step = s.steps == 0 ? e.step : std::min(s.first_step, e.step);
      s.last_step = s.steps == 0 ? e.step : std::max(s.last_step, e.step);
      ++s.steps;
    }
    double first_load = kInf;
    for (const Span& l : events.loads)
      if (l.attempt == a.id && !l.failed && l.step && l.start < first_load) {
        first_load = l.start;
        s.restored_step = *l.step;
      }
    out.push_back(s);
  }
  return out;
}

std::optional<int64_t> last_checkpoint_step(const ledger::Events& events) {
  const Span* last_save = nullptr;
  for (const Span& s : events.saves) {
    if (s.failed || !s.step) continue;
    if (!last_save || s.attempt > last_save->attempt || (s.attempt == last_save->attempt && s.end >= last_save->end))
      last_save = &s;
  }
  if (!last_save) return std::nullopt;
  return *last_save->step;
}

}  // namespace tetra::launch
