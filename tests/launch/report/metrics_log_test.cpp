// metrics.jsonl: one object per step, standard fields plus extras, appended across attempts.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "runtime/error.h"
#include "runtime/goodput_clock.h"
#include "runtime/jsonl_file.h"
#include "runtime/metrics_log.h"
#include "tests/launch/report/ledger_builder.h"

namespace tetra {
namespace {

TEST(MetricsLog, WritesStandardAndExtraFields) {
  const std::string dir = test::fresh_dir("metrics");
  const std::string path = MetricsLog::path_in(dir);
  EXPECT_EQ(path, dir + "/metrics.jsonl");
  {
    MetricsLog log(path, 3);
    log.log({.step = 7, .loss = 2.75, .lr = 3e-4, .grad_norm = 1.25, .tokens = 7 * 4096, .step_ms = 812.5,
             .tokens_per_s = 5041.2, .extra = {{"val_loss", 2.9}, {"mfu", 0.41}}});
    log.log({.step = 8, .loss = 2.5, .lr = 3e-4, .grad_norm = 1.0, .tokens = 8 * 4096, .step_ms = 800,
             .tokens_per_s = 5120});
  }
  std::vector<JsonlProblem> problems;
  auto lines = read_jsonl(path, &problems);
  ASSERT_TRUE(problems.empty());
  ASSERT_EQ(lines.size(), 2u);
  const auto& l = lines[0];
  EXPECT_EQ(l["step"], 7);
  EXPECT_EQ(l["loss"], 2.75);
  EXPECT_EQ(l["lr"], 3e-4);
  EXPECT_EQ(l["grad_norm"], 1.25);
  EXPECT_EQ(l["tokens"], 7 * 4096);
  EXPECT_EQ(l["step_ms"], 812.5);
  EXPECT_EQ(l["tokens_per_s"], 5041.2);
  EXPECT_EQ(l["attempt"], 3);
  EXPECT_EQ(l["val_loss"], 2.9);
  EXPECT_EQ(l["mfu"], 0.41);
  EXPECT_NEAR(l["time"].get<double>(), unix_now(), 60.0);
  EXPECT_EQ(lines[1].size(), 9u);  // 7 standard fields + time + attempt
}

TEST(MetricsLog, AppendsAcrossAttemptsAndOmitsAttemptZero) {
  const std::string dir = test::fresh_dir("metrics_append");
  const std::string path = MetricsLog::path_in(dir);
  { MetricsLog(path, 1).log({.step = 1}); }
  { MetricsLog(path).log({.step = 1}); }
  auto lines = read_jsonl(path, nullptr);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["attempt"], 1);
  EXPECT_FALSE(lines[1].contains("attempt"));
}

TEST(MetricsLog, DivergedLossIsWrittenAsNull) {
  const std::string dir = test::fresh_dir("metrics_nan");
  MetricsLog log(MetricsLog::path_in(dir));
  log.log({.step = 1, .loss = std::nan(""), .grad_norm = INFINITY});
  auto lines = read_jsonl(log.path(), nullptr);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0]["loss"].is_null());
  EXPECT_TRUE(lines[0]["grad_norm"].is_null());
}

TEST(MetricsLog, ExtraFieldMayNotShadowAStandardOne) {
  const std::string dir = test::fresh_dir("metrics_clash");
  MetricsLog log(MetricsLog::path_in(dir));
  try {
    log.log({.step = 5, .extra = {{"loss", 1.0}}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"loss\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(log.log({.step = 5, .extra = nlohmann::json::array({1})}), Error);
  EXPECT_TRUE(read_jsonl(log.path(), nullptr).empty());
}

TEST(MetricsLog, LineCutByACrashIsDroppedOnReopen) {
  const std::string dir = test::fresh_dir("metrics_cut");
  const std::string path = MetricsLog::path_in(dir);
  { MetricsLog(path).log({.step = 1}); }
  std::ofstream(path, std::ios::app) << "{\"step\":2,\"lo";
  std::vector<JsonlProblem> problems;
  EXPECT_EQ(read_jsonl(path, &problems).size(), 1u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].line, 2u);
  { MetricsLog(path).log({.step = 2}); }
  problems.clear();
  auto lines = read_jsonl(path, &problems);
  EXPECT_TRUE(problems.empty());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["step"], 2);
}

}  // namespace
}  // namespace tetra
