// What one rank of the mesh holds and which groups it joins, worked out from the layout alone (no
// communicator): the layers of its pipeline rank, its parameters localised to them, the tie of a
// weight read on several pipeline ranks, and — as lists of world ranks, in group order — the groups
// its gradients and the MoE routers' loads are summed over beside the mesh's axes (ARCHITECTURE.md
// §4). Every rank computes every rank's answer alike, so the groups made from it
// (parallel/mesh_groups.h) match. `tetra plan`, the Trainer and the tests read the same answer.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "parallel/mesh.h"
#include "parallel/param.h"
#include "parallel/pipeline/schedule.h"

namespace tetra {

// The layers (Layer::index: 0 the embedding, 1 … n the blocks, n + 1 the output layer) that
// pipeline rank `rank` holds under `layout` with `blocks_per_stage`: those of its chunks' stages,
// in chunk order.
std::vector<int> pipeline_rank_layers(const PipelineLayout& layout, const std::vector<int>& blocks_per_stage, int rank);

// A parameter as the groups see it.
struct ParamUse {
  std::string name;
  int layer = 0;                 // Param::layer_index: the layer that owns it
  std::vector<int> tied_layers;  // Param::tied_layers: other layers that read it
  // The replica counts r > 1 of its parts replicated over r tp ranks (replica_ranges), ascending.
  std::vector<int> tp_replicas;
};
ParamUse param_use(const Param& p);
// Whether a rank holding `layers` holds the parameter (one of its readers is there).
bool holds(const std::vector<int>& layers, const ParamUse& p);

struct RankGroupsInput {
  MeshShape shape;
  int rank = 0;                            // world rank
  std::vector<std::vector<int>> layers;    // per pipeline rank (shape.pp of them): pipeline_rank_layers
  std::vector<ParamUse> params;            // every parameter of the model, tp plan applied
  bool moe_layers = false;                 // the model has MoE layers (their routers' loads are summed)
};

// A parameter this rank holds, localised to its layers: owned by the first of its readers held
// here, tied to the others held here.
struct HeldParam {
  size_t index = 0;              // into RankGroupsInput::params
  int layer = 0;
  std::vector<int> tied_layers;
  // Also held by a pipeline rank that holds other layers (GPT-2's wte on the first and the last
  // stage): a ZeRO unit of its own whose copies' gradients are summed over the tie group.
  bool tied_across = false;
};

struct RankGroups {
  int pp_rank = 0;
  std::vector<int> held_layers;  // ascending
  std::vector<HeldParam> params;  // in the order of RankGroupsInput::params
  bool tie_owner = true;    // this rank's copy of a tied weight is the one checkpoints and norms count
  bool counts_norm = true;  // this pipeline rank adds its layers to the gradient norm (one of a DualPipe pair)
  // World ranks, in group order; empty where the rank joins no such group (every rank alike).
  // grad: the data-parallel replicas of this rank's layers on every pipeline rank holding them
  // (DualPipe's pair), empty: the mesh's dp axis. expert_grad: likewise the expert-data group and its
  // mirror, empty: the expert_dp axis. tie: the ranks of this dp and tp index holding a copy of a tied
  // weight this rank holds (this rank alone where it holds none). moe_balance: the ranks of this tp
  // index (pp > 1), empty: the dp axis.
  std::vector<int> grad, tie, expert_grad, moe_balance;
  // Per replica count r of some parameter's parts: the r consecutive tp ranks [t/r·r, t/r·r + r)
  // of this rank's tp group (t its tp index) holding the same blocks.
  std::map<int, std::vector<int>> tp_replicas;
};

RankGroups plan_rank_groups(const RankGroupsInput& in);

// The parameters of `all` (RankGroupsInput::params' order) this rank holds, localised as
// `groups` says: their layer_index, tied_layers and own_unit set.
std::vector<Param*> localise_params(const RankGroups& groups, const std::vector<Param*>& all);

}  // namespace tetra
