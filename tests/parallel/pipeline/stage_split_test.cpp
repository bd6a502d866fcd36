// Stage split by cost (parallel/pipeline/stage_split.h): the least possible costliest stage, checked
// against every split of small models, with the embedding and output layer counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>

#include "parallel/pipeline/stage_split.h"

namespace tetra {
namespace {

double largest(const std::vector<double>& layer_costs, const std::vector<int>& split) {
  const std::vector<double> c = stage_costs(layer_costs, split);
  return *std::max_element(c.begin(), c.end());
}

TEST(StageSplit, EqualBlocksWithoutEndsSplitEvenly) {
  std::vector<double> costs(2 + 12, 1.0);
  costs.front() = 0;
  costs.back() = 0;
  EXPECT_EQ(split_layers_by_cost(costs, 4), (std::vector<int>{3, 3, 3, 3}));
  EXPECT_EQ(split_layers_by_cost(costs, 1), (std::vector<int>{12}));
  EXPECT_EQ(split_layers_by_cost(costs, 12), std::vector<int>(12, 1));
  // 10 over 4: two stages of 3, two of 2, the longer ones first.
  std::vector<double> ten(12, 1.0);
  ten.front() = ten.back() = 0;
  EXPECT_EQ(split_layers_by_cost(ten, 4), (std::vector<int>{3, 3, 2, 2}));
}

TEST(StageSplit, HeavyOutputLayerGetsFewerBlocks) {
  // A GPT-2 124M-like model: 12 blocks of cost 1, the LM head worth ~4 blocks, the embedding ~0.
  std::vector<double> costs(14, 1.0);
  costs.front() = 0.01;
  costs.back() = 4.0;
  const std::vector<int> split = split_layers_by_cost(costs, 4);
  EXPECT_EQ(std::accumulate(split.begin(), split.end(), 0), 12);
  EXPECT_NEAR(largest(costs, split), 5.0, 1e-12);
  // The stages that are not the bottleneck stay even (3.01, 4, 4 rather than 5.01, 5, 1), the
  // embedding's small cost tipping the first stage to the shorter one.
  EXPECT_EQ(split, (std::vector<int>{3, 4, 4, 1}));
  EXPECT_EQ(stage_first_blocks(split), (std::vector<int>{0, 3, 7, 11, 12}));
}

TEST(StageSplit, LeastLargestStageAgainstEverySplit) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.1, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 8), stages = 1 + static_cast<int>(rng() % static_cast<unsigned>(n));
    std::vector<double> costs(static_cast<size_t>(n) + 2);
    for (double& c : costs) c = u(rng);
    const std::vector<int> split = split_layers_by_cost(costs, stages);
    ASSERT_EQ(split.size(), static_cast<size_t>(stages));
    ASSERT_EQ(std::accumulate(split.begin(), split.end(), 0), n);
    for (int b : split) ASSERT_GE(b, 1);
    // Every composition of n into `stages` positive parts.
    double best = 1e300;
    std::vector<int> parts;
    std::function<void(int, int)> walk = [&](int left, int k) {
      if (k == 1) {
        parts.push_back(left);
        best = std::min(best, largest(costs, parts));
        parts.pop_back();
        return;
      }
      for (int p = 1; p <= left - (k - 1); ++p) {
        parts.push_back(p);
        walk(left - p, k - 1);
        parts.pop_back();
      }
    };
    walk(n, stages);
    EXPECT_NEAR(largest(costs, split), best, 1e-12) << "n " << n << " stages " << stages;
  }
}

TEST(StageSplit, UserSplitProblems) {
  EXPECT_EQ(stage_layers_problem({2, 2}, 4, 2), "");
  EXPECT_EQ(stage_layers_problem({2, 2}, 4, 4),
            "2 entries, but the model is cut into 4 pipeline stages: give one count of layers per stage");
  EXPECT_EQ(stage_layers_problem({4, 0}, 4, 2), "stage 1 has 0 layers; every stage needs at least 1");
  EXPECT_EQ(stage_layers_problem({2, 3}, 4, 2), "the entries sum to 5 layers, but model.n_layers is 4");
}

}  // namespace
}  // namespace tetra
