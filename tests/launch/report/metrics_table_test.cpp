// metrics.jsonl as columns: the flat-line scanner, its fallback, and what it skips.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "launch/report/metrics_table.h"
#include "tests/launch/report/ledger_builder.h"

namespace tetra::launch {
namespace {

TEST(MetricsTable, ColumnsOfNumbersBooleansAndNull) {
  MetricsTable t = parse_metrics_table(
      "{\"step\":1,\"loss\":3.5,\"lr\":3e-4,\"attempt\":1,\"time\":1714557851.25}\n"
      "{\"step\":2,\"loss\":null,\"skipped\":true,\"lr\":-1.5E-2,\"attempt\":1}\n"
      "{\"attempt\":2,\"step\":3,\"loss\":2.25,\"val_loss\":2.5,\"skipped\":false,\"note\":\"a \\\"quoted\\\" text\","
      "\"axes\":{\"tp\":[1,2]},\"list\":[1,{\"a\":\"]\"}]}\n");
  EXPECT_TRUE(t.warnings.empty()) << t.warnings.front();
  ASSERT_EQ(t.rows, 3u);
  const auto* step = t.column("step");
  const auto* loss = t.column("loss");
  const auto* lr = t.column("lr");
  const auto* skipped = t.column("skipped");
  const auto* val = t.column("val_loss");
  const auto* time = t.column("time");
  ASSERT_TRUE(step && loss && lr && skipped && val && time);
  EXPECT_EQ(t.column("note"), nullptr);  // strings, objects and arrays are not columns
  EXPECT_EQ(t.column("axes"), nullptr);
  EXPECT_EQ(t.column("list"), nullptr);
  EXPECT_EQ((*step)[2], 3.0);
  EXPECT_EQ((*loss)[0], 3.5);
  EXPECT_TRUE(std::isnan((*loss)[1]));  // null
  EXPECT_EQ((*lr)[0], 3e-4);
  EXPECT_EQ((*lr)[1], -1.5e-2);
  EXPECT_TRUE(std::isnan((*lr)[2]));  // absent
  EXPECT_TRUE(std::isnan((*skipped)[0]));
  EXPECT_EQ((*skipped)[1], 1.0);
  EXPECT_EQ((*skipped)[2], 0.0);
  EXPECT_TRUE(std::isnan((*val)[0]));  // a column that appears late is NaN before
  EXPECT_EQ((*val)[2], 2.5);
  EXPECT_EQ((*time)[0], 1714557851.25);
}

TEST(MetricsTable, NumbersParseExactlyAsStrtod) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> mag(-12, 12);
  std::string text;
  std::vector<std::string> written;
  for (int i = 0; i < 4000; ++i) {
    char buf[64];
    const double v = std::pow(10.0, mag(rng)) * (i % 3 ? 1 : -1);
    // Fixed notation with up to 20 decimals and %.17g forms, as nlohmann and Python write them.
    if (i % 2)
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(rng() % 21), v);
    else
      std::snprintf(buf, sizeof buf, "%.17g", v);
    written.push_back(buf);
    text += std::string("{\"v\":") + buf + "}\n";
  }
  MetricsTable t = parse_metrics_table(text);
  ASSERT_EQ(t.rows, written.size());
  const auto& v = *t.column("v");
  for (size_t i = 0; i < written.size(); ++i) EXPECT_EQ(v[i], std::strtod(written[i].c_str(), nullptr)) << written[i];
}

TEST(MetricsTable, EscapedKeysGoThroughTheFallbackParser) {
  MetricsTable t = parse_metrics_table("{\"st\\u0065p\":7,\"a\\\"b\":1}\n{\"step\":8}\n");
  EXPECT_TRUE(t.warnings.empty());
  ASSERT_EQ(t.rows, 2u);
  EXPECT_EQ((*t.column("step"))[0], 7.0);
  EXPECT_EQ((*t.column("step"))[1], 8.0);
  EXPECT_EQ((*t.column("a\"b"))[0], 1.0);
}

TEST(MetricsTable, BadLinesAreSkippedAndCounted) {
  MetricsTable t = parse_metrics_table(
      "{\"step\":1}\n"
      "not json\n"
      "[1,2]\n"
      "\n"
      "{\"step\":2,}\n"
      "{\"step\":3}\n"
      "{\"step\":4,\"lo");  // the last line, cut short by a crash
  ASSERT_EQ(t.rows, 2u);
  EXPECT_EQ((*t.column("step"))[1], 3.0);
  ASSERT_EQ(t.warnings.size(), 2u);
  std::string all = t.warnings[0] + " | " + t.warnings[1];
  EXPECT_NE(all.find("1 line cut short (by a crash, or being written now) (skipped; line 7)"), std::string::npos)
      << all;
  EXPECT_NE(all.find("3 lines not a JSON object (skipped; first: line 2)"), std::string::npos) << all;
}

TEST(MetricsTable, FileReadInBlocksEqualsTheText) {
  const std::string dir = test::fresh_dir("metrics_table");
  std::string text;
  for (int i = 1; i <= 300000; ++i)
    text += "{\"step\":" + std::to_string(i) + ",\"loss\":" + std::to_string(1.0 / i) + ",\"pad\":\"" +
            std::string(static_cast<size_t>(i % 50), 'x') + "\"}\n";
  text += "{\"step\":300001,\"loss\":";  // cut
  {
    std::ofstream(dir + "/metrics.jsonl", std::ios::binary) << text;
  }
  MetricsTable a = read_metrics_table(dir + "/metrics.jsonl");  // more than one 8 MiB block
  MetricsTable b = parse_metrics_table(text);
  ASSERT_EQ(a.rows, 300000u);
  ASSERT_EQ(a.rows, b.rows);
  EXPECT_EQ(*a.column("step"), *b.column("step"));
  EXPECT_EQ(*a.column("loss"), *b.column("loss"));
  ASSERT_EQ(a.warnings.size(), 1u);
  EXPECT_NE(a.warnings[0].find(dir + "/metrics.jsonl: 1 line cut short"), std::string::npos) << a.warnings[0];

  MetricsTable none = read_metrics_table(dir + "/missing.jsonl");
  EXPECT_EQ(none.rows, 0u);
  ASSERT_EQ(none.warnings.size(), 1u);
  EXPECT_NE(none.warnings[0].find("does not exist"), std::string::npos);

  // A device in its place (a test's /dev/full, say) is not read: it would never end.
  std::filesystem::create_symlink("/dev/zero", dir + "/device.jsonl");
  MetricsTable device = read_metrics_table(dir + "/device.jsonl");
  EXPECT_EQ(device.rows, 0u);
  ASSERT_EQ(device.warnings.size(), 1u);
  EXPECT_NE(device.warnings[0].find("is not a regular file"), std::string::npos);

  // Nor is a file that holds no line break in its first 64 MiB read to its end.
  {
    std::ofstream big(dir + "/one_line.jsonl", std::ios::binary);
    big << "{\"step\":1}\n";
    std::string chunk(size_t{1} << 20, 'x');
    for (int i = 0; i < 70; ++i) big << chunk;
  }
  MetricsTable one = read_metrics_table(dir + "/one_line.jsonl");
  EXPECT_EQ(one.rows, 1u);
  ASSERT_EQ(one.warnings.size(), 1u);
  EXPECT_NE(one.warnings[0].find("a line longer than 64 MiB after row 1"), std::string::npos) << one.warnings[0];
}

}  // namespace
}  // namespace tetra::launch
