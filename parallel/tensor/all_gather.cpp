#include "parallel/tensor/all_gather.h"

#include <string>
#include <vector>

#include "runtime/ops.h"

namespace tetra::tp {

namespace {

// Checks gathered [N, K] against shard [M, K]; returns M.
int64_t check_gather(const TpGroup& g, const Tensor& gathered, const Tensor& shard, const char* what) {
  if (shard.ndim() != 2 || gathered.ndim() != 2 || gathered.dim(1) != shard.dim(1) ||
      gathered.dim(0) != shard.dim(0) * g.size() || gathered.dtype() != shard.dtype())
    TETRA_FAIL(Internal, "tp ", what, ": gathered must be [", g.size(), "·M, K] of the shard [M, K] (same dtype), got ",
               gathered.describe(), " and shard ", shard.describe());
  check_disjoint(what, "shard", gathered, shard);
  return shard.dim(0);
}

}  // namespace

void all_gather_then(TpGroup& g, Tensor& gathered, const Tensor& shard, const ChunkConsumer& consume,
                     const char* what) {
  const int64_t m = check_gather(g, gathered, shard, what);
  const int tp = g.size(), r = g.rank();
  if (tp == 1) {
    ops::copy(gathered, shard);
    if (consume) consume(0, gathered);
    return;
  }
  if (!g.overlap() || !consume) {
    CommScheduler::Ticket t = g.issue(std::string(what) + " all_gather", static_cast<int64_t>(shard.nbytes()),
                                      [&] { return g.comm().all_gather(gathered, shard); });
    g.wait(t);
    if (consume)
      for (int s = 0; s < tp; ++s) consume(g.peer(-s), TpGroup::chunk(gathered, g.peer(-s), m));
    return;
  }
  // The ring: own shard into place, then step s forwards chunk r−s+1 and receives chunk r−s.
  Tensor own = TpGroup::chunk(gathered, r, m);
  ops::copy(own, shard);
  std::optional<CommScheduler::Ticket> step;
  for (int s = 1; s < tp; ++s) {
    // Step s sends what step s−1 received: on the GPU the stream orders it, on the CPU the host
    // waited for it (the previous iteration's wait).
    const std::vector<P2PTransfer> ops = {P2PTransfer::send(TpGroup::chunk(gathered, g.peer(1 - s), m), g.peer(1)),
                                          P2PTransfer::recv(TpGroup::chunk(gathered, g.peer(-s), m), g.peer(-1))};
    step = g.exchange(std::string(what) + " ring " + std::to_string(s) + "/" + std::to_string(tp - 1), ops);
    consume(g.peer(1 - s), TpGroup::chunk(gathered, g.peer(1 - s), m));
    g.wait(*step);
  }
  consume(g.peer(1 - tp), TpGroup::chunk(gathered, g.peer(1 - tp), m));
}

void all_gather_rows(TpGroup& g, Tensor& gathered, const Tensor& shard) {
  all_gather_then(g, gathered, shard, {}, "all_gather_rows");
}

PendingAllGather PendingAllGather::start(TpGroup& g, Tensor& gathered, const Tensor& shard) {
  check_gather(g, gathered, shard, "all_gather_rows");
  PendingAllGather p;
  p.g_ = &g;
  if (g.size() == 1) {
    ops::copy(gathered, shard);
    return p;
  }
  p.ticket_ = g.issue("all_gather_rows (async)", static_cast<int64_t>(shard.nbytes()),
                      [&] { return g.comm().all_gather(gathered, shard); });
  return p;
}

void PendingAllGather::wait() {
  if (ticket_ && !ticket_->done()) g_->wait(*ticket_);
}

}  // namespace tetra::tp
