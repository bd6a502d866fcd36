#include "parallel/mesh_groups.h"

namespace tetra {

Communicator& MeshGroups::grad_comm(const Mesh& mesh) const {
  return grad.host ? grad.on_device() : mesh.device_comm(MeshAxis::DP);
}

Communicator& MeshGroups::expert_grad_comm(const Mesh& mesh) const {
  return expert_grad.host ? expert_grad.on_device() : mesh.device_comm(MeshAxis::ExpertDP);
}

Communicator& MeshGroups::balance_comm(const Mesh& mesh) const {
  return moe_balance.host ? moe_balance.on_device() : mesh.device_comm(MeshAxis::DP);
}

MeshGroups create_mesh_groups(Mesh& mesh, Communicator& world, const RankGroups& plan) {
  MeshGroups g;
  if (!plan.grad.empty()) g.grad = mesh.create_group(world, plan.grad, "pp_replicas");
  if (!plan.tie.empty()) g.tie = mesh.create_group(world, plan.tie, "pp_tie");
  if (!plan.expert_grad.empty()) g.expert_grad = mesh.create_group(world, plan.expert_grad, "pp_expert_replicas");
  for (const auto& [r, members] : plan.tp_replicas) g.tp_replicas[r] = mesh.create_group(world, members, "tp_replicas");
  if (!plan.moe_balance.empty()) g.moe_balance = mesh.create_group(world, plan.moe_balance, "moe_balance");
  return g;
}

}  // namespace tetra
