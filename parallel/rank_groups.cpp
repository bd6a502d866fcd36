#include "parallel/rank_groups.h"

#include <algorithm>
#include <set>

#include "parallel/param_placement.h"
#include "parallel/pipeline/stage_split.h"

namespace tetra {

namespace {

// The layers that read a parameter: its owner and its tied users.
std::set<int> users_of(const ParamUse& p) {
  std::set<int> u{p.layer};
  u.insert(p.tied_layers.begin(), p.tied_layers.end());
  return u;
}

bool meets(const std::set<int>& a, const std::set<int>& b) {
  return std::any_of(a.begin(), a.end(), [&](int x) { return b.count(x) > 0; });
}

struct PipelineHolding {
  std::vector<int> replicas;     // pipeline ranks holding the same layers as this one
  std::vector<int> tie_members;  // pipeline ranks holding a copy of a tied weight this rank holds
  bool any_replicas = false, any_tie = false;  // over every rank: whether such groups exist at all
};

// This rank's parameters (localised into g.params) and what the pipeline's groups need.
PipelineHolding hold_params(const RankGroupsInput& in, const std::vector<std::set<int>>& layers_of, RankGroups& g) {
  const std::set<int>& held = layers_of[static_cast<size_t>(g.pp_rank)];
  const int ranks = static_cast<int>(layers_of.size());
  PipelineHolding h;
  for (int q = 0; q < ranks; ++q)
    if (layers_of[static_cast<size_t>(q)] == held) h.replicas.push_back(q);
  for (size_t i = 0; i < in.params.size(); ++i) {
    const ParamUse& p = in.params[i];
    const std::set<int> users = users_of(p);
    std::vector<int> holders;
    for (int q = 0; q < ranks; ++q)
      if (meets(users, layers_of[static_cast<size_t>(q)])) holders.push_back(q);
    for (int q : holders) {
      const bool same_layers = layers_of[static_cast<size_t>(q)] == layers_of[static_cast<size_t>(holders.front())];
      h.any_replicas = h.any_replicas || (q != holders.front() && same_layers);
      h.any_tie = h.any_tie || !same_layers;
    }
    if (!meets(users, held)) continue;
    HeldParam hp;
    hp.index = i;
    std::vector<int> here;
    for (int u : users)
      if (held.count(u)) here.push_back(u);
    hp.layer = here.front();
    hp.tied_layers.assign(here.begin() + 1, here.end());
    hp.tied_across = std::any_of(holders.begin(), holders.end(),
                                 [&](int q) { return layers_of[static_cast<size_t>(q)] != held; });
    if (hp.tied_across) {
      g.tie_owner = held.count(p.layer) > 0;
      TETRA_CHECK(h.tie_members.empty() || h.tie_members == holders, "parameters tied across different pipeline ranks (",
                  p.name, ")");
      h.tie_members = holders;
    }
    g.params.push_back(std::move(hp));
  }
  return h;
}

}  // namespace

std::vector<int> pipeline_rank_layers(const PipelineLayout& layout, const std::vector<int>& blocks_per_stage, int rank) {
  std::vector<int> out;
  for (int c = 0; c < layout.chunks(); ++c)
    for (int layer : stage_layer_indices(blocks_per_stage, layout.stage_of(rank, c))) out.push_back(layer);
  return out;
}

ParamUse param_use(const Param& p) {
  ParamUse u;
  u.name = p.name;
  u.layer = p.layer_index;
  u.tied_layers = p.tied_layers;
  std::set<int> counts;
  for (const ReplicaRange& r : replica_ranges(p)) counts.insert(r.replicas);
  u.tp_replicas.assign(counts.begin(), counts.end());
  return u;
}

bool holds(const std::vector<int>& layers, const ParamUse& p) {
  return meets(users_of(p), std::set<int>(layers.begin(), layers.end()));
}

RankGroups plan_rank_groups(const RankGroupsInput& in) {
  const Mesh mesh(in.shape, in.rank);  // topology only
  const MeshCoords& me = mesh.coords();
  const MeshShape& shape = in.shape;
  TETRA_CHECK(static_cast<int>(in.layers.size()) == shape.pp, "plan_rank_groups: layers of ", in.layers.size(),
              " pipeline ranks for pp = ", shape.pp);
  RankGroups g;
  g.pp_rank = me.pp;
  std::vector<std::set<int>> layers_of;
  for (const std::vector<int>& l : in.layers) layers_of.emplace_back(l.begin(), l.end());
  const std::set<int>& held = layers_of[static_cast<size_t>(g.pp_rank)];
  g.held_layers.assign(held.begin(), held.end());
  const PipelineHolding h = hold_params(in, layers_of, g);
  g.counts_norm = h.replicas.front() == g.pp_rank;

  if (h.any_replicas)
    for (int q : h.replicas)
      for (int d = 0; d < shape.dp; ++d) g.grad.push_back(mesh.rank_of(q, d, me.tp));
  if (h.any_replicas && shape.ep > 1)
    for (int q : h.replicas)
      for (int d = me.ep; d < shape.dp; d += shape.ep) g.expert_grad.push_back(mesh.rank_of(q, d, me.tp));
  if (h.any_tie)
    for (int q : h.tie_members.empty() ? std::vector<int>{g.pp_rank} : h.tie_members)
      g.tie.push_back(mesh.rank_of(q, me.dp, me.tp));

  // From every parameter of the model, not only this rank's, so that every rank joins alike.
  std::set<int> replica_counts;
  for (const ParamUse& p : in.params) replica_counts.insert(p.tp_replicas.begin(), p.tp_replicas.end());
  for (int r : replica_counts) {
    TETRA_CHECK(r >= 1 && shape.tp % r == 0, "plan_rank_groups: ", r, " replicas do not divide tp = ", shape.tp);
    std::vector<int>& members = g.tp_replicas[r];
    for (int t = me.tp / r * r; t < me.tp / r * r + r; ++t) members.push_back(mesh.rank_of(me.pp, me.dp, t));
  }
  // The routers' loads are summed over every rank of this tp index: each pipeline rank counts the
  // layers it holds, so every rank holds every layer's global loads.
  if (in.moe_layers && shape.pp > 1)
    for (int r = 0; r < shape.world(); ++r)
      if (mesh.coords_of(r).tp == me.tp) g.moe_balance.push_back(r);
  return g;
}

std::vector<Param*> localise_params(const RankGroups& groups, const std::vector<Param*>& all) {
  std::vector<Param*> out;
  for (const HeldParam& h : groups.params) {
    TETRA_CHECK(h.index < all.size(), "localise_params: parameter ", h.index, " of ", all.size());
    Param* p = all[h.index];
    p->layer_index = h.layer;
    p->tied_layers = h.tied_layers;
    if (h.tied_across) p->own_unit = true;
    out.push_back(p);
  }
  return out;
}

}  // namespace tetra
