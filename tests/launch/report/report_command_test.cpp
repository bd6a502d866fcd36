// `tetra report RUN_DIR`: errors for a wrong folder, the printed report, RUN_DIR/goodput.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "launch/cli/commands.h"
#include "launch/report/goodput.h"
#include "runtime/error.h"
#include "tests/launch/report/ledger_builder.h"

namespace tetra::launch {
namespace {

using test::LedgerBuilder;

LedgerBuilder small_job() {
  LedgerBuilder l;
  l.start(1, 0).run_info(1e9, 1e14, 2, 1000).wait(3).steps(1, 10, 1.0).span("ckpt_save", 1, 10).steps(11, 14, 1.0);
  l.start(2, 30).wait(2).span("ckpt_load", 1, 10).steps(11, 20, 1.0).end();
  return l;
}

TEST(ReportCommand, MissingRunDirIsAUsageError) {
  const std::string dir = test::fresh_dir("report_missing") + "/no_such_run";
  try {
    report_command(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
  }
}

TEST(ReportCommand, MissingLedgerIsAUsageError) {
  const std::string dir = test::fresh_dir("report_noledger");
  try {
    report_command(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("goodput.jsonl"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/goodput.jsonl") << "";
  EXPECT_THROW(report_command(dir), Error);  // a ledger with no events
}

TEST(ReportCommand, PrintsAndWritesGoodputJson) {
  const std::string dir = test::fresh_dir("report_ok");
  small_job().write(dir);
  testing::internal::CaptureStdout();
  int rc = report_command(dir);
  std::string printed = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(printed.find("goodput report of " + dir + "/goodput.jsonl"), std::string::npos) << printed;
  EXPECT_NE(printed.find("20 kept (1..20), 4 lost"), std::string::npos) << printed;
  EXPECT_NE(printed.find("goodput.json"), std::string::npos);

  std::ifstream in(dir + "/goodput.json");
  ASSERT_TRUE(in);
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j, to_json(load_and_compute(dir)));
  EXPECT_EQ(j["steps"]["lost"], 4);
  EXPECT_FALSE(std::filesystem::exists(dir + "/goodput.json.tmp"));
}

TEST(ReportCommand, CrashCutLastLineIsSkippedWithAWarning) {
  const std::string dir = test::fresh_dir("report_cut");
  LedgerBuilder l = small_job();
  l.write(dir);
  std::ofstream(dir + "/goodput.jsonl", std::ios::app) << "{\"event\":\"step\",\"attempt\":2,\"step\":21,\"sta";
  GoodputReport r = load_and_compute(dir);
  GoodputReport expected = compute_goodput(l.events());
  EXPECT_EQ(r.steps_kept, 20);
  EXPECT_NEAR(r.wall_seconds, expected.wall_seconds, 1e-9);
  EXPECT_NEAR(r.seconds.productive, expected.seconds.productive, 1e-9);
  ASSERT_FALSE(r.warnings.empty());
  const std::string line = "goodput.jsonl line " + std::to_string(l.events().size() + 1);
  EXPECT_NE(r.warnings[0].find(line), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("cut short"), std::string::npos) << r.warnings[0];
  testing::internal::CaptureStdout();
  EXPECT_EQ(report_command(dir), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("cut short"), std::string::npos);
}

TEST(ReportCommand, LinesNotUtf8OrNotJsonAreSkippedWithTheirLineNumbers) {
  // Damage inside the ledger (a flipped byte, a stray write), not at its end: the lines after it
  // still count, and goodput.json is written whole (its warnings quote no bytes that are not UTF-8).
  const std::string dir = test::fresh_dir("report_bad_bytes");
  LedgerBuilder l = small_job();
  l.write(dir);
  std::vector<std::string> lines;
  {
    std::ifstream in(dir + "/goodput.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  ASSERT_GT(lines.size(), 6u);
  lines.insert(lines.begin() + 3, "{\"event\":\"other\",\"attempt\":1,\"name\":\"\xff\xfe\"}");
  lines.insert(lines.begin() + 5, "this line is \xc3 not JSON");
  lines.insert(lines.begin() + 6, "{\"event\": \"step\", \"attempt\": 1,");
  {
    std::ofstream out(dir + "/goodput.jsonl", std::ios::trunc | std::ios::binary);
    for (const std::string& line : lines) out << line << "\n";
  }
  GoodputReport r = load_and_compute(dir);
  GoodputReport expected = compute_goodput(l.events());
  EXPECT_EQ(r.steps_kept, expected.steps_kept);
  EXPECT_NEAR(r.wall_seconds, expected.wall_seconds, 1e-9);
  ASSERT_GE(r.warnings.size(), 3u);
  EXPECT_NE(r.warnings[0].find("goodput.jsonl line 4: not valid UTF-8 at byte 38"), std::string::npos)
      << r.warnings[0];
  EXPECT_NE(r.warnings[1].find("goodput.jsonl line 6: not valid UTF-8 at byte 14"), std::string::npos)
      << r.warnings[1];
  EXPECT_NE(r.warnings[2].find("goodput.jsonl line 7: not valid JSON"), std::string::npos) << r.warnings[2];
  testing::internal::CaptureStdout();
  EXPECT_EQ(report_command(dir), 0);
  std::string printed = testing::internal::GetCapturedStdout();
  EXPECT_NE(printed.find("goodput.jsonl line 7"), std::string::npos) << printed;
  std::ifstream in(dir + "/goodput.json");
  ASSERT_TRUE(in);
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["warnings"].size(), r.warnings.size());
  EXPECT_FALSE(std::filesystem::exists(dir + "/goodput.json.tmp"));
}

TEST(ReportCommand, RunWithoutAttemptEndIsReported) {
  const std::string dir = test::fresh_dir("report_running");
  LedgerBuilder l;
  l.start(1, 0).wait(1).steps(1, 5, 1.0);
  l.write(dir);
  GoodputReport r = load_and_compute(dir);
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.steps_at_risk, 5);
  EXPECT_NEAR(r.wall_seconds, 6, 1e-9);
}

}  // namespace
}  // namespace tetra::launch
