// The pipeline simulator (parallel/pipeline/simulator.h) against the closed forms of the bubble
// (DualPipe's README table), deadlock detection, and the cost syntax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "parallel/pipeline/simulator.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/generators.h"
#include "runtime/error.h"

namespace tetra {
namespace {

PipelineCosts costs(double f, double b, double w, double fb = -1, double p2p = 0) {
  PipelineCosts c;
  c.f = {f};
  c.b = {b};
  c.w = {w};
  if (fb >= 0) c.fb = {fb};
  c.p2p = p2p;
  return c;
}

// 1F1B and GPipe: (pp − 1)(F + B) exactly, whatever the micro-batch count and costs.
TEST(PipelineSimulator, OneFOneBBubbleIsExact) {
  for (int pp : {2, 3, 4, 8}) {
    for (int m : {pp, 2 * pp + 1, 4 * pp}) {
      for (auto [f, b] : std::vector<std::pair<double, double>>{{1, 2}, {1.5, 2.25}, {0.7, 3.1}}) {
        for (const char* name : {"1f1b", "gpipe"}) {
          const PipelineSimulation sim = simulate(make_schedule(name, pp, m), costs(f, b, b / 2));
          EXPECT_NEAR(sim.bubble, (pp - 1) * (f + b), 1e-9) << name << " pp " << pp << " m " << m;
          EXPECT_NEAR(sim.makespan, m * (f + b) + (pp - 1) * (f + b), 1e-9);
          EXPECT_NEAR(sim.bubble_fraction, sim.bubble / sim.makespan, 1e-12);
        }
      }
    }
  }
}

// Interleaved 1F1B with v = 2 chunks per rank, costs per chunk f and b: (pp − 1)(f + b), the
// bubble of 1F1B divided by v for the same model.
TEST(PipelineSimulator, InterleavedBubbleIsOneFOneBOverChunks) {
  for (int pp : {2, 4, 8}) {
    for (int m : {pp, 2 * pp, 3 * pp}) {
      const PipelineSimulation sim = simulate(make_schedule("interleaved_1f1b", pp, m), costs(0.5, 1.0, 0.5));
      EXPECT_NEAR(sim.bubble, (pp - 1) * 1.5, 1e-9) << "pp " << pp << " m " << m;
    }
  }
}

// ZB-H1: below 1F1B, and exactly (pp − 1)(F + B − 2W) when W ≤ F; when the weight gradient is
// longer than the forward, (pp − 1)(W − F) above it (a W that does not fit in the gap a forward
// leaves) — measured over the costs and sizes below.
TEST(PipelineSimulator, ZeroBubbleH1NearItsClosedForm) {
  for (int pp : {2, 4, 8}) {
    for (int m : {pp, 2 * pp, 4 * pp}) {
      for (auto [f, b, w] : std::vector<std::tuple<double, double, double>>{
               {1, 2, 1}, {1, 2, 0.8}, {1.2, 2, 1}, {1, 2.4, 1.1}, {1, 2, 0.5}, {0.6, 2, 1}}) {
        const PipelineSimulation zb = simulate(make_schedule("zb_h1", pp, m), costs(f, b, w));
        const PipelineSimulation one = simulate(make_schedule("1f1b", pp, m), costs(f, b, w));
        const double closed = (pp - 1) * (f + b - 2 * w);
        EXPECT_LT(zb.bubble, one.bubble - 1e-9) << "pp " << pp << " m " << m;
        EXPECT_NEAR(zb.bubble, closed + (pp - 1) * std::max(0.0, w - f), 1e-9)
            << "pp " << pp << " m " << m << " f " << f << " b " << b << " w " << w;
      }
    }
  }
}

// DualPipe and DualPipeV: at or below (S/2 − 1)(F&B + B − 3W) for S stages (DualPipe's README):
// S = pp for DualPipe, 2·pp for DualPipeV (costs per stage). The table assumes a forward no
// longer than the input-gradient backward (F ≤ B − W, as in a transformer layer, where both are
// about one forward's GEMMs); with F longer than that the bubble can pass it (F 1.3, B 2.2, W 1:
// by 0.1).
TEST(PipelineSimulator, DualPipeAtOrBelowItsClosedForm) {
  for (auto [f, b, w, fb] : std::vector<std::tuple<double, double, double, double>>{
           {1, 2, 1, 3}, {1, 2, 1, 2.5}, {1, 2, 0.8, 2.8}, {1, 2.4, 1.2, 3.2}, {0.9, 2, 1, 2.6}}) {
    for (int pp : {2, 4, 6, 8}) {
      for (int m : {2 * pp, 2 * pp + 2, 4 * pp}) {
        const PipelineSimulation d = simulate(make_schedule("dualpipe", pp, m), costs(f, b, w, fb));
        EXPECT_LE(d.bubble, (pp / 2.0 - 1) * (fb + b - 3 * w) + 1e-9) << "dualpipe pp " << pp << " m " << m;
      }
    }
    for (int pp : {2, 3, 4, 8}) {
      for (int m : {2 * pp, 2 * pp + 1, 4 * pp}) {
        const PipelineSimulation v = simulate(make_schedule("dualpipev", pp, m), costs(f, b, w, fb));
        EXPECT_LE(v.bubble, (pp - 1) * (fb + b - 3 * w) + 1e-9) << "dualpipev pp " << pp << " m " << m;
      }
    }
  }
  // Peak activations (chunk micro-batches held): DualPipeV's first rank holds 2·pp + 1 … the
  // README's PP + 1 in stages of half the size; DualPipe at most pp + 1 stage activations.
  for (int pp : {2, 4, 8}) {
    const PipelineSimulation v = simulate(make_schedule("dualpipev", pp, 4 * pp), costs(1, 2, 1));
    const PipelineSimulation d = simulate(make_schedule("dualpipe", pp, 4 * pp), costs(1, 2, 1));
    for (int r = 0; r < pp; ++r) {
      EXPECT_LE(v.peak_activations[static_cast<size_t>(r)], 2 * pp + 1);
      EXPECT_LE(d.peak_activations[static_cast<size_t>(r)], pp + 1);
    }
  }
}

// Transfer latency delays each hop: 1F1B's bubble grows by 2(pp − 1)·P2P at most.
TEST(PipelineSimulator, TransferLatencyLengthensTheBubble) {
  const PipelineSimulation a = simulate(make_schedule("1f1b", 4, 8), costs(1, 2, 1, -1, 0));
  const PipelineSimulation b = simulate(make_schedule("1f1b", 4, 8), costs(1, 2, 1, -1, 0.25));
  EXPECT_GT(b.makespan, a.makespan + 0.25 * 2 * 3 - 1e-9);
  EXPECT_EQ(a.busy, b.busy);
}

Schedule from_text(const std::string& name, int pp, int m, const std::vector<std::vector<std::string>>& ops) {
  Schedule s;
  s.name = name;
  s.layout = PipelineLayout::for_schedule("1f1b", pp, m);
  for (const auto& rank : ops) {
    s.ranks.emplace_back();
    for (const std::string& op : rank) s.ranks.back().push_back(parse_instruction(op));
  }
  return s;
}

std::string error_of(const Schedule& s) {
  try {
    simulate(s, costs(1, 2, 1));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineSimulator, FindsDeadlocksAndNamesWhoWaits) {
  // Rank 0 runs its backward before its second forward, rank 1 both forwards first: each waits
  // for the other.
  Schedule s = from_text("broken", 2, 2, {{"F0.0", "B0.0", "F0.1", "B0.1"}, {"F0.0", "F0.1", "B0.0", "B0.1"}});
  std::string msg = error_of(s);
  EXPECT_NE(msg.find("pipeline schedule broken deadlocks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 at #1 B0.0 waits for the backward of stage 1, B0.0 on rank 1 (#2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1 at #1 F0.1 waits for the forward of stage 0, F0.1 on rank 0 (#2)"), std::string::npos) << msg;
  // With the transfers added, the same schedule stalls in its receives.
  add_p2p(s);
  msg = error_of(s);
  EXPECT_NE(msg.find("deadlocks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 at #1 P2P[send act f0.s0.m0 >1, recv grad f0.s1.m0 <1] waits for grad f0.s1.m0, which "
                     "rank 1 sends at #5 (it is at #2)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 1 at #2 P2P[recv act f0.s0.m1 <0] waits for act f0.s0.m1, which rank 0 sends at #4 (it is at #1)"),
            std::string::npos)
      << msg;

  // Sound in data (rank 1's F0.1 needs nothing from rank 1), but rank 1 receives micro-batch 1
  // first while rank 0 sends micro-batch 0 first: in-order channels would hand it the wrong one.
  Schedule t = from_text("crossed", 2, 2, {{"F0.0", "F0.1", "B0.0", "B0.1"}, {"F0.1", "F0.0", "B0.0", "B0.1"}});
  EXPECT_EQ(error_of(t), "");
  add_p2p(t);
  msg = error_of(t);
  EXPECT_NE(msg.find("activations from rank 0 to rank 1 are not received in the order they are sent"), std::string::npos)
      << msg;

  // Content problems are reported before any simulation.
  Schedule u = from_text("incomplete", 2, 2, {{"F0.0", "F0.1", "B0.0", "B0.1"}, {"F0.0", "B0.0", "F0.1"}});
  msg = error_of(u);
  EXPECT_NE(msg.find("is unsound"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1: 0.1 needs either B0.1 or B0.1w followed by W0.1"), std::string::npos) << msg;
}

TEST(PipelineSimulator, CostsParseAndSayWhatIsWrong) {
  PipelineCosts c = PipelineCosts::parse("F=1,B=2,W=1,FB=2.5,P2P=0.1", 4);
  EXPECT_EQ(c.forward(3), 1);
  EXPECT_EQ(c.pair(0, 1), 2.5);
  EXPECT_EQ(c.p2p, 0.1);
  c = PipelineCosts::parse("F=1:2:3:4,B=2:4:6:8", 4);
  EXPECT_EQ(c.forward(2), 3);
  EXPECT_EQ(c.backward(3), 8);
  EXPECT_EQ(c.weight(3), 1);  // kept from the base
  EXPECT_EQ(c.pair(1, 2), 2 + 6);
  EXPECT_EQ(PipelineCosts::parse(c.to_string(), 4).to_string(), c.to_string());
  auto error = [](const std::string& text) {
    try {
      PipelineCosts::parse(text, 4);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage);
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("F=1,X=2").find("X: unknown key (valid: F, B, W, FB, P2P)"), std::string::npos);
  EXPECT_NE(error("F=-1").find("\"-1\" is not a finite number"), std::string::npos);
  EXPECT_NE(error("F=1:2").find("2 values, but the pipeline has 4 stages"), std::string::npos);
  EXPECT_NE(error("B=2,W=3").find("W = 3"), std::string::npos);
  EXPECT_NE(error("F").find("expected KEY=VALUE"), std::string::npos);
  EXPECT_NE(error("P2P=1:2:3:4").find("P2P: one value"), std::string::npos);
}

TEST(PipelineSimulator, ChromeTraceHasOneRowPerRank) {
  const Schedule s = make_schedule("dualpipev", 2, 4);
  const PipelineSimulation sim = simulate(s, costs(1, 2, 1, -1, 0.5));
  const nlohmann::json t = chrome_trace(s, sim);
  int compute = 0, names = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M") ++names;
    if (e["ph"] == "X" && e["cat"] == "compute") ++compute;
  }
  EXPECT_EQ(names, 2);
  int expected = 0;
  for (int r = 0; r < 2; ++r) expected += static_cast<int>(s.compute_ops(r).size());
  EXPECT_EQ(compute, expected);
}

}  // namespace
}  // namespace tetra
