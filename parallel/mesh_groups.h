// The groups one rank joins beside the mesh's axes (parallel/rank_groups.h says which), made here
// and nowhere else. Collective over the world: every rank calls create_mesh_groups with its own
// plan, and the groups come out in the same order on every rank.
#pragma once
#include <map>

#include "parallel/mesh.h"
#include "parallel/rank_groups.h"

namespace tetra {

struct MeshGroups {
  Mesh::Group grad, tie, expert_grad, moe_balance;  // unset where the plan's list is empty
  std::map<int, Mesh::Group> tp_replicas;           // per replica count
  // The device communicators a rank reduces over: the group where one was made, else the axis.
  Communicator& grad_comm(const Mesh& mesh) const;         // dense gradients (dp, DualPipe's pair)
  Communicator& expert_grad_comm(const Mesh& mesh) const;  // experts' gradients (expert_dp and its mirror)
  Communicator& balance_comm(const Mesh& mesh) const;      // the MoE routers' loads (dp, or this tp index)
};

MeshGroups create_mesh_groups(Mesh& mesh, Communicator& world, const RankGroups& plan);

}  // namespace tetra
