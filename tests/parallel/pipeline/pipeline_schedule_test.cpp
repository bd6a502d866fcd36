// Pipeline schedules as data (parallel/pipeline/schedule*.h): the generators against DeepSeek's reference
// DualPipe / DualPipeV, every schedule's content and deadlock freedom over a grid of (pp,
// micro-batches), the transfer batches, and the op syntax.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "parallel/pipeline/simulator.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/generators.h"
#include "runtime/error.h"

namespace tetra {
namespace {

// The compute sequence of every rank of DeepSeek's reference DualPipe.step() and DualPipeV.step()
// (github.com/deepseek-ai/DualPipe at commit 3da1bbe), for every pp and micro-batch count of a grid
// (dualpipe: pp 2, 4, 6, 8; dualpipev: pp 1–6 and 8; from 2·pp micro-batches up). It was recorded
// by running the reference step() unchanged, one rank at a time, under PyTorch 1.13 on the CPU with
// its point-to-point transfers replaced by no-ops, and with two one-matrix stages whose forward,
// backward and deferred weight gradient (through the reference's WeightGradStore, so W's follow its
// own first-in-first-out queue) append to a log: F<c>.<m> when stage c forwards its m-th
// micro-batch, B<c>.<m> / B<c>.<m>w for its backward with the weight gradient now / deferred,
// W<c>.<m> when the deferred weight gradient runs, and FB(F…,B…) for a call of the reference's
// overlapped forward-backward. Stage c is the module the reference indexes (DualPipe: the
// direction, 0 entering at rank 0; DualPipeV: the leg of the V).
TEST(PipelineSchedule, DualPipeMatchesTheReferenceStep) {
  std::ifstream in(std::string(TETRA_SOURCE_DIR) + "/tests/parallel/pipeline/data/dualpipe_reference.jsonl");
  ASSERT_TRUE(in) << "missing tests/parallel/pipeline/data/dualpipe_reference.jsonl";
  std::string line;
  int cases = 0;
  std::map<std::string, int> per_schedule;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string name = j["schedule"];
    const int pp = j["pp"], m = j["micro_batches"], rank = j["rank"];
    const std::vector<std::string> expected = j["ops"];
    const RankOps ops = name == "dualpipe" ? dualpipe_ops(pp, rank, m) : dualpipev_ops(pp, rank, m);
    std::vector<std::string> got;
    for (const Instruction& op : ops) got.push_back(to_string(op));
    ASSERT_EQ(got, expected) << name << " pp " << pp << " micro-batches " << m << " rank " << rank;
    ++cases;
    ++per_schedule[name];
  }
  EXPECT_GT(per_schedule["dualpipe"], 100);
  EXPECT_GT(per_schedule["dualpipev"], 150);
  EXPECT_EQ(cases, per_schedule["dualpipe"] + per_schedule["dualpipev"]);
}

// (pp, micro-batches) pairs each schedule accepts, from a grid.
std::vector<std::pair<int, int>> valid_grid(const std::string& name) {
  std::vector<std::pair<int, int>> out;
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 4 * pp + 3; ++m)
      if (schedule_requirement(name, pp, m).empty()) out.push_back({pp, m});
  return out;
}

TEST(PipelineSchedule, EverySchedulesIsSoundAndRunsWithoutDeadlock) {
  for (const std::string& name : schedule_names()) {
    const auto grid = valid_grid(name);
    ASSERT_GT(grid.size(), 20u) << name;
    for (auto [pp, m] : grid) {
      for (bool forward_only : {false, true}) {
        const Schedule s = forward_only ? make_forward_only_schedule(name, pp, m) : make_schedule(name, pp, m);
        const auto problems = check_schedule(s);
        ASSERT_TRUE(problems.empty()) << name << " pp " << pp << " m " << m << ": " << problems.front();
        PipelineCosts costs = PipelineCosts::parse("F=1,B=2,W=1,P2P=0.1", s.layout.stages());
        EXPECT_NO_THROW(simulate(s, costs)) << name << " pp " << pp << " m " << m << " forward_only " << forward_only;
      }
    }
  }
}

TEST(PipelineSchedule, RequirementsNameWhatIsNeeded) {
  EXPECT_EQ(schedule_requirement("dualpipe", 4, 6), "dualpipe with pp = 4 needs at least 2·pp = 8 micro-batches, got 6");
  EXPECT_EQ(schedule_requirement("dualpipe", 3, 12), "dualpipe needs an even number of pipeline ranks, got 3");
  EXPECT_NE(schedule_requirement("dualpipe", 4, 9).find("even number, got 9"), std::string::npos);
  EXPECT_EQ(schedule_requirement("dualpipev", 3, 5), "dualpipev with pp = 3 needs at least 2·pp = 6 micro-batches, got 5");
  EXPECT_EQ(schedule_requirement("interleaved_1f1b", 4, 6), "interleaved_1f1b needs a multiple of pp = 4 micro-batches, got 6");
  EXPECT_EQ(schedule_requirement("zb_h1", 4, 3), "zb_h1 needs at least pp = 4 micro-batches, got 3");
  EXPECT_EQ(schedule_requirement("1f1b", 4, 1), "");
  EXPECT_EQ(schedule_requirement("dualpipe", 1, 3), "");  // pp 1: the trivial schedule
  EXPECT_NE(schedule_requirement("pipedream", 2, 4).find("unknown pipeline schedule"), std::string::npos);
  try {
    make_schedule("dualpipev", 4, 7);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("needs at least 2·pp = 8 micro-batches, got 7"), std::string::npos);
  }
}

std::vector<std::string> ops_of(const RankOps& ops) {
  std::vector<std::string> out;
  for (const Instruction& op : ops) out.push_back(to_string(op));
  return out;
}

TEST(PipelineSchedule, ClassicSchedulesWrittenOut) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ops_of(gpipe_ops(2, 1, 3)), (V{"F0.0", "F0.1", "F0.2", "B0.0", "B0.1", "B0.2"}));
  EXPECT_EQ(ops_of(one_f_one_b_ops(3, 0, 4)), (V{"F0.0", "F0.1", "F0.2", "B0.0", "F0.3", "B0.1", "B0.2", "B0.3"}));
  EXPECT_EQ(ops_of(one_f_one_b_ops(3, 2, 3)), (V{"F0.0", "B0.0", "F0.1", "B0.1", "F0.2", "B0.2"}));
  // ZB-H1: rank r keeps its first r weight gradients for the end.
  EXPECT_EQ(ops_of(zb_h1_ops(3, 0, 3)), (V{"F0.0", "F0.1", "F0.2", "B0.0w", "W0.0", "B0.1w", "W0.1", "B0.2w", "W0.2"}));
  EXPECT_EQ(ops_of(zb_h1_ops(3, 2, 3)), (V{"F0.0", "B0.0w", "F0.1", "B0.1w", "F0.2", "B0.2w", "W0.0", "W0.1", "W0.2"}));
  EXPECT_EQ(ops_of(zb_h1_ops(3, 1, 4)),
            (V{"F0.0", "F0.1", "B0.0w", "F0.2", "B0.1w", "W0.0", "F0.3", "B0.2w", "W0.1", "B0.3w", "W0.2", "W0.3"}));
  // Interleaved, pp 2, 4 micro-batches, 2 chunks: groups of pp micro-batches go through chunk 0,
  // then chunk 1; the last rank warms up with (chunks − 1)·pp forwards.
  EXPECT_EQ(ops_of(interleaved_1f1b_ops(2, 1, 4, 2)),
            (V{"F0.0", "F0.1", "F1.0", "B1.0", "F1.1", "B1.1", "F0.2", "B0.0", "F0.3", "B0.1", "F1.2", "B1.2", "F1.3",
               "B1.3", "B0.2", "B0.3"}));
}

TEST(PipelineSchedule, OpSyntaxRoundTrips) {
  for (const char* text : {"F0.3", "B1.2", "B1.2w", "W1.2", "FB(F0.3,B1.12)", "F10.0"}) {
    EXPECT_EQ(to_string(parse_instruction(text)), text);
  }
  for (const char* bad : {"", "F", "F0", "F0.", "X0.1", "B0.1x", "FB(F0.1)", "FB(F0.1,B0.2", "F-1.0", "F 0.1"}) {
    EXPECT_THROW(parse_instruction(bad), Error) << bad;
  }
}

TEST(PipelineSchedule, LayoutsPlaceStagesAsTheSchedulesDo) {
  PipelineLayout v = PipelineLayout::for_schedule("dualpipev", 4, 8);
  EXPECT_EQ(v.stages(), 8);
  EXPECT_EQ(v.stage_of(0, 0), 0);
  EXPECT_EQ(v.stage_of(0, 1), 7);
  EXPECT_EQ(v.stage_of(3, 0), 3);
  EXPECT_EQ(v.stage_of(3, 1), 4);
  PipelineLayout d = PipelineLayout::for_schedule("dualpipe", 4, 8);
  EXPECT_EQ(d.stages(), 4);
  EXPECT_EQ(d.flows(), 2);
  EXPECT_EQ(d.stage_of(1, 0), 1);
  EXPECT_EQ(d.stage_of(1, 1), 2);
  EXPECT_EQ(d.slot(1, 0).rank, 3);
  EXPECT_EQ(d.global_micro_batch(1, 2), 6);
  PipelineLayout i = PipelineLayout::for_schedule("interleaved_1f1b", 4, 8);
  EXPECT_EQ(i.stage_of(2, 1), 6);
  PipelineLayout one = PipelineLayout::for_schedule("dualpipev", 1, 8);
  EXPECT_EQ(one.stages(), 1);
  EXPECT_EQ(one.chunks(), 1);
}

// Transfers of one payload between a pair of ranks are posted in the same order at both ends
// (NCCL matches a pair's sends and receives in order, MPI too for one tag), and every transfer
// has its other end. (check_schedule checks the same; this says it independently.)
TEST(PipelineSchedule, TransfersMatchInOrderAtBothEnds) {
  for (const std::string& name : schedule_names()) {
    for (auto [pp, m] : valid_grid(name)) {
      const Schedule s = make_schedule(name, pp, m);
      // (from, to, payload) → messages in posting order, as the sender and as the receiver see them.
      std::map<std::tuple<int, int, int>, std::vector<std::tuple<int, int, int>>> sent, received;
      size_t transfers = 0;
      for (int r = 0; r < pp; ++r)
        for (const Instruction& op : s.ranks[static_cast<size_t>(r)])
          for (const P2POp& p : op.p2p) {
            auto msg = std::make_tuple(p.flow, p.stage, p.mb);
            const int payload = static_cast<int>(p.payload);
            (p.send ? sent[{r, p.peer, payload}] : received[{p.peer, r, payload}]).push_back(msg);
            ++transfers;
          }
      EXPECT_EQ(sent, received) << name << " pp " << pp << " m " << m;
      // Each micro-batch crosses every rank boundary of its flow twice (activation, gradient).
      int crossings = 0;
      for (int f = 0; f < s.layout.flows(); ++f)
        for (int st = 0; st + 1 < s.layout.stages(); ++st)
          crossings += s.layout.slot(f, st).rank != s.layout.slot(f, st + 1).rank;
      EXPECT_EQ(transfers, static_cast<size_t>(4 * crossings * s.layout.flow_micro_batches())) << name << " pp " << pp;
    }
  }
}

TEST(PipelineSchedule, BatchesCarryThePreviousSendsWithTheNextReceives) {
  const Schedule s = make_schedule("1f1b", 2, 3);
  // Rank 0: F0.0 | send act 0 | F0.1 | send act 1, recv grad 0 | B0.0 | F0.2 | send act 2, recv grad 1 | …
  std::vector<std::string> r0;
  for (const Instruction& op : s.ranks[0]) r0.push_back(to_string(op));
  const std::vector<std::string> expected = {
      "F0.0", "P2P[send act f0.s0.m0 >1]", "F0.1", "P2P[send act f0.s0.m1 >1, recv grad f0.s1.m0 <1]", "B0.0", "F0.2",
      "P2P[send act f0.s0.m2 >1, recv grad f0.s1.m1 <1]", "B0.1", "P2P[recv grad f0.s1.m2 <1]", "B0.2"};
  EXPECT_EQ(r0, expected);
  EXPECT_EQ(s.compute_ops(0), (std::vector<std::string>{"F0.0", "F0.1", "B0.0", "F0.2", "B0.1", "B0.2"}));
}

TEST(PipelineSchedule, PeakActivationsFollowTheListOrder) {
  for (int pp : {2, 4, 8}) {
    const Schedule s = make_schedule("1f1b", pp, 2 * pp);
    for (int r = 0; r < pp; ++r) EXPECT_EQ(peak_activations(s.ranks[static_cast<size_t>(r)]), pp - r);
    const Schedule g = make_schedule("gpipe", pp, 2 * pp);
    for (int r = 0; r < pp; ++r) EXPECT_EQ(peak_activations(g.ranks[static_cast<size_t>(r)]), 2 * pp);
    const Schedule e = make_forward_only_schedule("1f1b", pp, 2 * pp);
    for (int r = 0; r < pp; ++r) EXPECT_EQ(peak_activations(e.ranks[static_cast<size_t>(r)], true), 1);
  }
  // A split backward holds its micro-batch until the W.
  EXPECT_EQ(peak_activations({parse_instruction("F0.0"), parse_instruction("B0.0w"), parse_instruction("F0.1"),
                              parse_instruction("W0.0"), parse_instruction("B0.1")}),
            2);
}

}  // namespace
}  // namespace tetra
