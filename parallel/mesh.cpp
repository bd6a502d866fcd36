#include "parallel/mesh.h"

#include <algorithm>
#include <sstream>

#include "runtime/nccl_communicator.h"
#include "runtime/text_join.h"

namespace tetra {

const char* axis_name(MeshAxis a) {
  switch (a) {
    case MeshAxis::TP: return "tp";
    case MeshAxis::DP: return "dp";
    case MeshAxis::PP: return "pp";
    case MeshAxis::EP: return "ep";
    case MeshAxis::ExpertDP: return "expert_dp";
  }
  return "?";
}

Mesh::Mesh(MeshShape shape, int rank) : shape_(shape), rank_(rank) {
  TETRA_CHECK(shape.pp >= 1 && shape.dp >= 1 && shape.tp >= 1 && shape.ep >= 1, "mesh sizes must be ≥ 1 (pp=",
              shape.pp, " dp=", shape.dp, " tp=", shape.tp, " ep=", shape.ep, ")");
  TETRA_CHECK(shape.dp % shape.ep == 0, "ep=", shape.ep, " must divide dp=", shape.dp);
  TETRA_CHECK(rank >= 0 && rank < shape.world(), "rank ", rank, " outside a world of ", shape.world());
  coords_ = coords_of(rank);
}

MeshCoords Mesh::coords_of(int rank) const {
  MeshCoords c;
  c.tp = rank % shape_.tp;
  c.dp = (rank / shape_.tp) % shape_.dp;
  c.pp = rank / (shape_.tp * shape_.dp);
  c.ep = c.dp % shape_.ep;
  c.edp = c.dp / shape_.ep;
  return c;
}

int Mesh::rank_of(int pp, int dp, int tp) const { return (pp * shape_.dp + dp) * shape_.tp + tp; }

std::vector<int> Mesh::group(MeshAxis axis, int rank) const {
  MeshCoords c = coords_of(rank);
  std::vector<int> g;
  switch (axis) {
    case MeshAxis::TP:
      for (int t = 0; t < shape_.tp; ++t) g.push_back(rank_of(c.pp, c.dp, t));
      break;
    case MeshAxis::DP:
      for (int d = 0; d < shape_.dp; ++d) g.push_back(rank_of(c.pp, d, c.tp));
      break;
    case MeshAxis::PP:
      for (int p = 0; p < shape_.pp; ++p) g.push_back(rank_of(p, c.dp, c.tp));
      break;
    case MeshAxis::EP:  // ep consecutive dp ranks
      for (int e = 0; e < shape_.ep; ++e) g.push_back(rank_of(c.pp, c.edp * shape_.ep + e, c.tp));
      break;
    case MeshAxis::ExpertDP:  // same position inside every expert group
      for (int k = 0; k < shape_.dp / shape_.ep; ++k) g.push_back(rank_of(c.pp, k * shape_.ep + c.ep, c.tp));
      break;
  }
  return g;
}

int Mesh::axis_size(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::TP: return shape_.tp;
    case MeshAxis::DP: return shape_.dp;
    case MeshAxis::PP: return shape_.pp;
    case MeshAxis::EP: return shape_.ep;
    case MeshAxis::ExpertDP: return shape_.dp / shape_.ep;
  }
  return 1;
}

std::string Mesh::describe_groups(int rank) const {
  std::ostringstream os;
  for (MeshAxis a : {MeshAxis::TP, MeshAxis::DP, MeshAxis::PP, MeshAxis::EP, MeshAxis::ExpertDP}) {
    auto g = group(a, rank);
    os << axis_name(a) << ": [";
    for (size_t i = 0; i < g.size(); ++i) os << (i ? ", " : "") << g[i];
    os << "]\n";
  }
  return os.str();
}

void Mesh::create_communicators(Communicator& world) {
  TETRA_CHECK(world.size() == shape_.world(), "mesh of ", shape_.world(), " ranks on a world of ", world.size());
  comms_.clear();
  for (MeshAxis a : {MeshAxis::TP, MeshAxis::DP, MeshAxis::PP, MeshAxis::EP, MeshAxis::ExpertDP}) {
    auto g = group(a, rank_);
    // color: the smallest rank of the group identifies it; key: position inside it.
    int key = 0;
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] == rank_) key = static_cast<int>(i);
    std::shared_ptr<Communicator> c = world.split(g.front(), key);
    std::ostringstream name;
    name << axis_name(a) << "[";
    for (size_t i = 0; i < g.size(); ++i) name << (i ? "," : "") << g[i];
    name << "]";
    c->set_name(name.str());
    c->set_timeout(world.timeout());
    comms_.push_back(std::move(c));
  }
}

void Mesh::create_device_communicators(Device device) {
  device_comms_.clear();
  device_ = device;
  if (!device.is_cuda()) return;
  TETRA_CHECK(!comms_.empty(), "create_communicators must come before create_device_communicators");
  for (auto& c : comms_) device_comms_.push_back(make_nccl_twin(c, device));
}

std::shared_ptr<Communicator> Mesh::device_twin(std::shared_ptr<Communicator> host, bool own_stream) const {
  if (!device_.is_cuda()) return host;
  return make_nccl_twin(host, device_, own_stream);
}

Mesh::Group Mesh::create_group(Communicator& world, const std::vector<int>& members, const std::string& name) {
  TETRA_CHECK(world.size() == shape_.world(), "mesh of ", shape_.world(), " ranks on a world of ", world.size());
  int key = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == rank_) key = static_cast<int>(i);
  TETRA_CHECK(key >= 0, "Mesh::create_group: rank ", rank_, " is not a member of its own group ", name);
  // color: the group's smallest rank identifies it.
  Group g;
  g.host = world.split(*std::min_element(members.begin(), members.end()), key);
  g.host->set_name(name + bracketed_text(members, ","));
  g.host->set_timeout(world.timeout());
  if (!device_comms_.empty()) g.device = device_twin(g.host);
  return g;
}

Communicator& Mesh::device_comm(MeshAxis axis) const {
  if (device_comms_.empty()) return comm(axis);
  return *device_comms_[static_cast<size_t>(axis)];
}

Communicator& Mesh::comm(MeshAxis axis) const {
  TETRA_CHECK(!comms_.empty(), "mesh communicators were not created");
  return *comms_[static_cast<size_t>(axis)];
}

}  // namespace tetra
