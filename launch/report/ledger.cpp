#include "launch/report/ledger.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/goodput_clock.h"

namespace tetra::launch::ledger {

namespace ev = tetra::goodput_event;
using nlohmann::json;

namespace {

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

void note_time(Attempt& a, double t) {
  a.first_event = std::min(a.first_event, t);
  a.last_event = std::max(a.last_event, t);
}

// attempt_start, attempt_end and run_info: events at one "time".
void read_timed_event(const json& e, size_t i, const std::string& kind, Attempt& a, Events& out,
                      WarningTally& tally) {
  std::optional<double> t = number(e, "time");
  if (!t) {
    tally.add("ignored " + kind + " events without a numeric \"time\"");
    return;
  }
  note_time(a, *t);
  if (kind == ev::kAttemptStart) {
    if (a.has_start) {
      tally.add("attempt " + std::to_string(a.id) + " has more than one attempt_start; the earliest is used");
      if (*t >= a.start) return;
    }
    a.has_start = true;
    a.start = *t;
    a.host = text(e, "host");
    a.world_size = static_cast<int>(integer(e, "world_size").value_or(0));
  } else if (kind == ev::kAttemptEnd) {
    if (a.has_end && *t <= a.end_time) return;  // keep the latest
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
    out.infos.push_back(info);
  }
}

// The step-level parts of a step event: negative ones count as 0, the per-axis split is optional.
void read_step_parts(const json& e, StepExec& s, WarningTally& tally) {
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
  auto axes = e.find("exposed_comm_by_axis");
  if (axes == e.end()) return;
  if (!axes->is_object()) {
    tally.add("ignored step \"exposed_comm_by_axis\" values that are not objects");
    return;
  }
  for (const auto& [axis, v] : axes->items()) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
      tally.add("ignored step \"exposed_comm_by_axis\" entries that are not numbers >= 0");
      continue;
    }
    s.exposed_by_axis[axis] = v.get<double>();
  }
}

// step, eval, ckpt_save, ckpt_load and other: events over [start, end].
void read_span_event(const json& e, size_t i, const std::string& kind, Attempt& a, Events& out,
                     WarningTally& tally) {
  std::optional<double> start = number(e, "start"), end = number(e, "end");
  if (!start || !end || *end < *start) {
    tally.add("ignored " + kind + " events without numeric \"start\" <= \"end\"");
    return;
  }
  note_time(a, *start);
  note_time(a, *end);
  if (kind != ev::kCkptLoad) a.first_work = std::min(a.first_work, *start);

  if (kind == ev::kStep) {
    std::optional<int64_t> n = integer(e, "step");
    if (!n) {
      tally.add("ignored step events without an integer \"step\"");
      return;
    }
    StepExec s;
    s.attempt = a.id;
    s.step = *n;
    s.start = *start;
    s.end = *end;
    s.tokens = integer(e, "tokens");
    s.order = i;
    auto skipped = e.find("skipped");
    s.skipped = skipped != e.end() && skipped->is_boolean() && skipped->get<bool>();
    read_step_parts(e, s, tally);
    out.steps.push_back(s);
    return;
  }
  Span s;
  s.attempt = a.id;
  s.start = *start;
  s.end = *end;
  s.step = integer(e, "step");
  auto failed = e.find("failed");
  s.failed = failed != e.end() && failed->is_boolean() && failed->get<bool>();
  s.order = i;
  if (kind == ev::kEval) out.evals.push_back(s);
  if (kind == ev::kCkptSave) out.saves.push_back(s);
  if (kind == ev::kCkptLoad) out.loads.push_back(s);
  if (kind == ev::kOther) {
    s.name = text(e, "name");
    if (s.name.empty()) s.name = "unnamed";
    out.others.push_back(s);
  }
}

void read_event(const json& e, size_t i, Events& out, WarningTally& tally) {
  if (!e.is_object()) {
    tally.add("ignored ledger entries that are not JSON objects");
    return;
  }
  const std::string kind = text(e, "event");
  std::optional<int64_t> att = integer(e, "attempt");
  if (kind.empty() || !att || *att < 1) {
    tally.add("ignored events without a string \"event\" and a positive integer \"attempt\"");
    return;
  }
  // The attempt counts from here on, even when the rest of its event cannot be used.
  Attempt& a = out.attempts[static_cast<int>(*att)];
  a.id = static_cast<int>(*att);
  if (kind == ev::kAttemptStart || kind == ev::kAttemptEnd || kind == ev::kRunInfo) {
    read_timed_event(e, i, kind, a, out, tally);
    return;
  }
  const bool is_span = kind == ev::kStep || kind == ev::kEval || kind == ev::kCkptSave || kind == ev::kCkptLoad ||
                       kind == ev::kOther;
  if (!is_span) {
    tally.add("ignored events of unknown kind \"" + kind + "\"");
    return;
  }
  read_span_event(e, i, kind, a, out, tally);
}

}  // namespace

Events parse(const std::vector<json>& events, WarningTally& tally) {
  Events out;
  for (size_t i = 0; i < events.size(); ++i) read_event(events[i], i, out, tally);
  if (out.attempts.empty())
    TETRA_FAIL(Data, "the goodput ledger holds no usable events (", events.size(),
               " lines read); a run records them from its first step on, so check that this is a run directory "
               "of `tetra train`");
  std::sort(out.infos.begin(), out.infos.end(), [](const RunInfoEvent& x, const RunInfoEvent& y) {
    return x.attempt != y.attempt ? x.attempt < y.attempt : x.time != y.time ? x.time < y.time : x.order < y.order;
  });
  return out;
}

}  // namespace tetra::launch::ledger
