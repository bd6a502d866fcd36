#include "parallel/tensor/group.h"

namespace tetra {

TpGroup::TpGroup(Communicator& comm, CommScheduler& scheduler, bool overlap)
    : comm_(comm), scheduler_(scheduler), overlap_(overlap) {}

int64_t TpGroup::shard_rows(int64_t n_tokens, const char* what) const {
  if (n_tokens < 0 || n_tokens % size() != 0)
    TETRA_FAIL(Config, what, ": ", n_tokens, " tokens do not split into ", size(),
               " equal sequence-parallel shards (parallel.tp = ", size(),
               " must divide train.micro_batch × train.seq_len)");
  return n_tokens / size();
}

CommScheduler::Ticket TpGroup::exchange(const std::string& what, const std::vector<P2PTransfer>& ops) {
  int64_t bytes = 0;
  for (const P2PTransfer& op : ops)
    if (op.kind == P2PTransfer::Kind::Send) bytes += static_cast<int64_t>(op.tensor.nbytes());
  return issue(what, bytes, [&] { return comm_.batch_send_recv(ops); });
}

CommScheduler::Ticket TpGroup::issue(const std::string& what, int64_t bytes,
                                     const std::function<std::unique_ptr<Work>()>& launch) {
  return scheduler_.issue("tp " + what, bytes, launch, MeshAxis::TP);
}

}  // namespace tetra
