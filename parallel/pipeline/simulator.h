// Replays a Schedule (parallel/pipeline/schedule.h) with per-stage costs and reports what a step would take
// (docs/pipeline.md): makespan, bubble (makespan − the busiest rank's compute),
// peak activations per rank, and the timeline as a Chrome trace. Finds deadlocks and names the
// ranks and instructions stuck.
//
// Semantics: a rank runs its instructions one at a time in list order. A compute instruction
// starts when its rank is free and its inputs are there: a forward needs the previous stage's
// forward of that micro-batch, a backward its own forward and the next stage's backward (the last
// stage's backward only its own forward), a W its B — each + P2P when the two stages are on
// different ranks. A P2P batch is posted when its rank reaches it and completes when each of its
// receives has its data: P2P after the matching send was posted. Sends do not hold their rank up
// (the executor leaves them in flight: MPI Isend, NCCL sends on their own stream), so a schedule
// deadlocks only when its data dependencies go round in a circle.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/pipeline/schedule.h"

namespace tetra {

// Time per model stage and micro-batch, in any one unit (the trace draws one unit as 1 ms). One
// value applies to every stage; a list has one per stage.
struct PipelineCosts {
  std::vector<double> f{1.0};  // forward
  std::vector<double> b{2.0};  // full backward: input and weight gradients
  std::vector<double> w{1.0};  // the weight-gradient part of b (B-input-only costs b − w)
  std::vector<double> fb;      // an overlapped forward + backward pair, by the forward's stage; empty: F + B
  double p2p = 0;              // one transfer between ranks

  double forward(int stage) const { return at(f, stage); }
  double backward(int stage) const { return at(b, stage); }
  double weight(int stage) const { return at(w, stage); }
  double pair(int f_stage, int b_stage) const { return fb.empty() ? forward(f_stage) + backward(b_stage) : at(fb, f_stage); }

  // "F=1,B=2,W=1,FB=2.5,P2P=0"; a per-stage value is a list joined by ':' ("F=1.2:1:1:1.3").
  // Keys left out keep their values here. Throws a Usage error naming the key: unknown keys,
  // values that are not finite and ≥ 0, lists that are not one per stage, W > B.
  static PipelineCosts parse(const std::string& text, int stages, const PipelineCosts& base);
  static PipelineCosts parse(const std::string& text, int stages);  // base: the defaults above
  std::string to_string() const;  // the same syntax

 private:
  static double at(const std::vector<double>& v, int stage) { return v.size() == 1 ? v[0] : v[static_cast<size_t>(stage)]; }
};

struct SimulatedOp {
  int rank = 0;
  int index = 0;  // position in the rank's list
  double start = 0, end = 0;  // P2P batches: posted … completed
};

struct PipelineSimulation {
  double makespan = 0;
  double bubble = 0;           // makespan − max(busy)
  double bubble_fraction = 0;  // bubble / makespan
  std::vector<double> busy;    // per rank: time spent in compute instructions
  std::vector<int> peak_activations;  // per rank, (chunk, micro-batch) activations held at once
  std::vector<SimulatedOp> ops;       // every instruction of every rank, in completion order
};

// Throws an Internal error that names the ranks stuck and what each waits for when the schedule
// deadlocks, and one that lists check_schedule's problems when its content is unsound.
PipelineSimulation simulate(const Schedule& schedule, const PipelineCosts& costs);

// The timeline as Chrome trace events (chrome://tracing, Perfetto): one row per pipeline rank,
// compute instructions named in op syntax, P2P batches from posting to completion.
nlohmann::json chrome_trace(const Schedule& schedule, const PipelineSimulation& sim);

}  // namespace tetra
