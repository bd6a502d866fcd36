// The process mesh (ARCHITECTURE.md §4): world = pp × dp × tp ranks, tp fastest, then dp, then pp,
// so tensor-parallel neighbours share a node's NVLink. Expert parallelism is carved out of data
// parallelism: within a dp group, ep consecutive dp ranks form an expert group (sharding the
// experts of each MoE layer); ranks holding the same experts form the expert-data group that
// reduces their gradients. This is the one place that knows who talks to whom.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"

namespace tetra {

struct MeshShape {
  int pp = 1, dp = 1, tp = 1, ep = 1;
  int world() const { return pp * dp * tp; }
};

struct MeshCoords {
  int pp = 0, dp = 0, tp = 0;
  int ep = 0;   // index inside the expert group (dp mod ep)
  int edp = 0;  // index inside the expert-data group (dp div ep)
};

enum class MeshAxis { TP, DP, PP, EP, ExpertDP };
inline constexpr MeshAxis kMeshAxes[] = {MeshAxis::TP, MeshAxis::DP, MeshAxis::PP, MeshAxis::EP, MeshAxis::ExpertDP};
const char* axis_name(MeshAxis a);

class Mesh {
 public:
  // Topology only (for `tetra plan` and tests): checks that the shape is consistent.
  Mesh(MeshShape shape, int rank);

  const MeshShape& shape() const { return shape_; }
  int rank() const { return rank_; }
  const MeshCoords& coords() const { return coords_; }
  MeshCoords coords_of(int rank) const;
  int rank_of(int pp, int dp, int tp) const;
  // The ranks of `rank`'s group along an axis, in group order.
  std::vector<int> group(MeshAxis axis, int rank) const;
  std::vector<int> group(MeshAxis axis) const { return group(axis, rank_); }
  int axis_size(MeshAxis axis) const;  // ranks in a group of `axis`
  std::string describe_groups(int rank) const;  // one line per axis, e.g. "dp: [0, 2, 4, 6]"

  // Builds one communicator per axis by splitting `world` (collective over all ranks).
  void create_communicators(Communicator& world);
  // On a GPU: one NCCL communicator per axis on `device`, bootstrapped over the MPI ones.
  void create_device_communicators(Device device);
  // The host (MPI) communicator of an axis.
  Communicator& comm(MeshAxis axis) const;
  // The communicator for tensors on the compute device: NCCL where created, else the MPI one.
  Communicator& device_comm(MeshAxis axis) const;
  bool has_communicators() const { return !comms_.empty(); }

  // A group a strategy needs besides the axes (ARCHITECTURE.md §4): the ranks holding copies of
  // the same pipeline stages (DualPipe's pairs, with their data-parallel replicas), of a tied weight
  // (the first and last stage), of a tp-replicated block; parallel/mesh_groups.h makes those a rank
  // joins. Collective over every rank of `world`: each passes the members (world ranks, in group
  // order) of the group it belongs to. Holds the host (MPI) communicator and, where device
  // communicators exist, its NCCL twin.
  struct Group {
    std::shared_ptr<Communicator> host, device;
    Communicator& on_device() const { return device ? *device : *host; }
  };
  Group create_group(Communicator& world, const std::vector<int>& members, const std::string& name);
  // The device (NCCL) twin of a host communicator over some of this mesh's ranks, on the device of
  // create_device_communicators (the host communicator itself when there is none). own_stream:
  // its operations go on a stream of their own (a pipeline channel, whose sends must not hold up
  // another channel), else on the caller's current stream.
  std::shared_ptr<Communicator> device_twin(std::shared_ptr<Communicator> host, bool own_stream = false) const;

 private:
  MeshShape shape_;
  int rank_;
  MeshCoords coords_;
  std::vector<std::shared_ptr<Communicator>> comms_;         // MPI, indexed by MeshAxis
  std::vector<std::shared_ptr<Communicator>> device_comms_;  // NCCL, indexed by MeshAxis (or empty)
  Device device_ = Device::cpu();                            // of the device communicators
};

}  // namespace tetra
