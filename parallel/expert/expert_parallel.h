// ExpertParallel: what a mixture-of-experts layer needs from its expert-parallel group
// (ARCHITECTURE.md §4, docs/moe.md): rank e of the group holds experts [e·E/ep, (e+1)·E/ep); each
// rank routes its own tokens and sends every routed row to the rank holding its expert (dispatch),
// and the experts' outputs come back the same way (combine). Both are all-to-all(v) exchanges of
// rows on the EP communication stream, issued through the CommScheduler and waited for only where
// their result is needed, so another micro-batch can compute meanwhile (models/layer_pass.h).
//
// Row layouts, for E experts, El = E/ep per rank, d channels:
//   send side   [R_send, d]: this rank's routed rows grouped by expert 0..E-1 (moe_permute_map's
//               order), so the rows for rank r are one block: experts [r·El, (r+1)·El)
//   recv side   [R_recv, d]: from each source rank s in order, its rows for this rank's El experts,
//               grouped by expert ("source-major")
//   expert side [R_recv, d]: the same rows grouped by local expert, then source rank ("expert-
//               major"), what the grouped GEMMs read; ExchangePlan's gathers convert between the two.
// Token counts are exchanged first (a small all-to-all) and read on the host, which sizes the row
// exchange: one host synchronisation per layer and micro-batch (docs/moe.md says what that costs).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm_scheduler.h"
#include "runtime/communicator.h"
#include "runtime/host_readback.h"

namespace tetra {

class ExpertParallel {
 public:
  // `comm`: the expert-parallel group for device tensors (Mesh::device_comm(MeshAxis::EP));
  // `scheduler`: the device's CommScheduler. Both outlive this object. n_experts % size() == 0.
  ExpertParallel(Communicator& comm, CommScheduler& scheduler, int64_t n_experts);

  int size() const { return comm_.size(); }
  int rank() const { return comm_.rank(); }
  int64_t experts() const { return experts_; }
  int64_t local_experts() const { return experts_ / comm_.size(); }
  int64_t first_expert() const { return rank() * local_experts(); }
  Communicator& comm() const { return comm_; }

  // How one micro-batch's rows move in one MoE layer, from the counts exchange.
  struct ExchangePlan {
    std::vector<int64_t> send_rows, recv_rows;  // rows to / from each rank of the group
    int64_t recv_total = 0;                     // R_recv
    // int32 on the device: to_expert [R_recv] gathers source-major rows into expert-major order
    // (expert[i] = recv[to_expert[i]]), to_source [R_recv] the inverse; offsets [El + 1] of the
    // local experts' row blocks in expert-major order.
    Tensor to_expert, to_source, offsets;
    std::vector<int64_t> expert_rows;           // rows per local expert (host), for the metrics
  };

  // This group's collectives run on the EP communication stream and are recorded under MeshAxis::EP
  // (CommScheduler::exposed_ms(MeshAxis::EP) is the exposed expert-parallel communication), named
  // kRecordPrefix + `what`.
  static constexpr const char* kRecordPrefix = "ep ";

  // Issues the counts exchange: counts int32 [E] (this rank's routed rows per expert, on the device)
  // → recv int32 [size(), El] (each source rank's rows for this rank's experts).
  CommScheduler::Ticket issue_counts(Tensor& recv, const Tensor& counts, const std::string& what);
  // After the counts exchange was waited for: reads both counts on the host (the host waits for
  // them, not for the rest of the device's queue) and builds the plan's sizes and device indices.
  ExchangePlan plan(const Tensor& counts, const Tensor& recv, Device device);

  // Issues the all-to-all of rows [*, d]: send_rows[r] rows of `in` (consecutive blocks in rank
  // order) to rank r, recv_rows[r] rows from rank r into `out` (consecutive blocks).
  CommScheduler::Ticket issue_rows(Tensor& out, const std::vector<int64_t>& recv_rows, const Tensor& in,
                                   const std::vector<int64_t>& send_rows, const std::string& what);
  void wait(CommScheduler::Ticket& t) { scheduler_.wait(t); }

 private:
  Communicator& comm_;
  CommScheduler& scheduler_;
  int64_t experts_;
  std::unique_ptr<CountsReadback> readback_;  // both counts of one layer and micro-batch
};

}  // namespace tetra
