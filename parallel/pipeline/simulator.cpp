#include "parallel/pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include "runtime/error.h"
#include "runtime/text_join.h"

namespace tetra {

// ---- costs ------------------------------------------------------------------------------------

PipelineCosts PipelineCosts::parse(const std::string& text, int stages) { return parse(text, stages, PipelineCosts{}); }

PipelineCosts PipelineCosts::parse(const std::string& text, int stages, const PipelineCosts& base) {
  PipelineCosts c = base;
  auto fail = [&](const std::string& key, const std::string& what) {
    TETRA_FAIL(Usage, "--costs ", text, ": ", key, what);
  };
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail(item, ": expected KEY=VALUE (keys F, B, W, FB, P2P)");
    const std::string key = item.substr(0, eq);
    std::vector<double> values;
    std::stringstream list(item.substr(eq + 1));
    std::string v;
    while (std::getline(list, v, ':')) {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !std::isfinite(x) || x < 0)
        fail(key, ": \"" + v + "\" is not a finite number ≥ 0");
      values.push_back(x);
    }
    if (values.empty()) fail(key, ": no value");
    if (values.size() != 1 && values.size() != static_cast<size_t>(stages))
      fail(key, ": " + std::to_string(values.size()) + " values, but the pipeline has " + std::to_string(stages) +
                    " stages (give one value for all, or one per stage joined by ':')");
    if (key == "F") c.f = values;
    else if (key == "B") c.b = values;
    else if (key == "W") c.w = values;
    else if (key == "FB") c.fb = values;
    else if (key == "P2P") {
      if (values.size() != 1) fail(key, ": one value (the latency of a transfer between ranks)");
      c.p2p = values[0];
    } else {
      fail(key, ": unknown key (valid: F, B, W, FB, P2P)");
    }
  }
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  for (int s = 0; s < stages; ++s)
    if (c.weight(s) > c.backward(s))
      fail("W", " = " + num(c.weight(s)) + " exceeds B = " + num(c.backward(s)) + " at stage " + std::to_string(s) +
                    " (W is the weight-gradient part of the full backward B)");
  return c;
}

std::string PipelineCosts::to_string() const {
  auto list = [](const std::vector<double>& v) {
    return join_text(v, ":", [](double x) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4g", x);
      return std::string(buf);
    });
  };
  std::string s = "F=" + list(f) + ",B=" + list(b) + ",W=" + list(w);
  if (!fb.empty()) s += ",FB=" + list(fb);
  return s + ",P2P=" + list({p2p});
}

// ---- simulation -------------------------------------------------------------------------------

namespace {

constexpr double kUnset = -1.0;

struct Loc {
  int rank = -1, index = -1;
};

// Where every piece of work of a schedule is, for the dependencies between ranks.
class Index {
 public:
  explicit Index(const Schedule& s) : l_(s.layout) {
    const size_t n = static_cast<size_t>(l_.flows() * l_.stages() * l_.flow_micro_batches());
    forward_.assign(n, {});
    backward_.assign(n, {});
    input_only_.assign(n, {});
    for (int r = 0; r < l_.ranks(); ++r) {
      const auto& ops = s.ranks[static_cast<size_t>(r)];
      for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
        const Instruction& op = ops[static_cast<size_t>(i)];
        if (op.has_forward()) forward_[key(r, op.f)] = {r, i};
        if (op.has_backward()) backward_[key(r, op.b)] = {r, i};
        if (op.type == OpType::BInput) input_only_[key(r, op.b)] = {r, i};
        for (const P2POp& p : op.p2p) (p.send ? sends_ : recvs_)[message(p)] = {r, i};
      }
    }
  }
  size_t key(int rank, const ChunkMb& x) const {
    return key(l_.flow_of_chunk(x.chunk), l_.stage_of(rank, x.chunk), x.mb);
  }
  size_t key(int flow, int stage, int mb) const {
    return (static_cast<size_t>(flow) * static_cast<size_t>(l_.stages()) + static_cast<size_t>(stage)) *
               static_cast<size_t>(l_.flow_micro_batches()) + static_cast<size_t>(mb);
  }
  static std::tuple<int, int, int, int> message(const P2POp& p) { return {static_cast<int>(p.payload), p.flow, p.stage, p.mb}; }

  Loc forward(int flow, int stage, int mb) const { return forward_[key(flow, stage, mb)]; }
  Loc backward(int flow, int stage, int mb) const { return backward_[key(flow, stage, mb)]; }
  Loc input_only(int rank, const ChunkMb& x) const { return input_only_[key(rank, x)]; }
  Loc forward_of(int rank, const ChunkMb& x) const { return forward_[key(rank, x)]; }
  // The other end of a transfer.
  Loc counterpart(const P2POp& p) const {
    const auto& other = p.send ? recvs_ : sends_;
    auto it = other.find(message(p));
    return it == other.end() ? Loc{} : it->second;
  }

 private:
  const PipelineLayout& l_;
  std::vector<Loc> forward_, backward_, input_only_;
  std::map<std::tuple<int, int, int, int>, Loc> sends_, recvs_;
};

// A dependency of a compute instruction: the instruction whose end it waits for, and whether the
// result crosses ranks (+ P2P).
struct Dep {
  Loc at;
  std::string what;  // for deadlock reports
};

void compute_deps(const Schedule& s, const Index& ix, int rank, const Instruction& op, std::vector<Dep>& deps) {
  const PipelineLayout& l = s.layout;
  deps.clear();
  if (op.has_forward()) {
    const int flow = l.flow_of_chunk(op.f.chunk), stage = l.stage_of(rank, op.f.chunk);
    if (stage > 0) deps.push_back({ix.forward(flow, stage - 1, op.f.mb), "the forward of stage " + std::to_string(stage - 1)});
  }
  if (op.type == OpType::B || op.type == OpType::BInput || op.type == OpType::FB) {
    const int flow = l.flow_of_chunk(op.b.chunk), stage = l.stage_of(rank, op.b.chunk);
    deps.push_back({ix.forward_of(rank, op.b), "its own forward"});
    if (stage < l.stages() - 1)
      deps.push_back({ix.backward(flow, stage + 1, op.b.mb), "the backward of stage " + std::to_string(stage + 1)});
  }
  if (op.type == OpType::W) deps.push_back({ix.input_only(rank, op.b), "its input-gradient backward"});
}

double compute_cost(const Schedule& s, const PipelineCosts& c, int rank, const Instruction& op) {
  const PipelineLayout& l = s.layout;
  auto stage = [&](const ChunkMb& x) { return l.stage_of(rank, x.chunk); };
  switch (op.type) {
    case OpType::F: return c.forward(stage(op.f));
    case OpType::B: return c.backward(stage(op.b));
    case OpType::BInput: return c.backward(stage(op.b)) - c.weight(stage(op.b));
    case OpType::W: return c.weight(stage(op.b));
    case OpType::FB: return c.pair(stage(op.f), stage(op.b));
    case OpType::P2P: return 0;
  }
  return 0;
}

std::string p2p_what(const P2POp& p) {
  return std::string(p.payload == Payload::Activation ? "act" : "grad") + " f" + std::to_string(p.flow) + ".s" +
         std::to_string(p.stage) + ".m" + std::to_string(p.mb);
}

std::string describe(const Schedule& s, const Loc& at) {
  if (at.rank < 0) return "an instruction no rank runs";
  const auto& ops = s.ranks[static_cast<size_t>(at.rank)];
  return to_string(ops[static_cast<size_t>(at.index)]) + " on rank " + std::to_string(at.rank) + " (#" +
         std::to_string(at.index) + ")";
}

// The simulation in progress: when each instruction started (a P2P: when it was posted, so that
// the other ends may match it) and ended, the instruction each rank is at, and when each rank is
// next free (seconds).
class Replay {
 public:
  Replay(const Schedule& s, const PipelineCosts& costs) : s_(s), costs_(costs), ix_(s) {
    const size_t R = static_cast<size_t>(s.layout.ranks());
    start_.resize(R);
    end_.resize(R);
    for (size_t r = 0; r < R; ++r) {
      start_[r].assign(s.ranks[r].size(), kUnset);
      end_[r].assign(s.ranks[r].size(), kUnset);
    }
    pc_.assign(R, 0);
    free_at_.assign(R, 0.0);
    sim_.busy.assign(R, 0.0);
  }

  // Runs every rank as far as its next instruction can start, round after round; a round without
  // progress ends it (with work left, a deadlock). Timing does not depend on the order ranks are
  // visited in.
  void run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < s_.layout.ranks(); ++r) progress |= advance(r);
    }
  }

  // Where each rank that did not finish waits, and for what; empty when every rank finished.
  std::string stuck() {
    std::string out;
    for (int r = 0; r < s_.layout.ranks(); ++r) {
      const auto& ops = s_.ranks[static_cast<size_t>(r)];
      const size_t i = pc_[static_cast<size_t>(r)];
      if (i >= ops.size()) continue;
      const Instruction& op = ops[i];
      out += "\n  rank " + std::to_string(r) + " at #" + std::to_string(i) + " " + to_string(op) + " waits for " +
             (op.type == OpType::P2P ? unmatched_receive(op) : unfinished_dependency(r, op));
    }
    return out;
  }

  // The timings once every rank has finished.
  PipelineSimulation result() && {
    for (int r = 0; r < s_.layout.ranks(); ++r) {
      sim_.makespan = std::max(sim_.makespan, free_at_[static_cast<size_t>(r)]);
      sim_.peak_activations.push_back(peak_activations(s_.ranks[static_cast<size_t>(r)], s_.forward_only));
    }
    const double busiest = *std::max_element(sim_.busy.begin(), sim_.busy.end());
    sim_.bubble = sim_.makespan - busiest;
    sim_.bubble_fraction = sim_.makespan > 0 ? sim_.bubble / sim_.makespan : 0.0;
    return std::move(sim_);
  }

 private:
  double end_of(const Loc& at) const {
    return at.rank < 0 ? kUnset : end_[static_cast<size_t>(at.rank)][static_cast<size_t>(at.index)];
  }
  double posted(const Loc& at) const {
    return at.rank < 0 ? kUnset : start_[static_cast<size_t>(at.rank)][static_cast<size_t>(at.index)];
  }

  // Runs rank r's instructions while each can start; true when anything changed (an instruction ran
  // or a P2P was posted).
  bool advance(int r) {
    const auto& ops = s_.ranks[static_cast<size_t>(r)];
    size_t& i = pc_[static_cast<size_t>(r)];
    double& t_free = free_at_[static_cast<size_t>(r)];
    bool progress = false;
    while (i < ops.size()) {
      const Instruction& op = ops[i];
      double& t0 = start_[static_cast<size_t>(r)][i];
      double t = 0;
      if (op.type == OpType::P2P) {
        if (t0 == kUnset) {
          t0 = t_free;
          progress = true;
        }
        if (!p2p_end(op, t0, t)) break;
      } else {
        if (!compute_start(r, op, t_free, t)) break;
        t0 = t;
        const double c = compute_cost(s_, costs_, r, op);
        sim_.busy[static_cast<size_t>(r)] += c;
        t += c;
      }
      end_[static_cast<size_t>(r)][i] = t;
      t_free = t;
      sim_.ops.push_back({r, static_cast<int>(i), t0, t});
      ++i;
      progress = true;
    }
    return progress;
  }

  // A P2P posted at t0 completes once every transfer it receives was posted by its sender, plus the
  // latency; false while one is not.
  bool p2p_end(const Instruction& op, double t0, double& t) const {
    t = t0;
    for (const P2POp& p : op.p2p) {
      if (p.send) continue;
      const double sent = posted(ix_.counterpart(p));
      if (sent == kUnset) return false;
      t = std::max(t, sent + costs_.p2p);
    }
    return true;
  }

  // A compute instruction of rank r starts when the rank is free and each dependency has ended (one
  // on another rank: plus the latency); false while one has not.
  bool compute_start(int r, const Instruction& op, double t_free, double& t) {
    compute_deps(s_, ix_, r, op, deps_);
    t = t_free;
    for (const Dep& d : deps_) {
      const double e = end_of(d.at);
      if (e == kUnset) return false;
      t = std::max(t, e + (d.at.rank != r ? costs_.p2p : 0.0));
    }
    return true;
  }

  std::string unmatched_receive(const Instruction& op) const {
    for (const P2POp& p : op.p2p) {
      const Loc other = ix_.counterpart(p);
      if (p.send || posted(other) != kUnset) continue;
      const std::string what = p2p_what(p);
      if (other.rank < 0) return what + ", which rank " + std::to_string(p.peer) + " never sends";
      return what + ", which rank " + std::to_string(other.rank) + " sends at #" + std::to_string(other.index) +
             " (it is at #" + std::to_string(pc_[static_cast<size_t>(other.rank)]) + ")";
    }
    return "";
  }

  std::string unfinished_dependency(int r, const Instruction& op) {
    compute_deps(s_, ix_, r, op, deps_);
    for (const Dep& d : deps_) {
      if (end_of(d.at) != kUnset) continue;
      std::string out = d.what + ", " + describe(s_, d.at);
      if (d.at.rank >= 0) out += " (that rank is at #" + std::to_string(pc_[static_cast<size_t>(d.at.rank)]) + ")";
      return out;
    }
    return "";
  }

  const Schedule& s_;
  const PipelineCosts& costs_;
  Index ix_;
  std::vector<std::vector<double>> start_, end_;  // [rank][instruction], kUnset until known
  std::vector<size_t> pc_;                        // [rank]: its next instruction
  std::vector<double> free_at_;                   // [rank]: when its last instruction ended
  std::vector<Dep> deps_;                         // scratch for compute_deps
  PipelineSimulation sim_;
};

}  // namespace

PipelineSimulation simulate(const Schedule& s, const PipelineCosts& costs) {
  const std::vector<std::string> problems = check_schedule(s);
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += "\n  " + p;
    TETRA_FAIL(Internal, "pipeline schedule ", s.name, " is unsound:", all);
  }
  Replay replay(s, costs);
  replay.run();
  const std::string stuck = replay.stuck();
  if (!stuck.empty()) TETRA_FAIL(Internal, "pipeline schedule ", s.name, " deadlocks:", stuck);
  return std::move(replay).result();
}

nlohmann::json chrome_trace(const Schedule& s, const PipelineSimulation& sim) {
  nlohmann::json events = nlohmann::json::array();
  for (int r = 0; r < s.layout.ranks(); ++r)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                      {"args", {{"name", "pipeline rank " + std::to_string(r)}}}});
  for (const SimulatedOp& o : sim.ops) {
    const Instruction& op = s.ranks[static_cast<size_t>(o.rank)][static_cast<size_t>(o.index)];
    const bool p2p = op.type == OpType::P2P;
    if (p2p && o.end <= o.start) continue;  // matched at once: nothing to draw
    nlohmann::json e = {{"name", p2p ? "P2P" : to_string(op)}, {"cat", p2p ? "p2p" : "compute"}, {"ph", "X"},
                        {"pid", 0}, {"tid", o.rank}, {"ts", o.start * 1e3}, {"dur", (o.end - o.start) * 1e3}};
    if (p2p) e["args"] = {{"batch", to_string(op)}};
    events.push_back(std::move(e));
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace tetra
