// How a model's layers are cut into pipeline stages (docs/pipeline.md): contiguous groups of its
// blocks, chosen so that the costliest stage is as cheap as possible, where the embedding counts
// towards the first stage and the output layer (final norm, LM head, loss) towards the last — with
// a large vocabulary those two would otherwise be the heaviest stages.
#pragma once
#include <string>
#include <vector>

namespace tetra {

// layer_costs: the cost of every layer in model order — the embedding first, then the n blocks,
// then the output layer (n + 2 values ≥ 0). Returns the blocks of each of `stages` stages (each
// ≥ 1, summing to n) minimising the largest stage cost; among equal splits, the one whose
// earlier stages hold more blocks. Needs 1 ≤ stages ≤ n.
std::vector<int> split_layers_by_cost(const std::vector<double>& layer_costs, int stages);

// The cost of each stage under a split (blocks per stage), embedding and output layer included.
std::vector<double> stage_costs(const std::vector<double>& layer_costs, const std::vector<int>& blocks_per_stage);

// The first block of each stage (and n at the end): stage s holds blocks [first[s], first[s+1]).
std::vector<int> stage_first_blocks(const std::vector<int>& blocks_per_stage);

// The model layers (Layer::index: 0 the embedding, 1 … n the blocks, n + 1 the output layer) that
// stage `stage` holds, in order.
std::vector<int> stage_layer_indices(const std::vector<int>& blocks_per_stage, int stage);

// What is wrong with a user's split (parallel.stage_layers) for n blocks and `stages` stages, as a
// sentence; empty when it is valid: as many entries as stages, each ≥ 1, summing to n.
std::string stage_layers_problem(const std::vector<int>& blocks_per_stage, int n_blocks, int stages);

}  // namespace tetra
