#include "launch/report/sweep.h"

#include <algorithm>
#include <set>
#include <utility>

namespace tetra::launch {

namespace {

// Owners of wall time in the sweep, lowest priority first.
enum Owner : int { kInAttempt = 1, kStartup, kOtherSpan, kStep, kEval, kCkptSave, kCkptLoad };

struct Interval {
  double start, end;  // seconds since the job's start
  Owner owner;
  size_t index;  // into steps / other names / attempts, by owner
};

// Every event as an interval, clipped to the wall time. Times are taken relative to the job's start,
// so that sums of small durations keep precision. other_names: the name of each other span, by index.
std::vector<Interval> intervals_of(const ledger::Events& events, double wall_start, double wall_end,
                                   std::vector<std::string>& other_names) {
  const double t0 = wall_start;
  std::vector<Interval> intervals;
  auto add = [&](double start, double end, Owner owner, size_t index) {
    start = std::max(start, wall_start) - t0;
    end = std::min(end, wall_end) - t0;
    if (end > start) intervals.push_back({start, end, owner, index});
  };
  size_t n = 0;
  for (const auto& [id, a] : events.attempts) {
    add(a.start, a.end, kInAttempt, n);
    add(a.start, std::min(a.first_work, a.end), kStartup, n);
    ++n;
  }
  for (size_t i = 0; i < events.steps.size(); ++i) add(events.steps[i].start, events.steps[i].end, kStep, i);
  for (const ledger::Span& s : events.evals) add(s.start, s.end, kEval, 0);
  for (const ledger::Span& s : events.saves) add(s.start, s.end, kCkptSave, 0);
  for (const ledger::Span& s : events.loads) add(s.start, s.end, kCkptLoad, 0);
  for (const ledger::Span& s : events.others) {
    add(s.start, s.end, kOtherSpan, other_names.size());
    other_names.push_back(s.name);
  }
  return intervals;
}

struct Edge {
  double t;
  bool open;
  size_t interval;
};

std::vector<Edge> edges_of(const std::vector<Interval>& intervals) {
  std::vector<Edge> edges;
  edges.reserve(2 * intervals.size());
  for (size_t i = 0; i < intervals.size(); ++i) {
    edges.push_back({intervals[i].start, true, i});
    edges.push_back({intervals[i].end, false, i});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) { return x.t < y.t; });
  return edges;
}

}  // namespace

WallShares sweep_wall_time(ledger::Events& events, double wall_start, double wall_end) {
  std::vector<std::string> other_names;
  const std::vector<Interval> intervals = intervals_of(events, wall_start, wall_end, other_names);
  const std::vector<Edge> edges = edges_of(intervals);

  WallShares out;
  GoodputBreakdown& b = out.seconds;
  std::vector<double> other_seconds(other_names.size(), 0.0);
  out.startup_of_attempt.assign(events.attempts.size(), 0.0);
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
        out.startup_of_attempt[iv.index] += seconds;
        break;
      case kOtherSpan:
        b.other += seconds;
        other_seconds[iv.index] += seconds;
        break;
      case kStep: events.steps[iv.index].covered += seconds; break;
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
  give(wall_end - wall_start - cursor);  // nothing is open past the last edge: idle (none in practice)
  for (size_t i = 0; i < other_names.size(); ++i) out.other_by_name[other_names[i]] += other_seconds[i];
  return out;
}

}  // namespace tetra::launch
