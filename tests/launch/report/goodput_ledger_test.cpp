// The ledger writer: attempt numbering, the event schema on disk, crash-cut lines, spans, clocks,
// and a ledger written through the API read back by the report.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>


#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "launch/job/environment.h"
#include "launch/report/goodput.h"
#include "runtime/error.h"
#include "runtime/goodput_clock.h"
#include "runtime/jsonl_file.h"
#include "tests/launch/report/ledger_builder.h"

namespace tetra {
namespace {

std::vector<nlohmann::json> read_all(const std::string& path) {
  std::vector<JsonlProblem> problems;
  auto events = read_jsonl(path, &problems);
  EXPECT_TRUE(problems.empty()) << problems.front().what;
  return events;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(GoodputClock, ClocksAgreeAndAdvance) {
  GoodputClock clock;
  double a = clock.now();
  EXPECT_NEAR(a, unix_now(), 0.5);
  EXPECT_GT(a, 1.6e9);  // a Unix time, not a monotonic reading
  double m0 = monotonic_now();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  double m1 = monotonic_now();
  EXPECT_GE(m1 - m0, 0.019);
  // Unix seconds as double resolve 0.24 µs in this era.
  EXPECT_NEAR(clock.to_unix(m1) - clock.to_unix(m0), m1 - m0, 1e-6);
  EXPECT_GE(clock.now() - a, 0.019);
}

// The start is the process's own to the clock tick (10 ms), not a whole second early (boot time
// from /proc/stat's btime is whole seconds, which made back-to-back attempts overlap): a child
// forked between two clock readings reports a start between them, less one tick for the rounding
// down of its start to a tick.
TEST(GoodputClock, AttemptStartIsTheProcessStartToTheTick) {
  const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  for (int i = 0; i < 3; ++i) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const double before = unix_now();
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // What the ledger's attempt_start records; not yet computed in this process: its own start.
      const double start = launch::discover_environment(0, 1).process_start_unix;
      (void)!write(fds[1], &start, sizeof start);
      _exit(0);
    }
    double start = 0;
    ASSERT_EQ(read(fds[0], &start, sizeof start), static_cast<ssize_t>(sizeof start));
    const double after = unix_now();
    waitpid(child, nullptr, 0);
    close(fds[0]);
    close(fds[1]);
    EXPECT_GE(start, before - tick - 1e-3) << "start " << start << " is " << before - start << " s before the fork";
    EXPECT_LE(start, after);
  }
}

TEST(GoodputClock, ProcessStartIsBeforeNowAndStable) {
  double start = process_start_unix_time();
  EXPECT_LE(start, unix_now());
  EXPECT_GT(start, unix_now() - 3600.0);  // this test process started less than an hour ago
  EXPECT_EQ(start, process_start_unix_time());
  EXPECT_FALSE(host_name().empty());
}

TEST(GoodputLedger, AttemptsGetIncreasingIds) {
  const std::string dir = test::fresh_dir("attempts");
  const std::string path = GoodputLedger::path_in(dir);
  for (int expected = 1; expected <= 3; ++expected) {
    GoodputLedger ledger(path);
    EXPECT_EQ(ledger.attempt(), expected);
    ledger.attempt_start(process_start_unix_time(), 4, "hostA");
    double t = ledger.now();
    ledger.step({.step = expected, .start = t, .end = t + 0.01, .tokens = 64});
    ledger.attempt_end("finished", 0);
  }
  auto events = read_all(path);
  ASSERT_EQ(events.size(), 9u);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i]["attempt"], static_cast<int>(i / 3) + 1);
  EXPECT_EQ(max_attempt_in(path), 3);
  EXPECT_EQ(max_attempt_in(dir + "/missing.jsonl"), 0);
}

TEST(GoodputLedger, MaxAttemptReadsAnyKeyOrderAndSpacing) {
  const std::string dir = test::fresh_dir("maxattempt");
  const std::string path = dir + "/l.jsonl";
  std::ofstream(path) << "{\"event\":\"step\", \"attempt\" : 7 }\n"
                      << "{\"reason\":\"the \\\"attempt\\\": 99 is text\",\"attempt\":2}\n"
                      << "{\"attempts\":50,\"event\":\"x\"}\n";
  EXPECT_EQ(max_attempt_in(path), 7);
}

TEST(GoodputLedger, DamagedLinesGiveNoAttemptNumber) {
  // Bytes that are not UTF-8, text that is not an object, numbers that would wrap or go below 1:
  // skipped by line, as the report skips them; the next attempt is 1 + the largest usable one.
  const std::string dir = test::fresh_dir("maxattempt_damaged");
  const std::string path = GoodputLedger::path_in(dir);
  std::ofstream(path) << "{\"event\":\"step\",\"attempt\":2}\n"
                      << "{\"event\":\"\xff\",\"attempt\":50}\n"
                      << "stray \"attempt\": 60\n"
                      << "{\"event\":\"step\",\"attempt\":99999999999}\n"
                      << "{\"event\":\"step\",\"attempt\":-4}\n";
  std::vector<JsonlProblem> skipped;
  EXPECT_EQ(max_attempt_in(path, &skipped), 2);
  ASSERT_EQ(skipped.size(), 4u);
  EXPECT_EQ(skipped[0].line, 2u);
  EXPECT_EQ(skipped[0].what, "not valid UTF-8 at byte 11 (skipped)");
  EXPECT_EQ(skipped[1].line, 3u);
  EXPECT_EQ(skipped[1].what, "not a JSON object (skipped)");
  EXPECT_EQ(skipped[2].line, 4u);
  EXPECT_NE(skipped[2].what.find("99999999999 is not a usable attempt number"), std::string::npos);
  EXPECT_EQ(skipped[3].line, 5u);
  testing::internal::CaptureStderr();
  GoodputLedger ledger(path);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(ledger.attempt(), 3);
  EXPECT_NE(err.find(path + " line 2: not valid UTF-8"), std::string::npos) << err;
  EXPECT_NE(err.find(path + " line 5: \"attempt\" -4 is not a usable attempt number"), std::string::npos) << err;
}

TEST(GoodputLedger, EventsFollowTheSchema) {
  const std::string dir = test::fresh_dir("schema");
  const std::string path = GoodputLedger::path_in(dir);
  {
    GoodputLedger ledger(path);
    ledger.attempt_start(1000.5, 16, "node07");
    ledger.run_info({.flops_per_token = 7.5e8, .peak_flops_per_device = 9.89e14, .devices = 16,
                     .tokens_per_step = 524288, .precision = "bf16", .device_kind = "NVIDIA H100"});
    ledger.step({.step = 12, .start = 1010, .end = 1011.5, .tokens = 524288,
                 .breakdown = {.exposed_comm = 0.1, .bubble = 0.2, .recompute = 0.3, .optimizer = 0.05,
                               .data_wait = 0.01, .host_overhead = 0.02},
                 .loss = 2.5});
    ledger.step({.step = 13, .start = 1011.5, .end = 1013, .tokens = 524288,
                 .breakdown = {.exposed_comm = 0.3, .exposed_comm_by_axis = {{"dp", 0.1}, {"tp", 0.2}}}});
    ledger.eval(1013, 1020, 13);
    ledger.ckpt_save(1020, 1021, 13, 9.5);
    ledger.ckpt_save(1021, 1023, 13);
    ledger.ckpt_load(1030, 1032, 13);
    ledger.other("profiler_dump", 1040, 1041);
    ledger.attempt_end("signal", 143, 1050);
  }
  auto e = read_all(path);
  ASSERT_EQ(e.size(), 10u);
  EXPECT_EQ(e[0], (nlohmann::json{{"event", "attempt_start"}, {"attempt", 1}, {"time", 1000.5}, {"world_size", 16},
                                  {"host", "node07"}, {"pid", static_cast<int64_t>(getpid())}}));
  EXPECT_EQ(e[1]["event"], "run_info");
  EXPECT_EQ(e[1]["flops_per_token"], 7.5e8);
  EXPECT_EQ(e[1]["peak_flops_per_device"], 9.89e14);
  EXPECT_EQ(e[1]["devices"], 16);
  EXPECT_EQ(e[1]["tokens_per_step"], 524288);
  EXPECT_EQ(e[1]["precision"], "bf16");
  EXPECT_EQ(e[1]["device_kind"], "NVIDIA H100");
  EXPECT_TRUE(e[1]["time"].is_number());
  EXPECT_EQ(e[2], (nlohmann::json{{"event", "step"}, {"attempt", 1}, {"step", 12}, {"start", 1010.0}, {"end", 1011.5},
                                  {"tokens", 524288}, {"exposed_comm", 0.1}, {"bubble", 0.2}, {"recompute", 0.3},
                                  {"optimizer", 0.05}, {"data_wait", 0.01}, {"host_overhead", 0.02}, {"loss", 2.5}}));
  EXPECT_FALSE(e[3].contains("loss"));
  EXPECT_FALSE(e[2].contains("exposed_comm_by_axis"));  // only where a step recorded it
  EXPECT_EQ(e[3]["exposed_comm_by_axis"], (nlohmann::json{{"dp", 0.1}, {"tp", 0.2}}));
  EXPECT_EQ(e[4], (nlohmann::json{{"event", "eval"}, {"attempt", 1}, {"start", 1013.0}, {"end", 1020.0}, {"step", 13}}));
  EXPECT_EQ(e[5], (nlohmann::json{{"event", "ckpt_save"}, {"attempt", 1}, {"start", 1020.0}, {"end", 1021.0},
                                  {"step", 13}, {"async", true}, {"write_seconds", 9.5}}));
  EXPECT_EQ(e[6]["async"], false);
  EXPECT_FALSE(e[6].contains("write_seconds"));
  EXPECT_EQ(e[7], (nlohmann::json{{"event", "ckpt_load"}, {"attempt", 1}, {"start", 1030.0}, {"end", 1032.0},
                                  {"step", 13}}));
  EXPECT_EQ(e[8], (nlohmann::json{{"event", "other"}, {"attempt", 1}, {"name", "profiler_dump"}, {"start", 1040.0},
                                  {"end", 1041.0}}));
  EXPECT_EQ(e[9], (nlohmann::json{{"event", "attempt_end"}, {"attempt", 1}, {"time", 1050.0}, {"reason", "signal"},
                                  {"exit_code", 143}}));
}

TEST(GoodputLedger, EventsBeforeStartOrAfterEndAreRejected) {
  const std::string dir = test::fresh_dir("order");
  GoodputLedger ledger(GoodputLedger::path_in(dir));
  EXPECT_THROW(ledger.eval(1, 2, 0), Error);
  ledger.attempt_start(1, 1);
  EXPECT_THROW(ledger.attempt_start(1, 1), Error);
  EXPECT_THROW(ledger.eval(2, 1, 0), Error);  // end before start
  EXPECT_THROW(ledger.append({{"no_event", 1}}), Error);
  ledger.attempt_end("finished", 0, 3);
  EXPECT_THROW(ledger.eval(1, 2, 0), Error);
  EXPECT_EQ(read_all(ledger.path()).size(), 2u);
}

TEST(GoodputLedger, CutLastLineIsDroppedAndNumberingGoesOn) {
  const std::string dir = test::fresh_dir("cut");
  const std::string path = GoodputLedger::path_in(dir);
  {
    GoodputLedger ledger(path);
    ledger.attempt_start(100, 2);
    ledger.step({.step = 1, .start = 101, .end = 102, .tokens = 8});
  }
  // A crash in the middle of writing attempt 1's next line; its "attempt" is cut to "1" of "17".
  std::ofstream(path, std::ios::app) << "{\"attempt\":1";
  ASSERT_NE(file_text(path).back(), '\n');
  GoodputLedger ledger(path);
  EXPECT_EQ(ledger.attempt(), 2);
  ledger.attempt_start(200, 2);
  ledger.attempt_end("finished", 0, 210);
  std::string text = file_text(path);
  EXPECT_EQ(text.back(), '\n');
  auto events = read_all(path);  // no problem lines left
  ASSERT_EQ(events.size(), 5u);  // start, step, attempt_end "closed" (destructor), start, end
  EXPECT_EQ(events[2]["event"], "attempt_end");
  EXPECT_EQ(events[2]["reason"], "closed");
  EXPECT_EQ(events[3]["attempt"], 2);
}

TEST(GoodputLedger, CutOnlyLineLeavesAnEmptyLedger) {
  const std::string dir = test::fresh_dir("cutonly");
  const std::string path = GoodputLedger::path_in(dir);
  std::ofstream(path) << "{\"event\":\"attempt_start\",\"attempt\":4";
  JsonlAppender appender(path);
  EXPECT_GT(appender.repaired_bytes(), 0u);
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
  EXPECT_EQ(max_attempt_in(path), 0);
}

TEST(GoodputLedger, DestructorEndsAnAttemptUnwoundByAnException) {
  const std::string dir = test::fresh_dir("unwind");
  const std::string path = GoodputLedger::path_in(dir);
  try {
    GoodputLedger ledger(path);
    ledger.attempt_start(unix_now(), 1);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  auto events = read_all(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["event"], "attempt_end");
  EXPECT_EQ(events[1]["reason"], "error");
  EXPECT_TRUE(events[1]["exit_code"].is_null());
}

TEST(GoodputSpan, RecordsItsKindAndMarksFailures) {
  const std::string dir = test::fresh_dir("span");
  const std::string path = GoodputLedger::path_in(dir);
  {
    GoodputLedger ledger(path);
    ledger.attempt_start(unix_now(), 1);
    {
      GoodputSpan load(ledger, GoodputSpan::Kind::CkptLoad);
      load.set_step(40);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    { GoodputSpan eval(ledger, GoodputSpan::Kind::Eval, 40); }
    {
      GoodputSpan save(ledger, GoodputSpan::Kind::CkptSave, 40);
      save.end();
      save.end();  // once only
    }
    try {
      GoodputSpan other(ledger, GoodputSpan::Kind::Other, 0, "compile");
      throw std::runtime_error("compile failed");
    } catch (const std::runtime_error&) {
    }
    EXPECT_THROW(GoodputSpan(ledger, GoodputSpan::Kind::Other), Error);  // "other" needs a name
    ledger.attempt_end("finished", 0);
  }
  auto e = read_all(path);
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[1]["event"], "ckpt_load");
  EXPECT_EQ(e[1]["step"], 40);
  EXPECT_GE(e[1]["end"].get<double>() - e[1]["start"].get<double>(), 0.009);
  EXPECT_FALSE(e[1].contains("failed"));
  EXPECT_EQ(e[2]["event"], "eval");
  EXPECT_EQ(e[3]["event"], "ckpt_save");
  EXPECT_EQ(e[3]["async"], false);
  EXPECT_EQ(e[4]["event"], "other");
  EXPECT_EQ(e[4]["name"], "compile");
  EXPECT_EQ(e[4]["failed"], true);
  EXPECT_EQ(e[5]["event"], "attempt_end");
}

// A two-attempt job written through the API with chosen timestamps, then reported.
TEST(GoodputLedger, WrittenLedgerIsReportedAsOneJob) {
  const std::string dir = test::fresh_dir("roundtrip");
  const std::string path = GoodputLedger::path_in(dir);
  const double t0 = test::kT0;
  {
    GoodputLedger a1(path);
    a1.attempt_start(t0, 2, "n1");
    a1.run_info({.flops_per_token = 1e6, .peak_flops_per_device = 1e12, .devices = 2, .tokens_per_step = 100}, t0 + 1);
    for (int s = 1; s <= 20; ++s)
      a1.step({.step = s, .start = t0 + 4 + s - 1, .end = t0 + 4 + s, .tokens = 100,
               .breakdown = {.data_wait = 0.25}});
    a1.ckpt_save(t0 + 24, t0 + 25, 20);
    for (int s = 21; s <= 25; ++s)
      a1.step({.step = s, .start = t0 + 25 + s - 21, .end = t0 + 26 + s - 21, .tokens = 100});
    a1.attempt_end("signal", 143, t0 + 30.5);  // preempted at 30.5
  }
  {
    GoodputLedger a2(path);
    EXPECT_EQ(a2.attempt(), 2);
    a2.attempt_start(t0 + 40, 2, "n2");
    a2.ckpt_load(t0 + 42, t0 + 43, 20);
    for (int s = 21; s <= 30; ++s)
      a2.step({.step = s, .start = t0 + 44 + s - 21, .end = t0 + 45 + s - 21, .tokens = 100});
    a2.attempt_end("finished", 0, t0 + 54);
  }
  launch::GoodputReport r = launch::load_and_compute(dir);
  EXPECT_EQ(r.source, path);
  EXPECT_NEAR(r.wall_seconds, 54, 1e-6);
  EXPECT_EQ(r.steps_kept, 30);
  EXPECT_EQ(r.steps_lost, 5);
  EXPECT_NEAR(r.seconds.lost_to_failures, 5, 1e-6);
  EXPECT_NEAR(r.seconds.unaccounted, 0.5, 1e-6);  // 30 → 30.5: after the last step, before the signal
  EXPECT_NEAR(r.seconds.idle, 9.5, 1e-6);
  EXPECT_NEAR(r.seconds.startup, 4 + 3, 1e-6);
  EXPECT_NEAR(r.seconds.checkpoint_load, 1, 1e-6);
  EXPECT_NEAR(r.seconds.checkpoint_save, 1, 1e-6);
  EXPECT_NEAR(r.seconds.data_stall, 5, 1e-6);
  EXPECT_NEAR(r.seconds.productive, 25, 1e-6);
  EXPECT_NEAR(r.seconds.total(), r.wall_seconds, 1e-6);
  EXPECT_EQ(r.attempts[0].end_reason, "signal");
  EXPECT_EQ(r.attempts[0].exit_code, 143);
  EXPECT_NEAR(*r.mfu, 1e6 * 3000 / 54 / 2e12, 1e-12);
}

}  // namespace
}  // namespace tetra
