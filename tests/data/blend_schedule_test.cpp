// BlendSchedule: every prefix of the slot sequence follows the weights to within a slot per
// dataset, the schedule is the same every time (a pure function of the slot), and each dataset's
// draws are numbered 0, 1, 2, ... without gaps or repeats — across periods too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "data/blend_schedule.h"
#include "data/sampler.h"
#include "tests/data/data_fixtures.h"

namespace tetra::data {
namespace {

TEST(BlendSchedule, PrefixesFollowTheWeightsAndDrawsAreNumberedInOrder) {
  for (const std::vector<double>& w : std::vector<std::vector<double>>{
           {0.7, 0.3}, {1, 1, 1}, {5, 3, 2, 0.25}, {0.001, 0.999}, {2, 7, 1, 13, 4, 9, 6}}) {
    BlendSchedule blend(w);
    const double sum = std::accumulate(w.begin(), w.end(), 0.0);
    std::vector<int64_t> count(w.size(), 0);
    const int64_t n = 3 * BlendSchedule::kPeriod + 1234;
    double worst = 0;
    for (int64_t slot = 0; slot < n; ++slot) {
      const BlendSlot b = blend.at(slot);
      ASSERT_GE(b.source, 0);
      ASSERT_LT(b.source, static_cast<int>(w.size()));
      ASSERT_EQ(b.index, count[static_cast<size_t>(b.source)]) << "draws of a dataset are numbered consecutively";
      ++count[static_cast<size_t>(b.source)];
      for (size_t d = 0; d < w.size(); ++d)
        worst = std::max(worst, std::abs(static_cast<double>(count[d]) - w[d] / sum * static_cast<double>(slot + 1)));
    }
    // Within a period the greedy interleave stays within one slot of the exact share; periods add
    // at most the rounding of n_d = w_d·P (< 1 slot each).
    EXPECT_LT(worst, 1.0 + 4.0) << "weights " << ::testing::PrintToString(w);
    int64_t total = 0;
    for (size_t d = 0; d < w.size(); ++d) {
      total += blend.per_period(static_cast<int>(d));
      EXPECT_NEAR(blend.effective_weight(static_cast<int>(d)), w[d] / sum, 1.0 / BlendSchedule::kPeriod);
    }
    EXPECT_EQ(total, BlendSchedule::kPeriod);
    // Deterministic: another object, random access, same answers.
    BlendSchedule again(w);
    for (int64_t slot : {int64_t{0}, int64_t{1}, n - 1, int64_t{BlendSchedule::kPeriod}, int64_t{987654321}})
      EXPECT_EQ(again.at(slot).source, blend.at(slot).source);
  }
}

// The documented rule written out independently: largest-remainder counts, then the largest
// deficit n_d·(i + 1) − c_d·P with ties to the lower index.
std::vector<int> reference_period(const std::vector<int64_t>& n) {
  const int64_t P = BlendSchedule::kPeriod;
  std::vector<int64_t> c(n.size(), 0);
  std::vector<int> out;
  for (int64_t i = 0; i < P; ++i) {
    size_t best = 0;
    for (size_t d = 1; d < n.size(); ++d)
      if (n[d] * (i + 1) - c[d] * P > n[best] * (i + 1) - c[best] * P) best = d;
    ++c[best];
    out.push_back(static_cast<int>(best));
  }
  return out;
}

TEST(BlendSchedule, FollowsTheDocumentedRuleAndStaysWithinOneSlotPerPeriod) {
  BlendSchedule blend({0.7, 0.3});
  // 0.7·65536 = 45875.2 and 0.3·65536 = 19660.8: the larger remainder gets the spare slot.
  ASSERT_EQ(blend.per_period(0), 45875);
  ASSERT_EQ(blend.per_period(1), 19661);
  const std::vector<int> want = reference_period({45875, 19661});
  int64_t a = 0;
  for (int64_t slot = 0; slot < BlendSchedule::kPeriod; ++slot) {
    const int d = blend.at(slot).source;
    ASSERT_EQ(d, want[static_cast<size_t>(slot)]) << "slot " << slot;
    if (d == 0) ++a;
    ASSERT_LE(std::abs(static_cast<double>(a) - 45875.0 / 65536.0 * static_cast<double>(slot + 1)), 1.0) << "slot " << slot;
  }
  // By hand: deficits (in 1/P slots) 45875 vs 19661 → 0; 26214 vs 39322 → 1; ... ; at offset 4,
  // 32767 vs 32769 → 1.
  std::vector<int> first;
  for (int64_t slot = 0; slot < 10; ++slot) first.push_back(blend.at(slot).source);
  EXPECT_EQ(first, (std::vector<int>{0, 1, 0, 0, 1, 0, 0, 0, 1, 0}));
  // The next period repeats the pattern with the draws numbered on.
  EXPECT_EQ(blend.at(BlendSchedule::kPeriod + 1).source, 1);
  EXPECT_EQ(blend.at(BlendSchedule::kPeriod + 1).index, 19661);
}

TEST(BlendSchedule, OneDatasetIsTheIdentityAndTinyWeightsAreRefused) {
  BlendSchedule one({3.0});
  for (int64_t slot : {0, 5, 70000, 123456789}) {
    EXPECT_EQ(one.at(slot).source, 0);
    EXPECT_EQ(one.at(slot).index, slot);
  }
  EXPECT_THAT(testing::error_of([] { BlendSchedule({1.0, 1e-6}); }), ::testing::HasSubstr("never be drawn"));
}

TEST(BlendSchedule, TheSamplerOfOneDatasetIsUnchangedByTheBlendMachinery) {
  // A one-dataset sampler built from its window count is the plain sampler, bit for bit.
  SamplerConfig c{.seq_len = 4, .global_batch = 6, .micro_batch = 3, .dp_rank = 1, .dp_size = 2, .shuffle = true, .seed = 9};
  Sampler plain(c, 4 * 37 + 1);
  Sampler general(c, std::vector<int64_t>{37});
  std::vector<SampleRef> rows(3);
  for (int64_t step = 0; step < 40; ++step) {
    general.samples(step, 0, rows.data());
    const std::vector<int64_t> starts = plain.window_starts(step, 0);
    for (size_t j = 0; j < 3; ++j) {
      ASSERT_EQ(rows[j].source, 0);
      ASSERT_EQ(rows[j].window * 4, starts[j]);
    }
  }
  // Datasets of a blend shuffle with their own seeds: dataset 0 with the run seed itself.
  EXPECT_EQ(source_seed(9, 0), 9u);
  EXPECT_NE(source_seed(9, 1), source_seed(9, 2));
}

}  // namespace
}  // namespace tetra::data
