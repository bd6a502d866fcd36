#include "parallel/pipeline/executor.h"

#include <string>

#include "runtime/error.h"
#include "runtime/nvtx.h"
#include "runtime/trace.h"

namespace tetra {

PipelineExecutor::PipelineExecutor(const Schedule& schedule, int rank, PipelineTransport* transport,
                                   CommScheduler* scheduler)
    : schedule_(schedule), rank_(rank), transport_(transport), scheduler_(scheduler) {
  TETRA_CHECK(rank >= 0 && rank < schedule.layout.ranks(), "pipeline rank ", rank, " of ", schedule.layout.ranks());
  const std::vector<Instruction>& ops = schedule_.ranks[static_cast<size_t>(rank)];
  last_weight_.assign(static_cast<size_t>(schedule_.layout.chunks()), -1);
  bool transfers = false;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const Instruction& op = ops[static_cast<size_t>(i)];
    if (op.type == OpType::B || op.type == OpType::W || op.type == OpType::FB)
      last_weight_[static_cast<size_t>(op.b.chunk)] = i;
    transfers = transfers || op.type == OpType::P2P;
  }
  TETRA_CHECK(!transfers || (transport_ && scheduler_), "pipeline rank ", rank, " of schedule ", schedule.name,
              " sends and receives, but the executor has no transport");
}

Tensor PipelineExecutor::take(const Key& k, const char* what) {
  auto it = ready_.find(k);
  TETRA_CHECK(it != ready_.end(), "pipeline rank ", rank_, " of ", schedule_.name, ": the ", what, " of flow ",
              std::get<1>(k), " stage ", std::get<2>(k), " micro-batch ", std::get<3>(k),
              " is not here (neither received nor produced on this rank)");
  Tensor t = std::move(it->second);
  ready_.erase(it);
  return t;
}

void PipelineExecutor::put(const Key& k, Tensor t) {
  TETRA_CHECK(t.defined(), "pipeline rank ", rank_, ": a stage returned no tensor to pass on");
  const bool fresh = ready_.emplace(k, std::move(t)).second;
  TETRA_CHECK(fresh, "pipeline rank ", rank_, ": stage ", std::get<2>(k), " micro-batch ", std::get<3>(k),
              " produced twice");
}

void PipelineExecutor::run_p2p(const Instruction& op) {
  const PipelineLayout& l = schedule_.layout;
  struct Receive {
    CommScheduler::Ticket ticket;
    Key key;
    Tensor buffer;
  };
  std::vector<Receive> receives;
  receives.reserve(op.p2p.size());
  for (const P2POp& p : op.p2p) {
    const Key k = key_of(p.payload, p.flow, p.stage, p.mb);
    const std::string what = std::string(p.payload == Payload::Activation ? "act" : "grad") + " s" +
                             std::to_string(p.stage) + " m" + std::to_string(p.mb);
    if (p.send) {
      Tensor t = take(k, p.payload == Payload::Activation ? "output" : "input gradient");
      InFlight f;
      f.ticket = scheduler_->issue("pp send " + what + " > " + std::to_string(p.peer),
                                   static_cast<int64_t>(t.nbytes()),
                                   [&] { return transport_->send(t, p.peer, p.payload); });
      f.tensor = std::move(t);
      sends_.push_back(std::move(f));
    } else {
      // The chunk here that consumes it: the next stage of an activation, the previous of a gradient.
      const int consumer = p.payload == Payload::Activation ? p.stage + 1 : p.stage - 1;
      receives.push_back({CommScheduler::Ticket(), k, Tensor()});
      Receive& back = receives.back();
      back.buffer = compute_->boundary_buffer(l.slot(p.flow, consumer).chunk, p.mb);
      back.ticket = scheduler_->issue("pp recv " + what + " < " + std::to_string(p.peer),
                                      static_cast<int64_t>(back.buffer.nbytes()),
                                      [&] { return transport_->recv(back.buffer, p.peer, p.payload); });
    }
  }
  // Posted together, waited for together: compute goes on once every receive of the batch is here.
  for (Receive& r : receives) {
    scheduler_->wait(r.ticket);
    put(r.key, std::move(r.buffer));
  }
}

void PipelineExecutor::run(PipelineCompute& compute) {
  const PipelineLayout& l = schedule_.layout;
  const int last_stage = l.stages() - 1;
  const std::vector<Instruction>& ops = schedule_.ranks[static_cast<size_t>(rank_)];
  compute_ = &compute;
  ready_.clear();
  sends_.clear();
  // The input of a forward and the output gradient of a backward, from wherever they came.
  auto input_of = [&](const ChunkMb& x) {
    const int flow = l.flow_of_chunk(x.chunk), s = l.stage_of(rank_, x.chunk);
    return s == 0 ? Tensor() : take(key_of(Payload::Activation, flow, s - 1, x.mb), "input");
  };
  auto grad_of = [&](const ChunkMb& x) {
    const int flow = l.flow_of_chunk(x.chunk), s = l.stage_of(rank_, x.chunk);
    return s == last_stage ? Tensor() : take(key_of(Payload::Gradient, flow, s + 1, x.mb), "output gradient");
  };
  auto keep_output = [&](const ChunkMb& x, Tensor y) {
    const int flow = l.flow_of_chunk(x.chunk), s = l.stage_of(rank_, x.chunk);
    if (s < last_stage) put(key_of(Payload::Activation, flow, s, x.mb), std::move(y));
  };
  auto keep_input_grad = [&](const ChunkMb& x, Tensor dx) {
    const int flow = l.flow_of_chunk(x.chunk), s = l.stage_of(rank_, x.chunk);
    if (s > 0) put(key_of(Payload::Gradient, flow, s, x.mb), std::move(dx));
  };
  const bool tracing = Tracer::instance().enabled(), ranges = nvtx::enabled();
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const Instruction& op = ops[static_cast<size_t>(i)];
    const bool last = op.has_backward() && last_weight_[static_cast<size_t>(op.b.chunk)] == i;
    // Traced steps show every instruction of the rank's list (ARCHITECTURE.md §5 trace.json), and
    // so does Nsight Systems under the same names.
    const std::string name = tracing || ranges ? to_string(op) : std::string();
    TraceScope scope(name.c_str(), "pipeline");
    nvtx::Range range(ranges ? name.c_str() : nullptr);
    switch (op.type) {
      case OpType::P2P: run_p2p(op); break;
      case OpType::F: keep_output(op.f, compute.forward(op.f.chunk, op.f.mb, input_of(op.f))); break;
      case OpType::B:
      case OpType::BInput: {
        const bool weights = op.type == OpType::B;
        keep_input_grad(op.b, compute.backward(op.b.chunk, op.b.mb, grad_of(op.b), weights, weights && last));
        break;
      }
      case OpType::W: compute.weight(op.b.chunk, op.b.mb, last_weight_[static_cast<size_t>(op.b.chunk)] == i); break;
      case OpType::FB: {
        Tensor in = input_of(op.f), dy = grad_of(op.b);
        auto [y, dx] = compute.forward_backward(op.f.chunk, op.f.mb, in, op.b.chunk, op.b.mb, dy, last);
        keep_output(op.f, std::move(y));
        keep_input_grad(op.b, std::move(dx));
        break;
      }
    }
  }
  for (InFlight& f : sends_) scheduler_->wait(f.ticket);
  sends_.clear();
  compute_ = nullptr;
  TETRA_CHECK(ready_.empty(), "pipeline rank ", rank_, " of ", schedule_.name, ": ", ready_.size(),
              " tensors were produced or received but never used");
}

}  // namespace tetra
