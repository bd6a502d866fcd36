#include "parallel/pipeline/transport.h"

#include <set>

#include "runtime/error.h"

namespace tetra {

namespace {

class TaggedTransport : public PipelineTransport {
 public:
  explicit TaggedTransport(Communicator& pp) : pp_(pp) {}
  std::unique_ptr<Work> send(const Tensor& t, int peer, Payload payload) override {
    return pp_.send(t, peer, static_cast<int>(payload));
  }
  std::unique_ptr<Work> recv(Tensor& t, int peer, Payload payload) override {
    return pp_.recv(t, peer, static_cast<int>(payload));
  }

 private:
  Communicator& pp_;
};

using Channel = std::tuple<int, int, int>;  // from, to, payload

class ChannelTransport : public PipelineTransport {
 public:
  ChannelTransport(int rank, std::map<Channel, std::shared_ptr<Communicator>> channels)
      : rank_(rank), channels_(std::move(channels)) {}
  // Rank 0 of every channel's communicator is its sender, rank 1 its receiver.
  std::unique_ptr<Work> send(const Tensor& t, int peer, Payload payload) override {
    return channel(rank_, peer, payload).send(t, 1);
  }
  std::unique_ptr<Work> recv(Tensor& t, int peer, Payload payload) override {
    return channel(peer, rank_, payload).recv(t, 0);
  }

 private:
  Communicator& channel(int from, int to, Payload payload) {
    auto it = channels_.find({from, to, static_cast<int>(payload)});
    TETRA_CHECK(it != channels_.end(), "no pipeline channel from rank ", from, " to rank ", to, " for ",
                payload == Payload::Activation ? "activations" : "gradients");
    return *it->second;
  }
  int rank_;
  std::map<Channel, std::shared_ptr<Communicator>> channels_;
};

}  // namespace

std::unique_ptr<PipelineTransport> tagged_transport(Communicator& pp) { return std::make_unique<TaggedTransport>(pp); }

std::unique_ptr<PipelineTransport> channel_transport(Communicator& pp, const Schedule& schedule,
                                                     const ChannelFactory& make_channel) {
  TETRA_CHECK(pp.size() == schedule.layout.ranks(), "pipeline communicator of ", pp.size(), " ranks for a schedule of ",
              schedule.layout.ranks());
  // Every channel of the schedule, in one order on every rank (the splits are collective).
  std::set<Channel> all;
  for (int r = 0; r < schedule.layout.ranks(); ++r)
    for (const Instruction& op : schedule.ranks[static_cast<size_t>(r)])
      for (const P2POp& p : op.p2p)
        if (p.send) all.insert({r, p.peer, static_cast<int>(p.payload)});
  const int me = pp.rank();
  std::map<Channel, std::shared_ptr<Communicator>> mine;
  int index = 0;
  for (const Channel& c : all) {
    const auto [from, to, payload] = c;
    const bool member = me == from || me == to;
    // Members share the channel's color; every other rank splits off alone.
    const int color = member ? index : static_cast<int>(all.size()) + me;
    std::shared_ptr<Communicator> two = pp.split(color, me == from ? 0 : 1);
    if (member) {
      two->set_name(pp.name() + (payload == static_cast<int>(Payload::Activation) ? ".act[" : ".grad[") +
                    std::to_string(from) + ">" + std::to_string(to) + "]");
      two->set_timeout(pp.timeout());
      mine[c] = make_channel(std::move(two));
    }
    ++index;
  }
  return std::make_unique<ChannelTransport>(me, std::move(mine));
}

}  // namespace tetra
