// The goodput accounting. Every event of the ledger becomes an interval on one time line; where
// intervals overlap, the more specific one owns the time (checkpoint load > checkpoint save >
// evaluation > step > other span > startup > "inside an attempt" > idle). One sweep over the
// sorted interval ends then hands each elementary segment of wall time to exactly one owner, so
// the categories sum to the wall time by construction. Kept steps split their share into
// productive time and the step-level badput the trainer measured inside them.
#include "launch/report/goodput.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include "runtime/error.h"
#include "runtime/goodput_clock.h"
#include "runtime/jsonl_file.h"

namespace tetra::launch {

namespace ev = tetra::goodput_event;
using nlohmann::json;

std::vector<std::pair<std::string, double>> GoodputBreakdown::badput() const {
  return {{"startup", startup},
          {"checkpoint_save", checkpoint_save},
          {"checkpoint_load", checkpoint_load},
          {"evaluation", evaluation},
          {"data_stall", data_stall},
          {"lost_to_failures", lost_to_failures},
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

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- reading events -------------------------------------------------------------------------

std::optional<double> number(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> integer(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_number()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  double v = it->get<double>();
  if (!std::isfinite(v) || v != std::floor(v)) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::string text(const json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

struct Attempt {
  int id = 0;
  bool has_start = false;
  double start = kInf;
  std::string host;
  int world_size = 0;
  bool has_end = false;
  double end_time = 0;
  std::string reason;
  std::optional<int> exit_code;
  double first_event = kInf;  // earliest time of any event (the start when attempt_start is missing)
  double last_event = -kInf;  // latest time of any event
  double first_work = kInf;   // earliest start of a step, eval, ckpt_save or other span
  double end = 0;             // resolved end
  double startup_seconds = 0;
};

struct StepExec {
  int attempt = 0;
  int64_t step = 0;
  double start = 0, end = 0;
  std::optional<int64_t> tokens;
  double exposed_comm = 0, bubble = 0, recompute = 0, optimizer = 0, data_wait = 0, host_overhead = 0;
  std::map<std::string, double> exposed_by_axis;  // optional split of exposed_comm
  size_t order = 0;  // position in the ledger, to break ties
  bool kept = false;
  double covered = 0;  // seconds of wall time the sweep gave to this step
};

struct Span {
  int attempt = 0;
  double start = 0, end = 0;
  std::optional<int64_t> step;
  bool failed = false;
  std::string name;  // "other" spans
  size_t order = 0;
};

struct RunInfoEvent {
  int attempt = 0;
  double time = 0;
  size_t order = 0;
  double flops_per_token = 0, peak = 0;
  int devices = 0;
  int64_t tokens_per_step = 0;
  std::string precision, device_kind;
  std::string data_io, data_io_reason;  // optional
};

// Counts repeated oddities so that a long ledger yields one warning per kind, not one per line.
class WarningTally {
 public:
  void add(const std::string& what) { ++counts_[what]; }
  void flush(std::vector<std::string>& out) const {
    for (const auto& [what, n] : counts_)
      out.push_back(n == 1 ? what : what + " (" + std::to_string(n) + " times)");
  }

 private:
  std::map<std::string, int64_t> counts_;
};

// Owners of wall time in the sweep, lowest priority first.
enum Owner : int { kInAttempt = 1, kStartup, kOtherSpan, kStep, kEval, kCkptSave, kCkptLoad };

struct Interval {
  double start, end;
  Owner owner;
  size_t index;  // into steps / other names / attempts, by owner
};

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

}  // namespace

GoodputReport compute_goodput(const std::vector<json>& events) {
  GoodputReport r;
  WarningTally tally;
  std::map<int, Attempt> attempts;
  std::vector<StepExec> steps;
  std::vector<Span> evals, saves, loads, others;
  std::vector<RunInfoEvent> infos;

  // ---- 1. sort the events by kind and attempt ---------------------------------------------
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (!e.is_object()) {
      tally.add("ignored ledger entries that are not JSON objects");
      continue;
    }
    const std::string kind = text(e, "event");
    std::optional<int64_t> att = integer(e, "attempt");
    if (kind.empty() || !att || *att < 1) {
      tally.add("ignored events without a string \"event\" and a positive integer \"attempt\"");
      continue;
    }
    Attempt& a = attempts[static_cast<int>(*att)];
    a.id = static_cast<int>(*att);
    auto note_time = [&a](double t) {
      a.first_event = std::min(a.first_event, t);
      a.last_event = std::max(a.last_event, t);
    };

    if (kind == ev::kAttemptStart || kind == ev::kAttemptEnd || kind == ev::kRunInfo) {
      std::optional<double> t = number(e, "time");
      if (!t) {
        tally.add("ignored " + kind + " events without a numeric \"time\"");
        continue;
      }
      note_time(*t);
      if (kind == ev::kAttemptStart) {
        if (a.has_start) {
          tally.add("attempt " + std::to_string(a.id) + " has more than one attempt_start; the earliest is used");
          if (*t >= a.start) continue;
        }
        a.has_start = true;
        a.start = *t;
        a.host = text(e, "host");
        a.world_size = static_cast<int>(integer(e, "world_size").value_or(0));
      } else if (kind == ev::kAttemptEnd) {
        if (a.has_end && *t <= a.end_time) continue;  // keep the latest
        a.has_end = true;
        a.end_time = *t;
        a.reason = text(e, "reason");
        if (a.reason.empty()) a.reason = "unknown";
        std::optional<int64_t> code = integer(e, "exit_code");
        a.exit_code = code ? std::optional<int>(static_cast<int>(*code)) : std::nullopt;
      } else {
        RunInfoEvent info;
        info.attempt = a.id;
        info.time = *t;
        info.order = i;
        info.flops_per_token = number(e, "flops_per_token").value_or(0);
        info.peak = number(e, "peak_flops_per_device").value_or(0);
        info.devices = static_cast<int>(integer(e, "devices").value_or(0));
        info.tokens_per_step = integer(e, "tokens_per_step").value_or(0);
        info.precision = text(e, "precision");
        info.device_kind = text(e, "device_kind");
        info.data_io = text(e, "data_io");
        info.data_io_reason = text(e, "data_io_reason");
        infos.push_back(info);
      }
      continue;
    }

    const bool is_span = kind == ev::kStep || kind == ev::kEval || kind == ev::kCkptSave ||
                         kind == ev::kCkptLoad || kind == ev::kOther;
    if (!is_span) {
      tally.add("ignored events of unknown kind \"" + kind + "\"");
      continue;
    }
    std::optional<double> start = number(e, "start"), end = number(e, "end");
    if (!start || !end || *end < *start) {
      tally.add("ignored " + kind + " events without numeric \"start\" <= \"end\"");
      continue;
    }
    note_time(*start);
    note_time(*end);
    if (kind != ev::kCkptLoad) a.first_work = std::min(a.first_work, *start);

    if (kind == ev::kStep) {
      std::optional<int64_t> n = integer(e, "step");
      if (!n) {
        tally.add("ignored step events without an integer \"step\"");
        continue;
      }
      StepExec s;
      s.attempt = a.id;
      s.step = *n;
      s.start = *start;
      s.end = *end;
      s.tokens = integer(e, "tokens");
      s.order = i;
      double* parts[] = {&s.exposed_comm, &s.bubble, &s.recompute, &s.optimizer, &s.data_wait, &s.host_overhead};
      const char* names[] = {"exposed_comm", "bubble", "recompute", "optimizer", "data_wait", "host_overhead"};
      for (int k = 0; k < 6; ++k) {
        double v = number(e, names[k]).value_or(0);
        if (v < 0) {
          tally.add(std::string("negative step \"") + names[k] + "\" values were taken as 0");
          v = 0;
        }
        *parts[k] = v;
      }
      if (auto axes = e.find("exposed_comm_by_axis"); axes != e.end()) {
        if (!axes->is_object()) {
          tally.add("ignored step \"exposed_comm_by_axis\" values that are not objects");
        } else {
          for (const auto& [axis, v] : axes->items()) {
            if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
              tally.add("ignored step \"exposed_comm_by_axis\" entries that are not numbers >= 0");
              continue;
            }
            s.exposed_by_axis[axis] = v.get<double>();
          }
        }
      }
      steps.push_back(s);
      continue;
    }
    Span s;
    s.attempt = a.id;
    s.start = *start;
    s.end = *end;
    s.step = integer(e, "step");
    auto failed = e.find("failed");
    s.failed = failed != e.end() && failed->is_boolean() && failed->get<bool>();
    s.order = i;
    if (kind == ev::kEval) evals.push_back(s);
    if (kind == ev::kCkptSave) saves.push_back(s);
    if (kind == ev::kCkptLoad) loads.push_back(s);
    if (kind == ev::kOther) {
      s.name = text(e, "name");
      if (s.name.empty()) s.name = "unnamed";
      others.push_back(s);
    }
  }
  if (attempts.empty())
    TETRA_FAIL(Data, "the goodput ledger holds no usable events (", events.size(),
               " lines read); a run records them from its first step on, so check that this is a run directory "
               "of `tetra train`");

  // ---- 2. attempts: their extent, the job's wall time, idle gaps --------------------------
  for (auto& [id, a] : attempts) {
    if (!a.has_start) {
      tally.add("attempt " + std::to_string(id) +
                " has no attempt_start line; its first event is taken as its start");
      a.start = a.first_event;
    }
    if (a.first_event < a.start - 1e-3)
      tally.add("attempt " + std::to_string(id) + " has events that begin before its attempt_start");
    a.end = std::max({a.start, a.last_event, a.has_end ? a.end_time : -kInf});
  }
  r.wall_start = kInf;
  r.wall_end = -kInf;
  for (const auto& [id, a] : attempts) {
    r.wall_start = std::min(r.wall_start, a.start);
    r.wall_end = std::max(r.wall_end, a.end);
  }
  r.wall_seconds = r.wall_end - r.wall_start;
  {
    const Attempt* prev = nullptr;
    for (const auto& [id, a] : attempts) {
      if (prev && a.start < prev->end - 1e-3)
        r.warnings.push_back("attempts " + std::to_string(prev->id) + " and " + std::to_string(id) + " overlap by " +
                             fixed(prev->end - a.start, 3) +
                             " s (clocks of different hosts disagree, or a process outlived its job); "
                             "time they share is counted once");
      prev = &a;
    }
  }

  // ---- 3. which step executions the final model kept ---------------------------------------
  // Last execution of a step number wins; a restore to step R (a ckpt_load, or an attempt whose
  // first step is R+1) throws away the executions of steps > R that came before it.
  std::sort(steps.begin(), steps.end(), [](const StepExec& x, const StepExec& y) {
    if (x.attempt != y.attempt) return x.attempt < y.attempt;
    if (x.end != y.end) return x.end < y.end;
    return x.order < y.order;
  });
  std::map<int64_t, size_t> last_exec;
  for (size_t i = 0; i < steps.size(); ++i) last_exec[steps[i].step] = i;

  std::map<int, int64_t> restore_from_later;  // attempt → min restore point of later attempts
  std::map<int, std::vector<std::pair<double, int64_t>>> loads_in;  // attempt → (time, step) loads
  {
    std::map<int, int64_t> own_restore;  // restore point each attempt began from
    std::map<int, double> first_start;
    for (const StepExec& s : steps) {
      auto it = first_start.find(s.attempt);
      if (it == first_start.end() || s.start < it->second) {
        first_start[s.attempt] = s.start;
        own_restore[s.attempt] = s.step - 1;
      }
    }
    for (const Span& l : loads) {
      if (l.failed || !l.step) continue;
      loads_in[l.attempt].push_back({l.start, *l.step});
      auto fs = first_start.find(l.attempt);
      if (fs == first_start.end() || l.start <= fs->second) {
        auto it = own_restore.find(l.attempt);
        own_restore[l.attempt] = it == own_restore.end() ? *l.step : std::min(it->second, *l.step);
      }
    }
    int64_t running = std::numeric_limits<int64_t>::max();
    for (auto it = attempts.rbegin(); it != attempts.rend(); ++it) {
      restore_from_later[it->first] = running;
      auto own = own_restore.find(it->first);
      if (own != own_restore.end()) running = std::min(running, own->second);
    }
    for (auto& [id, v] : loads_in) std::sort(v.begin(), v.end());
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    StepExec& s = steps[i];
    bool kept = last_exec[s.step] == i && s.step <= restore_from_later[s.attempt];
    if (kept) {
      auto it = loads_in.find(s.attempt);
      if (it != loads_in.end())
        for (const auto& [t, restored] : it->second)
          if (t >= s.end && s.step > restored) kept = false;
    }
    s.kept = kept;
  }

  // ---- 4. the sweep: every segment of wall time to exactly one owner ------------------------
  // Times are taken relative to the job's start, so that sums of small durations keep precision.
  const double t0 = r.wall_start;
  std::vector<Interval> intervals;
  auto add = [&](double start, double end, Owner owner, size_t index) {
    start = std::max(start, r.wall_start) - t0;
    end = std::min(end, r.wall_end) - t0;
    if (end > start) intervals.push_back({start, end, owner, index});
  };
  std::vector<const Attempt*> attempt_list;
  for (const auto& [id, a] : attempts) {
    add(a.start, a.end, kInAttempt, attempt_list.size());
    add(a.start, std::min(a.first_work, a.end), kStartup, attempt_list.size());
    attempt_list.push_back(&a);
  }
  for (size_t i = 0; i < steps.size(); ++i) add(steps[i].start, steps[i].end, kStep, i);
  for (const Span& s : evals) add(s.start, s.end, kEval, 0);
  for (const Span& s : saves) add(s.start, s.end, kCkptSave, 0);
  for (const Span& s : loads) add(s.start, s.end, kCkptLoad, 0);
  std::vector<std::string> other_names;
  for (const Span& s : others) {
    add(s.start, s.end, kOtherSpan, other_names.size());
    other_names.push_back(s.name);
  }

  struct Edge {
    double t;
    bool open;
    size_t interval;
  };
  std::vector<Edge> edges;
  edges.reserve(2 * intervals.size());
  for (size_t i = 0; i < intervals.size(); ++i) {
    edges.push_back({intervals[i].start, true, i});
    edges.push_back({intervals[i].end, false, i});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) { return x.t < y.t; });

  GoodputBreakdown& b = r.seconds;
  std::vector<double> other_seconds(other_names.size(), 0.0);
  std::vector<double> attempt_startup(attempt_list.size(), 0.0);
  std::set<std::pair<int, size_t>> active;  // (owner priority, interval)
  double cursor = 0;
  auto give = [&](double seconds) {
    if (seconds <= 0) return;
    if (active.empty()) {
      b.idle += seconds;
      return;
    }
    const Interval& iv = intervals[active.rbegin()->second];
    switch (iv.owner) {
      case kInAttempt: b.unaccounted += seconds; break;
      case kStartup:
        b.startup += seconds;
        attempt_startup[iv.index] += seconds;
        break;
      case kOtherSpan:
        b.other += seconds;
        other_seconds[iv.index] += seconds;
        break;
      case kStep: steps[iv.index].covered += seconds; break;
      case kEval: b.evaluation += seconds; break;
      case kCkptSave: b.checkpoint_save += seconds; break;
      case kCkptLoad: b.checkpoint_load += seconds; break;
    }
  };
  for (size_t i = 0; i < edges.size();) {
    double t = edges[i].t;
    give(t - cursor);
    cursor = t;
    for (; i < edges.size() && edges[i].t == t; ++i) {
      std::pair<int, size_t> key{intervals[edges[i].interval].owner, edges[i].interval};
      if (edges[i].open)
        active.insert(key);
      else
        active.erase(key);
    }
  }
  give(r.wall_seconds - cursor);  // nothing is open past the last edge: idle (none in practice)

  // ---- 5. kept steps: productive time and the step-level badput inside them ----------------
  std::map<int, const RunInfoEvent*> info_of_attempt;
  std::sort(infos.begin(), infos.end(), [](const RunInfoEvent& x, const RunInfoEvent& y) {
    return x.attempt != y.attempt ? x.attempt < y.attempt : x.time != y.time ? x.time < y.time : x.order < y.order;
  });
  for (const RunInfoEvent& info : infos) info_of_attempt[info.attempt] = &info;
  const RunInfoEvent* last_info = infos.empty() ? nullptr : &infos.back();

  std::set<int64_t> kept_numbers;
  for (StepExec& s : steps) {
    int64_t tokens = 0;
    if (s.tokens) {
      tokens = *s.tokens;
    } else {
      auto it = info_of_attempt.find(s.attempt);
      const RunInfoEvent* info = it != info_of_attempt.end() ? it->second : last_info;
      if (info && info->tokens_per_step > 0) {
        tokens = info->tokens_per_step;
        tally.add("step events without \"tokens\" were counted with run_info's tokens_per_step");
      } else {
        tally.add("step events without \"tokens\" (and no run_info tokens_per_step) were counted as 0 tokens");
      }
    }
    if (!s.kept) {
      b.lost_to_failures += s.covered;
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
      continue;
    }
    kept_numbers.insert(s.step);
    r.tokens_kept += tokens;
    r.kept_step_seconds += s.covered;
    const double duration = s.end - s.start;
    if (duration <= 0 || s.covered <= 0) continue;
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
  r.steps_kept = static_cast<int64_t>(kept_numbers.size());
  if (!kept_numbers.empty()) {
    r.first_kept_step = *kept_numbers.begin();
    r.last_kept_step = *kept_numbers.rbegin();
  }
  for (size_t i = 0; i < other_names.size(); ++i) r.other_by_name[other_names[i]] += other_seconds[i];
  auto job_spans = [](const std::vector<Span>& spans) {
    std::vector<JobSpan> out;
    out.reserve(spans.size());
    for (const Span& s : spans) out.push_back({s.attempt, s.start, s.end, s.step, s.failed});
    std::sort(out.begin(), out.end(), [](const JobSpan& x, const JobSpan& y) { return x.start < y.start; });
    return out;
  };
  r.evaluations = job_spans(evals);
  r.checkpoint_saves = job_spans(saves);
  r.checkpoint_loads = job_spans(loads);

  // ---- 6. attempts, checkpoints, throughput -------------------------------------------------
  for (size_t i = 0; i < attempt_list.size(); ++i) {
    const Attempt& a = *attempt_list[i];
    AttemptSummary s;
    s.attempt = a.id;
    s.host = a.host;
    s.world_size = a.world_size;
    s.start = a.start;
    s.end = a.end;
    s.end_reason = a.has_end ? a.reason : "";
    s.exit_code = a.exit_code;
    s.startup_seconds = attempt_startup[i];
    for (const StepExec& e : steps) {
      if (e.attempt != a.id) continue;
      s.first_step = s.steps == 0 ? e.step : std::min(s.first_step, e.step);
      s.last_step = s.steps == 0 ? e.step : std::max(s.last_step, e.step);
      ++s.steps;
    }
    double first_load = kInf;
    for (const Span& l : loads)
      if (l.attempt == a.id && !l.failed && l.step && l.start < first_load) {
        first_load = l.start;
        s.restored_step = *l.step;
      }
    r.attempts.push_back(s);
  }
  r.restarts = static_cast<int>(r.attempts.size()) - 1;
  r.finished = r.attempts.back().end_reason == "finished";

  const Span* last_save = nullptr;
  for (const Span& s : saves) {
    if (s.failed || !s.step) continue;
    if (!last_save || s.attempt > last_save->attempt || (s.attempt == last_save->attempt && s.end >= last_save->end))
      last_save = &s;
  }
  if (last_save) r.last_checkpoint_step = *last_save->step;
  if (!r.finished) {
    int64_t saved = r.last_checkpoint_step.value_or(0);
    r.steps_at_risk = std::count_if(kept_numbers.begin(), kept_numbers.end(), [&](int64_t n) { return n > saved; });
  }

  if (r.wall_seconds > 0) r.tokens_per_s = static_cast<double>(r.tokens_kept) / r.wall_seconds;
  if (b.productive > 0) r.tokens_per_productive_s = static_cast<double>(r.tokens_kept) / b.productive;
  r.goodput = r.wall_seconds > 0 ? b.productive / r.wall_seconds : 0;

  if (last_info) {
    for (const RunInfoEvent& info : infos)
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
