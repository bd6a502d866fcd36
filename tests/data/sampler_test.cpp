// Sampler: the documented order, exact partition of each step over ranks and micro-batches,
// per-epoch permutations that are deterministic per seed, and wrap-around after an epoch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "data/sampler.h"
#include "data_fixtures.h"
#include "runtime/error.h"

namespace tetra::data {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_of;

SamplerConfig config(int64_t T, int64_t B, int64_t mb, int rank, int dp, bool shuffle = false, uint64_t seed = 0) {
  return SamplerConfig{.seq_len = T, .global_batch = B, .micro_batch = mb, .dp_rank = rank, .dp_size = dp,
                       .shuffle = shuffle, .seed = seed};
}

std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

// All slots' windows of one step, in global slot order, gathered over every rank and micro-batch.
std::vector<int64_t> step_windows(const SamplerConfig& base, int64_t tokens, int64_t step) {
  std::vector<int64_t> out;
  for (int r = 0; r < base.dp_size; ++r) {
    SamplerConfig c = base;
    c.dp_rank = r;
    Sampler s(c, tokens);
    for (int k = 0; k < s.accumulation_steps(); ++k)
      for (int64_t start : s.window_starts(step, k)) out.push_back(start / c.seq_len);
  }
  return out;
}

TEST(DataSampler, UnshuffledOrderMatchesHandComputedExpectation) {
  // 23 tokens, T = 4: windows start at 0, 4, 8, 12, 16 ((23 − 1) / 4 = 5 windows; the last one
  // covers tokens 16..20). B = 4 over dp = 2 with micro-batch 1: 2 accumulation steps.
  const int64_t tokens = 23;
  Sampler r0(config(4, 4, 1, 0, 2), tokens), r1(config(4, 4, 1, 1, 2), tokens);
  EXPECT_EQ(r0.num_windows(), 5);
  EXPECT_EQ(r0.accumulation_steps(), 2);
  EXPECT_EQ(r0.local_batch(), 2);
  // step 0 = slots 0..3: rank 0 gets slots 0, 1; rank 1 slots 2, 3.
  EXPECT_EQ(r0.window_starts(0, 0), (std::vector<int64_t>{0}));
  EXPECT_EQ(r0.window_starts(0, 1), (std::vector<int64_t>{4}));
  EXPECT_EQ(r1.window_starts(0, 0), (std::vector<int64_t>{8}));
  EXPECT_EQ(r1.window_starts(0, 1), (std::vector<int64_t>{12}));
  // step 1 = slots 4..7 → windows 4, 0 (wrapped), 1, 2.
  EXPECT_EQ(r0.window_starts(1, 0), (std::vector<int64_t>{16}));
  EXPECT_EQ(r0.window_starts(1, 1), (std::vector<int64_t>{0}));
  EXPECT_EQ(r1.window_starts(1, 0), (std::vector<int64_t>{4}));
  EXPECT_EQ(r1.window_starts(1, 1), (std::vector<int64_t>{8}));
  EXPECT_EQ(r1.first_slot(1, 1), 7);
  EXPECT_EQ(r1.epoch_of_slot(7), 1);

  // Micro-batch 2 on one rank: rows of a micro-batch are consecutive slots.
  Sampler one(config(4, 4, 2, 0, 1), tokens);
  EXPECT_EQ(one.accumulation_steps(), 2);
  EXPECT_EQ(one.window_starts(0, 0), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(one.window_starts(0, 1), (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(one.window_starts(1, 0), (std::vector<int64_t>{16, 0}));
  EXPECT_EQ(one.window_starts(1, 1), (std::vector<int64_t>{4, 8}));
}

TEST(DataSampler, ExactlyOneWindowAndTheLastTokenIsUsed) {
  // size − 1 = T exactly: one window covering every token.
  Sampler s(config(8, 2, 1, 0, 1), 9);
  EXPECT_EQ(s.num_windows(), 1);
  EXPECT_EQ(s.window_starts(0, 0), (std::vector<int64_t>{0}));
  EXPECT_EQ(s.window_starts(0, 1), (std::vector<int64_t>{0}));
}

TEST(DataSampler, RanksAndMicroBatchesPartitionEachStep) {
  const int64_t tokens = 100000, T = 16;  // 6249 windows
  for (bool shuffle : {false, true}) {
    for (auto [B, mb, dp] : std::vector<std::tuple<int64_t, int64_t, int>>{{12, 2, 3}, {16, 4, 2}, {8, 1, 8}, {6, 6, 1}}) {
      const SamplerConfig base = config(T, B, mb, 0, dp, shuffle, 42);
      Sampler global(config(T, B, B, 0, 1, shuffle, 42), tokens);  // one rank, one micro-batch
      for (int64_t step : {0, 1, 7, 520, 521}) {
        // The union over ranks and micro-batches, in rank-then-micro order, is the step's slot
        // range in order: the same windows a single rank taking the whole batch would see.
        std::vector<int64_t> split = step_windows(base, tokens, step);
        std::vector<int64_t> whole;
        for (int64_t start : global.window_starts(step, 0)) whole.push_back(start / T);
        ASSERT_EQ(split, whole) << "B=" << B << " mb=" << mb << " dp=" << dp << " step=" << step;
        // Slots: rank r, micro k covers [s·B + r·B/dp + k·mb, +mb).
        for (int r = 0; r < dp; ++r) {
          SamplerConfig c = base;
          c.dp_rank = r;
          Sampler s(c, tokens);
          for (int k = 0; k < s.accumulation_steps(); ++k)
            ASSERT_EQ(s.first_slot(step, k), step * B + r * (B / dp) + k * mb);
        }
      }
    }
  }
}

TEST(DataSampler, ShuffleIsAPermutationPerEpochDeterministicPerSeed) {
  const int64_t T = 4, tokens = 4 * 37 + 1;  // 37 windows
  const SamplerConfig c = config(T, 1, 1, 0, 1, /*shuffle=*/true, /*seed=*/1234);
  Sampler s(c, tokens);
  ASSERT_EQ(s.num_windows(), 37);
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t e = 0; e < 4; ++e) {
    std::vector<int64_t> order;
    for (int64_t step = e * 37; step < (e + 1) * 37; ++step) order.push_back(s.window_starts(step, 0)[0] / T);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted, identity(37)) << "epoch " << e << " is not a permutation of the windows";
    epochs.push_back(order);
  }
  EXPECT_NE(epochs[0], epochs[1]);  // each epoch has its own order
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_NE(epochs[0], identity(37));  // shuffled at all

  // Same seed: same order, whichever object or access order; another seed: another order.
  Sampler again(c, tokens);
  for (int64_t step = 3 * 37 + 36; step >= 0; --step)  // backwards, across epoch boundaries
    ASSERT_EQ(again.window_starts(step, 0)[0] / T, epochs[static_cast<size_t>(step / 37)][static_cast<size_t>(step % 37)]);
  SamplerConfig other = c;
  other.seed = 1235;
  Sampler s2(other, tokens);
  std::vector<int64_t> order2;
  for (int64_t step = 0; step < 37; ++step) order2.push_back(s2.window_starts(step, 0)[0] / T);
  EXPECT_NE(order2, epochs[0]);
}

// The documented algorithm, written out independently: splitmix64 seeded with seed XOR epoch,
// Fisher–Yates from the back with j = next % (i + 1).
std::vector<uint32_t> reference_permutation(uint32_t n, uint64_t seed, int64_t epoch) {
  uint64_t state = seed ^ static_cast<uint64_t>(epoch);
  auto next = [&] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::vector<uint32_t> p(n);
  std::iota(p.begin(), p.end(), 0u);
  for (uint32_t i = n - 1; i > 0; --i) std::swap(p[i], p[next() % (i + 1)]);
  return p;
}

TEST(DataSampler, ShuffleFollowsTheDocumentedAlgorithm) {
  for (int64_t epoch : {0, 1, 5})
    EXPECT_EQ(epoch_permutation(50, 77, epoch), reference_permutation(50, 77, epoch)) << "epoch " << epoch;
  // The sampler applies it: slot i → perm_{i / W}(i mod W).
  Sampler s(config(2, 10, 5, 0, 1, true, 77), 2 * 50 + 1);
  for (int64_t slot = 0; slot < 150; ++slot)
    ASSERT_EQ(s.window_of_slot(slot), reference_permutation(50, 77, slot / 50)[static_cast<size_t>(slot % 50)]);
}

TEST(DataSampler, WrapsAroundAfterAnEpoch) {
  // 10 windows, B = 4: step 2 covers slots 8..11 = windows 8, 9 (epoch 0), then 0, 1 (epoch 1).
  Sampler s(config(3, 4, 2, 0, 1), 31);
  ASSERT_EQ(s.num_windows(), 10);
  EXPECT_EQ(s.window_starts(2, 0), (std::vector<int64_t>{24, 27}));
  EXPECT_EQ(s.window_starts(2, 1), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(s.epoch_of_slot(9), 0);
  EXPECT_EQ(s.epoch_of_slot(10), 1);
  // Shuffled: a step straddling the boundary takes the end of epoch 0's order and the start of epoch 1's.
  Sampler sh(config(3, 4, 2, 0, 1, true, 9), 31);
  auto p0 = epoch_permutation(10, 9, 0), p1 = epoch_permutation(10, 9, 1);
  EXPECT_EQ(sh.window_starts(2, 0), (std::vector<int64_t>{3 * int64_t{p0[8]}, 3 * int64_t{p0[9]}}));
  EXPECT_EQ(sh.window_starts(2, 1), (std::vector<int64_t>{3 * int64_t{p1[0]}, 3 * int64_t{p1[1]}}));
}

TEST(DataSampler, ResumingAtAStepNeedsOnlyTheStepNumber) {
  // A fresh sampler asked for step 123 gives what one that walked through steps 0..123 gives.
  const SamplerConfig c = config(8, 8, 2, 1, 2, true, 5);
  Sampler walked(c, 1000), fresh(c, 1000);
  std::vector<int64_t> last;
  for (int64_t step = 0; step <= 123; ++step) last = walked.window_starts(step, 1);
  EXPECT_EQ(fresh.window_starts(123, 1), last);
}

TEST(DataSampler, InvalidConfigurationsAreExplained) {
  EXPECT_THAT(error_of([] { Sampler(config(4, 12, 4, 0, 2), 1000); }),
              AllOf(HasSubstr("global batch 12"), HasSubstr("dp (2)"), HasSubstr("micro-batch (4)"),
                    HasSubstr("multiple of 8")));
  EXPECT_THAT(error_of([] { Sampler(config(4, 5, 1, 0, 2), 1000); }), HasSubstr("not divisible"));
  EXPECT_THAT(error_of([] { Sampler(config(16, 2, 1, 0, 1), 16); }),
              AllOf(HasSubstr("dataset shorter than one window"), HasSubstr("16 tokens"), HasSubstr("needs 17")));
  EXPECT_THAT(error_of([] { Sampler(config(0, 2, 1, 0, 1), 100); }), HasSubstr("sequence length"));
  EXPECT_THAT(error_of([] { Sampler(config(4, 2, 1, 2, 2), 100); }), HasSubstr("rank 2"));
  try {
    Sampler(config(4, 12, 4, 0, 2), 1000);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
  }
  Sampler s(config(4, 4, 2, 0, 1), 100);
  EXPECT_THAT(error_of([&] { s.window_starts(0, 2); }), HasSubstr("micro-batch 2"));
  EXPECT_THAT(error_of([&] { s.window_starts(-1, 0); }), HasSubstr("negative step"));
}

}  // namespace
}  // namespace tetra::data
