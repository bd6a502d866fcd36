// plan_rank_groups (parallel/rank_groups.h) without MPI: what each rank holds and the groups it
// joins, for the layouts the Trainer builds — checked against memberships worked out by hand.
#include "parallel/rank_groups.h"

#include <gtest/gtest.h>

namespace tetra {
namespace {

using Ranks = std::vector<int>;

// A GPT-2-like model of `blocks` blocks: layer 0 the embedding (wte, tied to the output layer
// blocks + 1, and wpe), one parameter per block, the final norm (and, untied, the LM head) on the
// output layer.
std::vector<ParamUse> model_params(int blocks, bool tied) {
  std::vector<ParamUse> ps;
  ps.push_back({"wte", 0, tied ? std::vector<int>{blocks + 1} : std::vector<int>{}, {}});
  ps.push_back({"wpe", 0, {}, {}});
  for (int b = 1; b <= blocks; ++b) ps.push_back({"h." + std::to_string(b - 1), b, {}, {}});
  ps.push_back({"ln_f", blocks + 1, {}, {}});
  if (!tied) ps.push_back({"lm_head", blocks + 1, {}, {}});
  return ps;
}

RankGroupsInput input(MeshShape shape, const std::string& schedule, std::vector<int> stage_layers, int rank,
                      std::vector<ParamUse> params) {
  RankGroupsInput in;
  in.shape = shape;
  in.rank = rank;
  const PipelineLayout layout = PipelineLayout::for_schedule(schedule, shape.pp, 4);
  for (int q = 0; q < shape.pp; ++q) in.layers.push_back(pipeline_rank_layers(layout, stage_layers, q));
  in.params = std::move(params);
  return in;
}

const HeldParam* held(const RankGroups& g, const RankGroupsInput& in, const std::string& name) {
  for (const HeldParam& h : g.params)
    if (in.params[h.index].name == name) return &h;
  return nullptr;
}

TEST(PipelineRankLayers, OneFOneBAndTheV) {
  const PipelineLayout f = PipelineLayout::for_schedule("1f1b", 4, 4);
  EXPECT_EQ(pipeline_rank_layers(f, {1, 1, 1, 1}, 0), (Ranks{0, 1}));
  EXPECT_EQ(pipeline_rank_layers(f, {1, 1, 1, 1}, 2), (Ranks{3}));
  EXPECT_EQ(pipeline_rank_layers(f, {1, 1, 1, 1}, 3), (Ranks{4, 5}));
  // The V: rank 0 holds the first and the last stage, in chunk order.
  const PipelineLayout v = PipelineLayout::for_schedule("dualpipev", 2, 4);
  EXPECT_EQ(pipeline_rank_layers(v, {1, 1, 1, 1}, 0), (Ranks{0, 1, 4, 5}));
  EXPECT_EQ(pipeline_rank_layers(v, {1, 1, 1, 1}, 1), (Ranks{2, 3}));
}

// pp 2 dualpipev × dp 2, tied embeddings: rank 0's pipeline rank holds the embedding and the output
// layer, so the tie stays on one rank; no rank holds another's layers: no extra group at all.
TEST(RankGroups, DualPipeVTiedEmbeddings) {
  const MeshShape shape{2, 2, 1, 1};
  for (int rank = 0; rank < shape.world(); ++rank) {
    const RankGroupsInput in = input(shape, "dualpipev", {1, 1, 1, 1}, rank, model_params(4, true));
    const RankGroups g = plan_rank_groups(in);
    EXPECT_EQ(g.pp_rank, rank / 2);
    EXPECT_TRUE(g.grad.empty() && g.tie.empty() && g.expert_grad.empty() && g.moe_balance.empty());
    EXPECT_TRUE(g.tp_replicas.empty());
    EXPECT_TRUE(g.counts_norm);
    EXPECT_TRUE(g.tie_owner);
    if (g.pp_rank == 0) {
      EXPECT_EQ(g.held_layers, (Ranks{0, 1, 4, 5}));
      const HeldParam* wte = held(g, in, "wte");
      ASSERT_NE(wte, nullptr);
      EXPECT_EQ(wte->layer, 0);
      EXPECT_EQ(wte->tied_layers, (Ranks{5}));
      EXPECT_FALSE(wte->tied_across);
      EXPECT_EQ(g.params.size(), 5u);  // wte, wpe, h.0, h.3, ln_f
    } else {
      EXPECT_EQ(g.held_layers, (Ranks{2, 3}));
      EXPECT_EQ(held(g, in, "wte"), nullptr);
      EXPECT_EQ(g.params.size(), 2u);  // h.1, h.2
    }
  }
}

// pp 2 dualpipe × dp 2: both pipeline ranks hold every layer (the pair), so the gradients are summed
// over the four ranks of a tp index and only pipeline rank 0 counts in the norm.
TEST(RankGroups, DualPipePairs) {
  const MeshShape shape{2, 2, 1, 1};
  for (int rank = 0; rank < shape.world(); ++rank) {
    const RankGroupsInput in = input(shape, "dualpipe", {2, 2}, rank, model_params(4, true));
    const RankGroups g = plan_rank_groups(in);
    EXPECT_EQ(g.held_layers, (Ranks{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(g.grad, (Ranks{0, 1, 2, 3}));
    EXPECT_TRUE(g.tie.empty());
    EXPECT_TRUE(g.expert_grad.empty());
    EXPECT_EQ(g.counts_norm, rank < 2);
    const HeldParam* wte = held(g, in, "wte");
    ASSERT_NE(wte, nullptr);
    EXPECT_FALSE(wte->tied_across);
  }
}

// pp 4 1f1b × dp 2 × tp 2, tied embeddings: the wte's copies on the first and the last stage are
// summed over the tie group of their dp and tp index; the middle ranks join a group of their own.
TEST(RankGroups, OneFOneBTie) {
  const MeshShape shape{4, 2, 2, 1};
  const Mesh mesh(shape, 0);
  for (int rank = 0; rank < shape.world(); ++rank) {
    const RankGroupsInput in = input(shape, "1f1b", {1, 1, 1, 1}, rank, model_params(4, true));
    const RankGroups g = plan_rank_groups(in);
    const MeshCoords c = mesh.coords_of(rank);
    EXPECT_TRUE(g.grad.empty());
    EXPECT_TRUE(g.counts_norm);
    const HeldParam* wte = held(g, in, "wte");
    if (c.pp == 0 || c.pp == 3) {
      EXPECT_EQ(g.tie, (Ranks{mesh.rank_of(0, c.dp, c.tp), mesh.rank_of(3, c.dp, c.tp)}));
      ASSERT_NE(wte, nullptr);
      EXPECT_TRUE(wte->tied_across);
      EXPECT_EQ(wte->layer, c.pp == 0 ? 0 : 5);  // localised: owned by the reader held here
      EXPECT_TRUE(wte->tied_layers.empty());
      EXPECT_EQ(g.tie_owner, c.pp == 0);
    } else {
      EXPECT_EQ(g.tie, (Ranks{rank}));
      EXPECT_EQ(wte, nullptr);
      EXPECT_TRUE(g.tie_owner);
    }
  }
  // Untied: no tie group anywhere.
  for (int rank = 0; rank < shape.world(); ++rank)
    EXPECT_TRUE(plan_rank_groups(input(shape, "1f1b", {1, 1, 1, 1}, rank, model_params(4, false))).tie.empty());
}

// ep 2 carved out of dp 4: at pp 1 the expert-data group is the mesh's axis (no group of its own);
// under dualpipe pp 2 it spans the pair: this rank's expert index on both pipeline ranks. The MoE
// balance group: every rank of the tp index once there is a pipeline.
TEST(RankGroups, ExpertParallelWithinDataParallel) {
  for (int rank = 0; rank < 4; ++rank) {
    RankGroupsInput in = input({1, 4, 1, 2}, "1f1b", {4}, rank, model_params(4, false));
    in.moe_layers = true;
    const RankGroups g = plan_rank_groups(in);
    EXPECT_TRUE(g.grad.empty() && g.expert_grad.empty() && g.tie.empty() && g.moe_balance.empty());
  }
  const MeshShape shape{2, 4, 1, 2};
  for (int rank = 0; rank < shape.world(); ++rank) {
    RankGroupsInput in = input(shape, "dualpipe", {2, 2}, rank, model_params(4, false));
    in.moe_layers = true;
    const RankGroups g = plan_rank_groups(in);
    EXPECT_EQ(g.grad, (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
    const int e = rank % 2;  // dp index mod ep
    EXPECT_EQ(g.expert_grad, (Ranks{e, e + 2, 4 + e, 6 + e}));
    EXPECT_EQ(g.moe_balance, (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
  }
}

// tp 4 with the key/value heads replicated over 2 tp ranks (2 kv heads): each rank's pair of tp
// ranks, one group per replica count; a dp 2 × tp 4 mesh keeps them inside each dp index.
TEST(RankGroups, TensorParallelReplicatedKvHeads) {
  const MeshShape shape{1, 2, 4, 1};
  std::vector<ParamUse> params = model_params(2, false);
  params[2].tp_replicas = {2};  // h.0's fused qkv: k and v on 2 tp ranks each
  for (int rank = 0; rank < shape.world(); ++rank) {
    const RankGroups g = plan_rank_groups(input(shape, "1f1b", {2}, rank, params));
    ASSERT_EQ(g.tp_replicas.size(), 1u);
    const int first = rank / 2 * 2;
    EXPECT_EQ(g.tp_replicas.at(2), (Ranks{first, first + 1}));
    EXPECT_TRUE(g.grad.empty() && g.tie.empty());
  }
  // Fully replicated too (1 kv head on tp 4): both groups.
  params[3].tp_replicas = {4};
  const RankGroups g = plan_rank_groups(input(shape, "1f1b", {2}, 6, params));
  EXPECT_EQ(g.tp_replicas.at(2), (Ranks{6, 7}));
  EXPECT_EQ(g.tp_replicas.at(4), (Ranks{4, 5, 6, 7}));
}

TEST(RankGroups, LocaliseParams) {
  const RankGroupsInput in = input({4, 1, 1, 1}, "1f1b", {1, 1, 1, 1}, 3, model_params(4, true));
  const RankGroups g = plan_rank_groups(in);
  std::vector<Param> storage(in.params.size());
  std::vector<Param*> all;
  for (size_t i = 0; i < in.params.size(); ++i) {
    storage[i].name = in.params[i].name;
    storage[i].layer_index = in.params[i].layer;
    storage[i].tied_layers = in.params[i].tied_layers;
    all.push_back(&storage[i]);
  }
  const std::vector<Param*> mine = localise_params(g, all);
  ASSERT_EQ(mine.size(), 3u);  // wte (for the output layer), h.3, ln_f
  EXPECT_EQ(mine[0]->name, "wte");
  EXPECT_EQ(mine[0]->layer_index, 5);
  EXPECT_TRUE(mine[0]->tied_layers.empty());
  EXPECT_TRUE(mine[0]->own_unit);
  EXPECT_FALSE(mine[1]->own_unit);
  EXPECT_EQ(param_use(*mine[2]).layer, 5);
}

}  // namespace
}  // namespace tetra
