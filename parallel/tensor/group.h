// TpGroup: the tensor-parallel group as the tensor-parallel communication primitives see it
// (parallel/tensor/all_gather.h, tp_reduce_scatter.h, tp_linear.h; docs/tensor_parallel.md): its
// communicator, the CommScheduler that issues on the TP communication stream and measures how long
// compute waited (MeshAxis::TP), and whether the chunked exchanges overlap the GEMMs
// (parallel.tp_comm_overlap). Holds references: the communicator and scheduler outlive it.
//
// Sequence-parallel layout: activations are [N, C] with N tokens; shard r of a group of tp ranks
// is the contiguous block of rows [r·M, (r+1)·M), M = N / tp (N must divide by tp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/comm_scheduler.h"
#include "runtime/communicator.h"

namespace tetra {

class TpGroup {
 public:
  // `comm`: the tensor-parallel group for tensors on the compute device (Mesh::device_comm(
  // MeshAxis::TP): NCCL on GPUs, MPI on the CPU); `overlap`: parallel.tp_comm_overlap.
  TpGroup(Communicator& comm, CommScheduler& scheduler, bool overlap);

  int size() const { return comm_.size(); }
  int rank() const { return comm_.rank(); }
  bool overlap() const { return overlap_; }
  void set_overlap(bool on) { overlap_ = on; }
  Communicator& comm() const { return comm_; }
  CommScheduler& scheduler() const { return scheduler_; }

  // M = N / size() rows of one sequence-parallel shard of N tokens; fails (naming `what`) unless
  // size() divides N.
  int64_t shard_rows(int64_t n_tokens, const char* what) const;
  // Rows [chunk·M, (chunk+1)·M) of a 2-D tensor whose N rows hold size() chunks of M.
  static Tensor chunk(const Tensor& t, int chunk, int64_t m) { return t.narrow(chunk * m, m); }

  // The sends and receives of `ops` as one batch on the TP communication stream (named
  // "tp <what>" in the step's records), ordered after everything compute issued so far.
  CommScheduler::Ticket exchange(const std::string& what, const std::vector<P2PTransfer>& ops);
  // One collective on the TP communication stream; `bytes` counts what this rank sends.
  CommScheduler::Ticket issue(const std::string& what, int64_t bytes,
                              const std::function<std::unique_ptr<Work>()>& launch);
  void wait(CommScheduler::Ticket& t) { scheduler_.wait(t); }

  // (r + k) mod size(), for any integer k.
  int peer(int k) const { return ((rank() + k) % size() + size()) % size(); }

 private:
  Communicator& comm_;
  CommScheduler& scheduler_;
  bool overlap_;
};

}  // namespace tetra
