// The goodput accounting on synthetic ledgers whose every second is known in advance.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "launch/report/goodput.h"
#include "runtime/error.h"
#include "tests/launch/report/ledger_builder.h"

namespace tetra::launch {
namespace {

using test::kT0;
using test::LedgerBuilder;
using test::StepParts;

constexpr double kTol = 1e-6;

void expect_sums_to_wall(const GoodputReport& r) {
  EXPECT_NEAR(r.seconds.total(), r.wall_seconds, kTol) << to_json(r).dump(2);
  EXPECT_GE(r.seconds.productive, -kTol);
  for (const auto& [name, s] : r.seconds.badput()) EXPECT_GE(s, -kTol) << name;
}

TEST(GoodputReport, CleanRun) {
  StepParts p{.exposed_comm = 0.1, .bubble = 0.05, .recompute = 0.05, .optimizer = 0.1, .data_wait = 0.02,
              .host_overhead = 0.03};
  LedgerBuilder l;
  l.start(1, 0).wait(0.5).run_info(6e9, 1e15, 8, 1000).wait(9.5).steps(1, 100, 1.0, 1000, p).wait(2).end();
  GoodputReport r = compute_goodput(l.events());

  EXPECT_NEAR(r.wall_start, kT0, kTol);
  EXPECT_NEAR(r.wall_seconds, 112, kTol);
  EXPECT_NEAR(r.seconds.startup, 10, kTol);
  EXPECT_NEAR(r.seconds.productive, 65, kTol);
  EXPECT_NEAR(r.seconds.exposed_comm, 10, kTol);
  EXPECT_NEAR(r.seconds.pipeline_bubble, 5, kTol);
  EXPECT_NEAR(r.seconds.recompute, 5, kTol);
  EXPECT_NEAR(r.seconds.optimizer, 10, kTol);
  EXPECT_NEAR(r.seconds.data_stall, 2, kTol);
  EXPECT_NEAR(r.seconds.host_overhead, 3, kTol);
  EXPECT_NEAR(r.seconds.unaccounted, 2, kTol);  // after the last step, before attempt_end
  EXPECT_NEAR(r.seconds.idle, 0, kTol);
  EXPECT_NEAR(r.seconds.lost_to_failures, 0, kTol);
  EXPECT_NEAR(r.goodput, 65.0 / 112.0, 1e-9);
  expect_sums_to_wall(r);

  EXPECT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.restarts, 0);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.steps_kept, 100);
  EXPECT_EQ(r.steps_lost, 0);
  EXPECT_EQ(r.first_kept_step, 1);
  EXPECT_EQ(r.last_kept_step, 100);
  EXPECT_EQ(r.tokens_kept, 100000);
  EXPECT_NEAR(r.tokens_per_s, 100000.0 / 112.0, 1e-6);
  EXPECT_NEAR(r.tokens_per_productive_s, 100000.0 / 65.0, 1e-6);
  EXPECT_EQ(r.attempts[0].end_reason, "finished");
  EXPECT_EQ(r.attempts[0].exit_code, 0);
  EXPECT_EQ(r.attempts[0].host, "node01");
  EXPECT_EQ(r.attempts[0].world_size, 8);
  EXPECT_NEAR(r.attempts[0].startup_seconds, 10, kTol);
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
}

// The brief's crash: checkpoint at step 100, steps up to 130, crash, 60 s idle, resume from 100.
LedgerBuilder crash_and_resume(bool second_attempt_ends) {
  StepParts p{.exposed_comm = 0.1};
  LedgerBuilder l;
  l.start(1, 0).run_info(6e9, 1e15, 8, 1000).wait(10);
  l.steps(1, 100, 1.0, 1000, p).span("ckpt_save", 2, 100).steps(101, 130, 1.0, 1000, p);  // ends at 142, crash
  l.start(2, 142 + 60, 8, "node02").run_info(6e9, 1e15, 8, 1000).wait(5).span("ckpt_load", 3, 100).wait(4);
  l.steps(101, 200, 1.0, 1000, p);  // 214 .. 314
  if (second_attempt_ends) l.wait(1).end("finished", 0);
  return l;
}

TEST(GoodputReport, CrashAfterCheckpointThenResume) {
  GoodputReport r = compute_goodput(crash_and_resume(true).events());
  EXPECT_NEAR(r.wall_seconds, 315, kTol);
  EXPECT_NEAR(r.seconds.lost_to_failures, 30, kTol);  // steps 101..130 of attempt 1
  EXPECT_NEAR(r.seconds.idle, 60, kTol);              // 142 → 202
  EXPECT_NEAR(r.seconds.startup, 10 + 9, kTol);       // second startup: 12 s less the 3 s load
  EXPECT_NEAR(r.seconds.checkpoint_load, 3, kTol);
  EXPECT_NEAR(r.seconds.checkpoint_save, 2, kTol);
  EXPECT_NEAR(r.seconds.exposed_comm, 20, kTol);      // 200 kept steps × 0.1
  EXPECT_NEAR(r.seconds.productive, 180, kTol);
  EXPECT_NEAR(r.seconds.unaccounted, 1, kTol);
  expect_sums_to_wall(r);

  EXPECT_EQ(r.attempts.size(), 2u);
  EXPECT_EQ(r.restarts, 1);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.steps_kept, 200);
  EXPECT_EQ(r.steps_lost, 30);
  EXPECT_EQ(r.tokens_kept, 200000);
  EXPECT_EQ(r.tokens_lost, 30000);
  EXPECT_EQ(r.last_checkpoint_step, 100);
  EXPECT_EQ(r.steps_at_risk, 0);
  EXPECT_EQ(r.attempts[0].end_reason, "");  // crashed: no attempt_end
  EXPECT_NEAR(r.attempts[0].end, kT0 + 142, kTol);
  EXPECT_EQ(r.attempts[0].first_step, 1);
  EXPECT_EQ(r.attempts[0].last_step, 130);
  EXPECT_EQ(r.attempts[1].restored_step, 100);
  EXPECT_EQ(r.attempts[1].first_step, 101);
  EXPECT_EQ(r.attempts[1].host, "node02");
  EXPECT_NEAR(r.attempts[1].startup_seconds, 9, kTol);
}

TEST(GoodputReport, RunStillGoingHasStepsAtRisk) {
  GoodputReport r = compute_goodput(crash_and_resume(false).events());
  EXPECT_NEAR(r.wall_seconds, 314, kTol);  // up to the last event of the last attempt
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.attempts[1].end_reason, "");
  EXPECT_EQ(r.steps_kept, 200);
  EXPECT_EQ(r.steps_at_risk, 100);  // 101..200 are not in any checkpoint yet
  EXPECT_NEAR(r.seconds.unaccounted, 0, kTol);
  expect_sums_to_wall(r);
}

TEST(GoodputReport, ResumeWithoutLoadEventAndShorterRunStillLosesRolledBackSteps) {
  // Attempt 2 starts at step 101 (restored 100) and the run now stops at 120: attempt 1's steps
  // 121..130 were not redone, but they were rolled back all the same.
  LedgerBuilder l;
  l.start(1, 0).wait(10).steps(1, 100, 1.0).span("ckpt_save", 2, 100).steps(101, 130, 1.0);
  l.start(2, 200).wait(10).steps(101, 120, 1.0).end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_EQ(r.steps_kept, 120);
  EXPECT_EQ(r.steps_lost, 30);
  EXPECT_NEAR(r.seconds.lost_to_failures, 30, kTol);
  EXPECT_EQ(r.last_kept_step, 120);
  EXPECT_NEAR(r.seconds.idle, 200 - 142, kTol);
  expect_sums_to_wall(r);
}

TEST(GoodputReport, FreshRestartWithoutCheckpointLosesEverything) {
  LedgerBuilder l;
  l.start(1, 0).wait(5).steps(1, 50, 1.0).end("error", 1);
  l.start(2, 60).wait(5).steps(1, 80, 1.0).end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_EQ(r.steps_kept, 80);
  EXPECT_EQ(r.steps_lost, 50);
  EXPECT_NEAR(r.seconds.lost_to_failures, 50, kTol);
  EXPECT_NEAR(r.seconds.idle, 5, kTol);
  EXPECT_EQ(r.attempts[0].end_reason, "error");
  EXPECT_EQ(r.attempts[0].exit_code, 1);
  expect_sums_to_wall(r);
}

TEST(GoodputReport, RollbackInsideOneAttempt) {
  // A loss spike at step 40: the trainer reloads checkpoint 30 and goes on in the same process.
  LedgerBuilder l;
  l.start(1, 0).wait(5).steps(1, 30, 1.0).span("ckpt_save", 1, 30).steps(31, 40, 1.0);
  l.span("ckpt_load", 2, 30).steps(31, 60, 1.0).end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_EQ(r.steps_kept, 60);
  EXPECT_EQ(r.steps_lost, 10);
  EXPECT_NEAR(r.seconds.lost_to_failures, 10, kTol);
  EXPECT_NEAR(r.seconds.checkpoint_load, 2, kTol);
  EXPECT_NEAR(r.seconds.productive, 60, kTol);
  expect_sums_to_wall(r);
}

TEST(GoodputReport, LostStepRunsAndSpansForThePage) {
  // Crash after 130 with a checkpoint at 100, resume; then a rollback inside attempt 2 (205 → 200).
  LedgerBuilder l = crash_and_resume(false);
  l.span("ckpt_save", 1, 200).steps(201, 205, 1.0).span("eval", 2, 205);
  l.span("ckpt_load", 1, 200).steps(201, 210, 1.0).end();
  GoodputReport r = compute_goodput(l.events());
  ASSERT_EQ(r.lost_steps.size(), 2u);
  const LostSteps& a = r.lost_steps[0];
  EXPECT_EQ(a.attempt, 1);
  EXPECT_EQ(a.first_step, 101);
  EXPECT_EQ(a.last_step, 130);
  EXPECT_EQ(a.executions, 30);
  EXPECT_NEAR(a.start, kT0 + 112, kTol);  // 10 s startup, 100 steps, 2 s save
  EXPECT_NEAR(a.end, kT0 + 142, kTol);
  const LostSteps& b = r.lost_steps[1];
  EXPECT_EQ(b.attempt, 2);
  EXPECT_EQ(b.first_step, 201);
  EXPECT_EQ(b.last_step, 205);
  EXPECT_EQ(b.executions, 5);
  int64_t executions = 0;
  for (const LostSteps& x : r.lost_steps) executions += x.executions;
  EXPECT_EQ(executions, r.steps_lost);

  ASSERT_EQ(r.checkpoint_saves.size(), 2u);
  EXPECT_EQ(r.checkpoint_saves[0].step, 100);
  EXPECT_EQ(r.checkpoint_saves[0].attempt, 1);
  EXPECT_EQ(r.checkpoint_saves[1].step, 200);
  ASSERT_EQ(r.checkpoint_loads.size(), 2u);
  EXPECT_EQ(r.checkpoint_loads[0].attempt, 2);
  EXPECT_EQ(r.checkpoint_loads[1].step, 200);
  EXPECT_LT(r.checkpoint_loads[0].start, r.checkpoint_loads[1].start);
  ASSERT_EQ(r.evaluations.size(), 1u);
  EXPECT_EQ(r.evaluations[0].step, 205);
  EXPECT_NEAR(r.evaluations[0].end - r.evaluations[0].start, 2, kTol);
  expect_sums_to_wall(r);
}

TEST(GoodputReport, SkippedStepsAreBadputNotKept) {
  // Attempt 1 skipped the updates of steps 3, 4 and 6 (train.on_nonfinite: skip), saved step 4 and
  // crashed after step 6; attempt 2 redid 5 and 6 with updates. Steps 3 and 4 are 2 s of "steps
  // skipped", neither kept steps nor kept tokens; the skipped first execution of step 6 was thrown
  // away with step 5, so it is lost to the failure like any redone step.
  LedgerBuilder l;
  l.start(1, 0).wait(1).steps(1, 4, 1.0).span("ckpt_save", 1, 4).steps(5, 6, 1.0);
  l.start(2, 20).wait(1).span("ckpt_load", 1, 4).steps(5, 8, 1.0).end();
  std::vector<nlohmann::json> events = l.events();
  for (nlohmann::json& e : events)
    if (e["event"] == "step" && e["attempt"] == 1 && (e["step"] == 3 || e["step"] == 4 || e["step"] == 6)) {
      e["skipped"] = true;
      e.erase("loss");
    }
  GoodputReport plain = compute_goodput(l.events());
  GoodputReport r = compute_goodput(events);
  EXPECT_EQ(plain.steps_kept, 8);
  EXPECT_EQ(r.steps_kept, 6);
  EXPECT_EQ(r.steps_skipped, 2);
  EXPECT_EQ(r.steps_lost, plain.steps_lost);
  EXPECT_EQ(r.tokens_kept, 6000);
  EXPECT_NEAR(r.seconds.skipped_steps, 2, kTol);
  EXPECT_NEAR(r.seconds.lost_to_failures, plain.seconds.lost_to_failures, kTol);
  EXPECT_NEAR(r.seconds.productive, plain.seconds.productive - 2, kTol);
  expect_sums_to_wall(r);
  nlohmann::json j = to_json(r);
  EXPECT_EQ(j["steps"]["skipped"], 2);
  EXPECT_NEAR(j["seconds"]["skipped_steps"].get<double>(), 2, kTol);
  std::ostringstream printed;
  print_report(r, printed);
  EXPECT_NE(printed.str().find("6 kept (1..8), 2 skipped (non-finite), 2 lost to failures"), std::string::npos)
      << printed.str();
  EXPECT_NE(printed.str().find("steps skipped (non-finite)"), std::string::npos);
}

TEST(GoodputReport, FailedLoadDoesNotRollBack) {
  LedgerBuilder l;
  l.start(1, 0).wait(5).steps(1, 30, 1.0);
  l.raw({{"event", "ckpt_load"}, {"attempt", 1}, {"start", kT0 + 35}, {"end", kT0 + 36}, {"step", 10}, {"failed", true}});
  l.wait(1).steps(31, 40, 1.0).end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_EQ(r.steps_kept, 40);
  EXPECT_EQ(r.steps_lost, 0);
  EXPECT_NEAR(r.seconds.checkpoint_load, 1, kTol);
  expect_sums_to_wall(r);
}

TEST(GoodputReport, EvaluationsAndBlockingCheckpointSaves) {
  LedgerBuilder l;
  l.start(1, 0).wait(6).span("other", 4, -1, "compile");  // startup ends where the first span begins
  for (int64_t n = 1; n <= 100; ++n) {
    l.step(n, 1.0);
    if (n % 10 == 0) l.span("eval", 3, n);
    if (n % 25 == 0) {
      double at = l.cursor();
      // Blocking part 1 s; the background write took 10 s more and overlapped the next steps.
      l.raw({{"event", "ckpt_save"}, {"attempt", 1}, {"start", kT0 + at}, {"end", kT0 + at + 1}, {"step", n},
             {"async", true}, {"write_seconds", 11}});
      l.wait(1);
    }
  }
  l.wait(0.5).end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_NEAR(r.seconds.startup, 6, kTol);
  EXPECT_NEAR(r.seconds.other, 4, kTol);
  EXPECT_NEAR(r.other_by_name.at("compile"), 4, kTol);
  EXPECT_NEAR(r.seconds.evaluation, 30, kTol);
  EXPECT_NEAR(r.seconds.checkpoint_save, 4, kTol);
  EXPECT_NEAR(r.seconds.productive, 100, kTol);
  EXPECT_NEAR(r.seconds.unaccounted, 0.5, kTol);
  EXPECT_NEAR(r.wall_seconds, 6 + 4 + 100 + 30 + 4 + 0.5, kTol);
  EXPECT_EQ(r.last_checkpoint_step, 100);
  expect_sums_to_wall(r);
}

TEST(GoodputReport, EvalStartingBeforeAnyStepEndsStartup) {
  LedgerBuilder l;
  l.start(1, 0).wait(3).span("ckpt_load", 2, 0).wait(1).span("eval", 5, 0).steps(1, 10, 1.0).end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_NEAR(r.seconds.startup, 4, kTol);  // 0 → 6, less the 2 s load
  EXPECT_NEAR(r.seconds.checkpoint_load, 2, kTol);
  EXPECT_NEAR(r.seconds.evaluation, 5, kTol);
  EXPECT_EQ(r.steps_kept, 10);  // a load of step 0 rolls nothing back
  expect_sums_to_wall(r);
}

TEST(GoodputReport, OverlappingSpansAreCountedOnceAndStepBreakdownScales) {
  // An eval span recorded inside a step (a trainer that evaluates mid-step): the eval owns its
  // 1 s, the step keeps 3 of its 4 s, and its breakdown shrinks by the same 3/4.
  LedgerBuilder l;
  l.start(1, 0).wait(1);
  l.step(1, 4.0, 1000, StepParts{.optimizer = 2.0});
  l.raw({{"event", "eval"}, {"attempt", 1}, {"start", kT0 + 2}, {"end", kT0 + 3}, {"step", 1}});
  l.end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_NEAR(r.seconds.evaluation, 1, kTol);
  EXPECT_NEAR(r.seconds.optimizer, 1.5, kTol);
  EXPECT_NEAR(r.seconds.productive, 1.5, kTol);
  EXPECT_NEAR(r.kept_step_seconds, 3, kTol);
  expect_sums_to_wall(r);
}

TEST(GoodputReport, BreakdownLargerThanStepIsScaledWithAWarning) {
  LedgerBuilder l;
  l.start(1, 0).wait(1).step(1, 2.0, 1000, StepParts{.exposed_comm = 2.0, .bubble = 2.0}).end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_NEAR(r.seconds.exposed_comm, 1, kTol);
  EXPECT_NEAR(r.seconds.pipeline_bubble, 1, kTol);
  EXPECT_NEAR(r.seconds.productive, 0, kTol);
  ASSERT_EQ(r.warnings.size(), 2u);  // also: no run_info
  EXPECT_NE(r.warnings[1].find("scaled down"), std::string::npos) << r.warnings[1];
  expect_sums_to_wall(r);
}

TEST(GoodputReport, MfuArithmetic) {
  // 8 devices of 1e15 FLOP/s; 6e9 FLOPs per token; 50 steps of 2^20 tokens in 2 s each.
  const int64_t tokens = int64_t(1) << 20;
  LedgerBuilder l;
  l.start(1, 0).run_info(6e9, 1e15, 8, tokens).wait(20).steps(1, 50, 2.0, tokens).end();
  GoodputReport r = compute_goodput(l.events());
  const double wall = 120, kept = 50.0 * static_cast<double>(tokens);
  ASSERT_NEAR(r.wall_seconds, wall, kTol);
  EXPECT_NEAR(r.tokens_per_s, kept / wall, 1e-6);
  ASSERT_TRUE(r.achieved_flops_per_s && r.mfu && r.mfu_in_steps);
  EXPECT_NEAR(*r.achieved_flops_per_s, 6e9 * kept / wall, 1.0);
  EXPECT_NEAR(*r.mfu, 6e9 * kept / wall / 8e15, 1e-12);
  EXPECT_NEAR(*r.mfu_in_steps, 6e9 * kept / 100.0 / 8e15, 1e-12);
  EXPECT_EQ(*r.devices, 8);
  EXPECT_EQ(r.precision, "bf16");
  EXPECT_EQ(r.device_kind, "test-gpu");
}

TEST(GoodputReport, NoRunInfoMeansNoMfuAndAWarning) {
  LedgerBuilder l;
  l.start(1, 0).wait(1).steps(1, 5, 1.0).end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_FALSE(r.achieved_flops_per_s);
  EXPECT_FALSE(r.mfu);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("run_info"), std::string::npos);
  EXPECT_NE(to_json(r)["throughput"]["mfu"], nlohmann::json(0.0));
  EXPECT_TRUE(to_json(r)["throughput"]["mfu"].is_null());
}

TEST(GoodputReport, StepsWithoutTokensUseRunInfo) {
  LedgerBuilder l;
  l.start(1, 0).run_info(1e9, 1e14, 1, 512).wait(1);
  l.raw({{"event", "step"}, {"attempt", 1}, {"step", 1}, {"start", kT0 + 1}, {"end", kT0 + 2}});
  l.wait(1).end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_EQ(r.tokens_kept, 512);
}

TEST(GoodputReport, AttemptWithoutStartLineStartsAtItsFirstEvent) {
  LedgerBuilder l;
  l.start(1, 0).wait(2).steps(1, 10, 1.0).end();
  l.raw({{"event", "step"}, {"attempt", 2}, {"step", 11}, {"start", kT0 + 20}, {"end", kT0 + 21}});
  GoodputReport r = compute_goodput(l.events());
  EXPECT_EQ(r.attempts.size(), 2u);
  EXPECT_NEAR(r.attempts[1].start, kT0 + 20, kTol);
  EXPECT_NEAR(r.seconds.idle, 8, kTol);
  EXPECT_EQ(r.steps_kept, 11);
  bool warned = false;
  for (const auto& w : r.warnings) warned |= w.find("no attempt_start") != std::string::npos;
  EXPECT_TRUE(warned);
  expect_sums_to_wall(r);
}

TEST(GoodputReport, UnknownAndMalformedEventsAreSkippedWithWarnings) {
  LedgerBuilder l;
  l.start(1, 0).wait(1).steps(1, 3, 1.0).end();
  l.raw({{"event", "future_kind"}, {"attempt", 1}, {"time", kT0}});
  l.raw({{"event", "step"}, {"attempt", 1}, {"step", 9}, {"start", kT0 + 3}, {"end", kT0 + 2}});
  l.raw({{"event", "step"}, {"step", 9}});
  GoodputReport r = compute_goodput(l.events());
  EXPECT_EQ(r.steps_kept, 3);
  EXPECT_EQ(r.warnings.size(), 4u);  // unknown kind, end < start, no attempt, no run_info
  expect_sums_to_wall(r);
}

TEST(GoodputReport, EmptyLedgerIsAnError) {
  EXPECT_THROW(compute_goodput({}), tetra::Error);
  EXPECT_THROW(compute_goodput({nlohmann::json{{"event", "step"}}}), tetra::Error);
}

// Random ledgers with gaps, overlaps, restarts, rollbacks and odd breakdowns: every second of
// wall time must land in exactly one category.
TEST(GoodputReport, CategoriesSumToWallTimeOnRandomLedgers) {
  std::mt19937 rng(1234);
  auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  const char* kinds[] = {"eval", "ckpt_save", "ckpt_load", "other"};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<nlohmann::json> ev;
    double t = 0;
    int64_t step = 1;
    int attempts = 1 + static_cast<int>(rng() % 4);
    for (int a = 1; a <= attempts; ++a) {
      t += uni(-5, 50);  // attempts may even overlap
      ev.push_back({{"event", "attempt_start"}, {"attempt", a}, {"time", kT0 + t}, {"world_size", 4}});
      t += uni(0, 10);
      step = std::max<int64_t>(1, step - static_cast<int64_t>(rng() % 20));
      int n = static_cast<int>(rng() % 60);
      for (int i = 0; i < n; ++i) {
        double d = uni(0, 3);
        if (rng() % 7 == 0) {
          const char* kind = kinds[rng() % 4];
          double s = t + uni(-2, 2);  // sometimes overlapping a step
          ev.push_back({{"event", kind}, {"attempt", a}, {"start", kT0 + s}, {"end", kT0 + s + d},
                        {"step", step - 1 - static_cast<int64_t>(rng() % 5)}, {"name", "x"}});
        } else {
          ev.push_back({{"event", "step"}, {"attempt", a}, {"step", step++}, {"start", kT0 + t}, {"end", kT0 + t + d},
                        {"tokens", 100}, {"exposed_comm", uni(0, d)}, {"bubble", uni(0, d / 2)},
                        {"data_wait", uni(0, d / 3)}, {"optimizer", uni(0, d / 4)}});
        }
        t += d + (rng() % 3 == 0 ? uni(0, 1) : 0);
      }
      if (rng() % 2) ev.push_back({{"event", "attempt_end"}, {"attempt", a}, {"time", kT0 + t + uni(0, 2)},
                                   {"reason", "signal"}, {"exit_code", 143}});
    }
    std::shuffle(ev.begin(), ev.end(), rng);  // the report must not depend on line order
    GoodputReport r = compute_goodput(ev);
    ASSERT_NEAR(r.seconds.total(), r.wall_seconds, kTol) << "trial " << trial << "\n" << to_json(r).dump(2);
    for (const auto& [name, s] : r.seconds.badput()) ASSERT_GE(s, -kTol) << name << " in trial " << trial;
    ASSERT_GE(r.seconds.productive, -kTol);
    ASSERT_NEAR(r.kept_step_seconds,
                r.seconds.productive + r.seconds.exposed_comm + r.seconds.pipeline_bubble + r.seconds.recompute +
                    r.seconds.optimizer + r.seconds.data_stall + r.seconds.host_overhead,
                kTol);
  }
}

TEST(GoodputReport, PrintedReportNamesEveryCategory) {
  GoodputReport r = compute_goodput(crash_and_resume(true).events());
  std::ostringstream os;
  print_report(r, os);
  const std::string text = os.str();
  for (const char* s : {"job wall time", "goodput", "startup", "checkpoint save", "checkpoint load", "evaluation",
                        "data stalls", "steps lost to failures", "idle between attempts", "exposed communication",
                        "pipeline bubble", "recomputation", "optimizer", "host overhead", "unaccounted", "tokens/s",
                        "TFLOP/s", "MFU", "200 kept (1..200), 30 lost", "2 (1 restart)", "57.1"})
    EXPECT_NE(text.find(s), std::string::npos) << "missing \"" << s << "\" in\n" << text;
}

TEST(GoodputReport, JsonCarriesTheNumbers) {
  GoodputReport r = compute_goodput(crash_and_resume(true).events());
  nlohmann::json j = to_json(r);
  EXPECT_NEAR(j["wall_seconds"].get<double>(), 315, kTol);
  EXPECT_NEAR(j["seconds"]["lost_to_failures"].get<double>(), 30, kTol);
  EXPECT_NEAR(j["fraction"]["idle"].get<double>(), 60.0 / 315, 1e-9);
  EXPECT_EQ(j["steps"]["kept"], 200);
  EXPECT_EQ(j["steps"]["lost"], 30);
  EXPECT_EQ(j["restarts"], 1);
  EXPECT_EQ(j["attempts"].size(), 2u);
  EXPECT_TRUE(j["attempts"][0]["end_reason"].is_null());
  EXPECT_EQ(j["attempts"][1]["restored_step"], 100);
  double sum = 0;
  for (auto& [k, v] : j["seconds"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, 315, kTol);
}

TEST(GoodputReport, ExposedCommunicationPerMeshAxis) {
  // Attempt 1 runs steps 1–4 and crashes; attempt 2 redoes 3–4 and runs to 6. Each step's
  // exposed communication (0.3 s) splits into dp 0.1 and tp 0.2; lost steps count for neither.
  auto step = [](int attempt, int64_t n, double start) {
    return nlohmann::json{{"event", "step"}, {"attempt", attempt}, {"step", n}, {"start", kT0 + start},
                          {"end", kT0 + start + 1}, {"tokens", 100}, {"exposed_comm", 0.3},
                          {"exposed_comm_by_axis", {{"dp", 0.1}, {"tp", 0.2}}}};
  };
  LedgerBuilder l;
  l.start(1, 0);
  for (int n = 1; n <= 4; ++n) l.raw(step(1, n, n));
  l.start(2, 10);
  l.span("ckpt_load", 1, 2);
  for (int n = 3; n <= 6; ++n) l.raw(step(2, n, 10 + n));
  l.raw({{"event", "step"}, {"attempt", 2}, {"step", 7}, {"start", kT0 + 17}, {"end", kT0 + 18}, {"tokens", 100},
         {"exposed_comm", 0.1}, {"exposed_comm_by_axis", {{"dp", -1.0}, {"pp", "x"}}}});
  l.wait(9).end();
  GoodputReport r = compute_goodput(l.events());
  EXPECT_EQ(r.steps_kept, 7);
  ASSERT_EQ(r.exposed_comm_by_axis.size(), 2u);
  EXPECT_NEAR(r.exposed_comm_by_axis.at("dp"), 0.6, kTol);  // kept steps 1, 2 (attempt 1) and 3–6
  EXPECT_NEAR(r.exposed_comm_by_axis.at("tp"), 1.2, kTol);
  EXPECT_NEAR(r.seconds.exposed_comm, 1.9, kTol);
  bool warned = false;
  for (const std::string& w : r.warnings) warned |= w.find("exposed_comm_by_axis") != std::string::npos;
  EXPECT_TRUE(warned) << "no warning for the malformed entries";
  std::ostringstream printed;
  print_report(r, printed);
  EXPECT_NE(printed.str().find("tp axis"), std::string::npos) << printed.str();
  EXPECT_NE(printed.str().find("dp axis"), std::string::npos) << printed.str();
  EXPECT_NEAR(to_json(r)["exposed_comm_by_axis"]["tp"].get<double>(), 1.2, kTol);
}

}  // namespace
}  // namespace tetra::launch
