// The point-to-point channels of one pipeline rank (docs/pipeline.md "Transfers"): a transfer goes
// on the channel of (peer, payload, direction), which delivers its messages in the order they
// were posted — check_schedule verifies that both ends of every channel post them in the same
// order. Sends are left in flight (they never hold their rank up); a receive completes when its
// data is there. Peers are pipeline ranks (0 … pp − 1).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "parallel/pipeline/schedule.h"
#include "runtime/communicator.h"

namespace tetra {

class PipelineTransport {
 public:
  virtual ~PipelineTransport() = default;
  virtual std::unique_ptr<Work> send(const Tensor& t, int peer, Payload payload) = 0;
  virtual std::unique_ptr<Work> recv(Tensor& t, int peer, Payload payload) = 0;
};

// Every channel on one communicator of the pipeline ranks (its rank r is pipeline rank r), told
// apart by the message tag: MPI keeps the messages of one (source, tag) in order, and an MPI send
// completes on its own (the CPU backend).
std::unique_ptr<PipelineTransport> tagged_transport(Communicator& pp);

// One communicator per channel this rank uses (a schedule's transfers decide which), each made by
// `make_channel` from a two-rank split of `pp` (collective over every rank of `pp`, which all
// pass the same schedule): rank 0 of a channel is its sender. On GPUs each is an NCCL
// communicator on a stream of its own, so a send waiting for its receive holds up no other
// channel.
using ChannelFactory = std::function<std::shared_ptr<Communicator>(std::shared_ptr<Communicator> two_ranks)>;
std::unique_ptr<PipelineTransport> channel_transport(Communicator& pp, const Schedule& schedule,
                                                     const ChannelFactory& make_channel);

}  // namespace tetra
