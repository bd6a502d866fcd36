#include "parallel/pipeline/stage_split.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "runtime/error.h"

namespace tetra {

std::vector<int> split_layers_by_cost(const std::vector<double>& layer_costs, int stages) {
  TETRA_CHECK(layer_costs.size() >= 3, "an embedding, at least one block and an output layer");
  const int n = static_cast<int>(layer_costs.size()) - 2;
  TETRA_CHECK(stages >= 1 && stages <= n, stages, " stages for ", n, " blocks");
  // prefix[j] = cost of blocks [0, j).
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int j = 0; j < n; ++j) prefix[static_cast<size_t>(j) + 1] = prefix[static_cast<size_t>(j)] + layer_costs[static_cast<size_t>(j) + 1];
  const double first = layer_costs.front(), last = layer_costs.back();
  auto cost = [&](int s, int i, int j) {  // stage s holding blocks [i, j)
    double c = prefix[static_cast<size_t>(j)] - prefix[static_cast<size_t>(i)];
    if (s == 0) c += first;
    if (s == stages - 1) c += last;
    return c;
  };
  // Two passes of the same dynamic programme over (stage s, blocks [0, j) done), O(stages · n²) —
  // n is a few hundred blocks at most. The first finds the least possible largest stage cost; the
  // second, among the splits that reach it, the one with the least sum of squared stage costs (the
  // most even), so the stages that are not the bottleneck are balanced too.
  const double inf = std::numeric_limits<double>::infinity();
  auto solve = [&](bool squares, double cap) {
    std::vector<std::vector<double>> best(static_cast<size_t>(stages), std::vector<double>(static_cast<size_t>(n) + 1, inf));
    std::vector<std::vector<int>> start(static_cast<size_t>(stages), std::vector<int>(static_cast<size_t>(n) + 1, 0));
    auto combine = [&](double before, double c) { return squares ? before + c * c : std::max(before, c); };
    for (int s = 0; s < stages; ++s) {
      for (int j = s + 1; j <= n - (stages - 1 - s); ++j) {
        // Later starts first: of equal splits, the one with longer earlier stages is kept.
        for (int i = s == 0 ? 0 : j - 1; i >= (s == 0 ? 0 : s); --i) {
          const double c = cost(s, i, j);
          const double before = s == 0 ? 0.0 : best[static_cast<size_t>(s) - 1][static_cast<size_t>(i)];
          if (c > cap || before == inf) continue;
          const double v = combine(before, c);
          if (v < best[static_cast<size_t>(s)][static_cast<size_t>(j)]) {
            best[static_cast<size_t>(s)][static_cast<size_t>(j)] = v;
            start[static_cast<size_t>(s)][static_cast<size_t>(j)] = i;
          }
        }
      }
    }
    std::vector<int> blocks(static_cast<size_t>(stages), 0);
    for (int s = stages - 1, j = n; s >= 0; --s) {
      const int i = start[static_cast<size_t>(s)][static_cast<size_t>(j)];
      blocks[static_cast<size_t>(s)] = j - i;
      j = i;
    }
    return std::make_pair(best[static_cast<size_t>(stages) - 1][static_cast<size_t>(n)], blocks);
  };
  const double least_max = solve(false, inf).first;
  return solve(true, least_max * (1 + 1e-12) + 1e-300).second;
}

std::vector<double> stage_costs(const std::vector<double>& layer_costs, const std::vector<int>& blocks_per_stage) {
  std::vector<double> out;
  size_t layer = 1;
  for (size_t s = 0; s < blocks_per_stage.size(); ++s) {
    double c = s == 0 ? layer_costs.front() : 0.0;
    for (int k = 0; k < blocks_per_stage[s]; ++k) c += layer_costs[layer++];
    if (s + 1 == blocks_per_stage.size()) c += layer_costs.back();
    out.push_back(c);
  }
  return out;
}

std::vector<int> stage_first_blocks(const std::vector<int>& blocks_per_stage) {
  std::vector<int> first{0};
  for (int b : blocks_per_stage) first.push_back(first.back() + b);
  return first;
}

std::vector<int> stage_layer_indices(const std::vector<int>& blocks_per_stage, int stage) {
  const std::vector<int> first = stage_first_blocks(blocks_per_stage);
  const int stages = static_cast<int>(blocks_per_stage.size());
  std::vector<int> out;
  if (stage == 0) out.push_back(0);
  for (int b = first[static_cast<size_t>(stage)]; b < first[static_cast<size_t>(stage) + 1]; ++b) out.push_back(b + 1);
  if (stage == stages - 1) out.push_back(first.back() + 1);
  return out;
}

std::string stage_layers_problem(const std::vector<int>& blocks_per_stage, int n_blocks, int stages) {
  if (static_cast<int>(blocks_per_stage.size()) != stages)
    return std::to_string(blocks_per_stage.size()) + " entries, but the model is cut into " + std::to_string(stages) +
           " pipeline stages: give one count of layers per stage";
  for (size_t s = 0; s < blocks_per_stage.size(); ++s)
    if (blocks_per_stage[s] < 1)
      return "stage " + std::to_string(s) + " has " + std::to_string(blocks_per_stage[s]) +
             " layers; every stage needs at least 1";
  const long long sum = std::accumulate(blocks_per_stage.begin(), blocks_per_stage.end(), 0LL);
  if (sum != n_blocks)
    return "the entries sum to " + std::to_string(sum) + " layers, but model.n_layers is " + std::to_string(n_blocks);
  return "";
}

}  // namespace tetra
