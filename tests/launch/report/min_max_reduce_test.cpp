// The per-pixel-column reduction: every column keeps its true extremes and ends, breaks stay breaks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "launch/report/chart_downsample.h"

namespace tetra::launch {
namespace {

TEST(MinMaxReduce, EveryColumnKeepsFirstMinMaxLastOfAMillionPoints) {
  constexpr int kColumns = 997;
  constexpr int kPoints = 1000000;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0, 1);
  MinMaxReducer red(1, kPoints, kColumns);
  struct Truth {
    double first, min, max, last;
    int64_t n = 0;
  };
  std::map<int, Truth> truth;
  for (int i = 1; i <= kPoints; ++i) {
    const double y = std::sin(i * 1e-4) + 0.1 * noise(rng) + (i == 123457 ? 50.0 : 0.0);  // one spike
    red.add(i, y);
    const int c = red.column_of(i);
    auto [it, fresh] = truth.try_emplace(c, Truth{y, y, y, y});
    Truth& t = it->second;
    t.min = std::min(t.min, y);
    t.max = std::max(t.max, y);
    t.last = y;
    t.n += 1;
  }
  ReducedSeries s = red.finish();
  EXPECT_EQ(s.points, kPoints);
  ASSERT_EQ(s.runs.size(), 1u);  // no break
  ASSERT_EQ(s.runs[0].size(), static_cast<size_t>(kColumns));
  int64_t points = 0;
  double spike = 0;
  for (const ReducedColumn& c : s.runs[0]) {
    const Truth& t = truth.at(c.column);
    EXPECT_EQ(c.first, t.first);
    EXPECT_EQ(c.min, t.min);
    EXPECT_EQ(c.max, t.max);
    EXPECT_EQ(c.last, t.last);
    EXPECT_EQ(c.points, t.n);
    points += c.points;
    spike = std::max(spike, c.max);
  }
  EXPECT_EQ(points, kPoints);
  EXPECT_GT(spike, 49.0);  // the single spike survives the reduction
  EXPECT_EQ(s.max, spike);
}

TEST(MinMaxReduce, NaNAndGapsBreakTheLine) {
  MinMaxReducer red(0, 100, 10);
  for (int i = 0; i < 30; ++i) red.add(i, i);
  red.add(30, std::numeric_limits<double>::quiet_NaN());  // a non-finite loss
  for (int i = 31; i < 60; ++i) red.add(i, i);
  red.gap();  // a restart
  for (int i = 60; i < 100; ++i) red.add(i, -i);
  ReducedSeries s = red.finish();
  ASSERT_EQ(s.runs.size(), 3u);
  EXPECT_EQ(s.runs[0].front().column, 0);
  EXPECT_EQ(s.runs[0].back().column, 2);
  EXPECT_EQ(s.runs[0].back().last, 29);
  EXPECT_EQ(s.runs[1].front().column, 3);
  EXPECT_EQ(s.runs[1].front().first, 31);
  EXPECT_EQ(s.runs[2].front().first, -60);
  EXPECT_EQ(s.points, 99);
  EXPECT_EQ(s.min, -99);
  EXPECT_EQ(s.max, 59);
}

TEST(MinMaxReduce, ExtremesKeepTheirOrder) {
  MinMaxReducer red(0, 1, 1);
  for (double y : {5.0, 9.0, 1.0, 4.0}) red.add(0.5, y);  // max before min
  ReducedSeries s = red.finish();
  ASSERT_EQ(s.runs.size(), 1u);
  const ReducedColumn& c = s.runs[0][0];
  EXPECT_EQ(c.first, 5.0);
  EXPECT_EQ(c.max, 9.0);
  EXPECT_EQ(c.min, 1.0);
  EXPECT_EQ(c.last, 4.0);
  EXPECT_FALSE(c.min_before_max);
}

TEST(MinMaxReduce, PointsOutsideTheRangeAreClampedToTheEdgeColumns) {
  MinMaxReducer red(10, 20, 5);
  EXPECT_EQ(red.column_of(-1e9), 0);
  EXPECT_EQ(red.column_of(20), 4);
  EXPECT_EQ(red.column_of(1e9), 4);
  EXPECT_EQ(red.column_of(std::numeric_limits<double>::quiet_NaN()), 0);
  MinMaxReducer one(3, 3, 4);  // an empty x range: everything in column 0
  EXPECT_EQ(one.column_of(3), 0);
  EXPECT_THROW(MinMaxReducer(0, 1, 0), std::exception);
}

}  // namespace
}  // namespace tetra::launch
