#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "runtime/error.h"
#include "runtime/text_join.h"

namespace tetra {

PipelineLayout PipelineLayout::for_schedule(const std::string& schedule, int pp, int micro_batches) {
  TETRA_CHECK(pp >= 1 && micro_batches >= 1, "pp ", pp, ", micro-batches ", micro_batches);
  PipelineLayout l;
  l.ranks_ = pp;
  l.micro_batches_ = micro_batches;
  auto one_flow = [&](int chunks, int stages, auto slot_of_stage) {
    l.chunks_ = chunks;
    l.stages_ = stages;
    l.flows_.assign(1, {});
    l.stage_of_.assign(static_cast<size_t>(pp), std::vector<int>(static_cast<size_t>(chunks), 0));
    for (int s = 0; s < stages; ++s) {
      StageSlot slot = slot_of_stage(s);
      l.flows_[0].push_back(slot);
      l.stage_of_[static_cast<size_t>(slot.rank)][static_cast<size_t>(slot.chunk)] = s;
    }
  };
  if (pp == 1) {
    one_flow(1, 1, [](int) { return StageSlot{0, 0}; });
  } else if (schedule == "gpipe" || schedule == "1f1b" || schedule == "zb_h1") {
    one_flow(1, pp, [](int s) { return StageSlot{s, 0}; });
  } else if (schedule == "interleaved_1f1b") {
    // Virtual stages round-robin over the ranks: chunk c of rank r is stage c·pp + r.
    one_flow(2, 2 * pp, [pp](int s) { return StageSlot{s % pp, s / pp}; });
  } else if (schedule == "dualpipev") {
    // The V: down the ranks with chunk 0, back up with chunk 1; rank 0 holds the first and last stage.
    one_flow(2, 2 * pp, [pp](int s) { return s < pp ? StageSlot{s, 0} : StageSlot{2 * pp - 1 - s, 1}; });
  } else if (schedule == "dualpipe") {
    // pp stages, two copies: flow 0 runs stage s on rank s (chunk 0), flow 1 on rank pp−1−s (chunk 1).
    TETRA_CHECK(micro_batches % 2 == 0, "dualpipe splits the micro-batches over two flows: ", micro_batches);
    l.chunks_ = 2;
    l.stages_ = pp;
    l.flows_.assign(2, {});
    l.stage_of_.assign(static_cast<size_t>(pp), std::vector<int>(2, 0));
    for (int s = 0; s < pp; ++s) {
      l.flows_[0].push_back({s, 0});
      l.flows_[1].push_back({pp - 1 - s, 1});
      l.stage_of_[static_cast<size_t>(s)][0] = s;
      l.stage_of_[static_cast<size_t>(pp - 1 - s)][1] = s;
    }
  } else {
    TETRA_FAIL(Usage, "unknown pipeline schedule \"", schedule,
               "\" (valid: gpipe, 1f1b, interleaved_1f1b, zb_h1, dualpipe, dualpipev)");
  }
  return l;
}

namespace {

std::string mb_text(const ChunkMb& x) { return std::to_string(x.chunk) + "." + std::to_string(x.mb); }

std::string p2p_text(const P2POp& p) {
  return std::string(p.send ? "send " : "recv ") + (p.payload == Payload::Activation ? "act" : "grad") + " f" +
         std::to_string(p.flow) + ".s" + std::to_string(p.stage) + ".m" + std::to_string(p.mb) +
         (p.send ? " >" : " <") + std::to_string(p.peer);
}

// Reads "<c>.<m>" at text[pos…], advancing pos; false when it is not there.
bool read_chunk_mb(const std::string& text, size_t& pos, ChunkMb& out) {
  int c = 0, m = 0, used = 0;
  if (std::sscanf(text.c_str() + pos, "%d.%d%n", &c, &m, &used) != 2 || c < 0 || m < 0) return false;
  if (text[pos] < '0' || text[pos] > '9') return false;  // sscanf skips spaces and signs
  out = {c, m};
  pos += static_cast<size_t>(used);
  return true;
}

}  // namespace

std::string to_string(const Instruction& op) {
  switch (op.type) {
    case OpType::F: return "F" + mb_text(op.f);
    case OpType::B: return "B" + mb_text(op.b);
    case OpType::BInput: return "B" + mb_text(op.b) + "w";
    case OpType::W: return "W" + mb_text(op.b);
    case OpType::FB: return "FB(F" + mb_text(op.f) + ",B" + mb_text(op.b) + ")";
    case OpType::P2P: {
      return "P2P" + bracketed_text(op.p2p, ", ", p2p_text);
    }
  }
  return "?";
}

Instruction parse_instruction(const std::string& text) {
  size_t pos = 0;
  Instruction op;
  bool ok = false;
  if (text.rfind("FB(F", 0) == 0) {
    pos = 4;
    ok = read_chunk_mb(text, pos, op.f) && text.compare(pos, 2, ",B") == 0 && read_chunk_mb(text, pos += 2, op.b) &&
         text.compare(pos, 1, ")") == 0 && ++pos == text.size();
    op.type = OpType::FB;
  } else if (!text.empty() && (text[0] == 'F' || text[0] == 'B' || text[0] == 'W')) {
    pos = 1;
    ChunkMb x;
    ok = read_chunk_mb(text, pos, x);
    if (text[0] == 'F') {
      op = Instruction::forward(x.chunk, x.mb);
    } else if (text[0] == 'W') {
      op = Instruction::weight(x.chunk, x.mb);
    } else if (pos < text.size() && text[pos] == 'w') {
      op = Instruction::backward_input(x.chunk, x.mb);
      ++pos;
    } else {
      op = Instruction::backward(x.chunk, x.mb);
    }
    ok = ok && pos == text.size();
  }
  if (!ok)
    TETRA_FAIL(Usage, "\"", text, "\" is not a pipeline instruction (F<c>.<m>, B<c>.<m>, B<c>.<m>w, W<c>.<m> or ",
               "FB(F<c>.<m>,B<c>.<m>))");
  return op;
}

std::vector<std::string> Schedule::compute_ops(int rank) const {
  std::vector<std::string> out;
  for (const Instruction& op : ranks[static_cast<size_t>(rank)])
    if (op.is_compute()) out.push_back(to_string(op));
  return out;
}

namespace {

// The transfers one compute instruction of `rank` needs before it runs (recv) or leaves behind (send).
void transfers(const PipelineLayout& l, int rank, const Instruction& op, bool sends, std::vector<P2POp>& out) {
  const int last = l.stages() - 1;
  if (op.has_forward()) {
    const int flow = l.flow_of_chunk(op.f.chunk), s = l.stage_of(rank, op.f.chunk);
    if (!sends && s > 0 && l.slot(flow, s - 1).rank != rank)
      out.push_back({false, l.slot(flow, s - 1).rank, Payload::Activation, flow, s - 1, op.f.mb});
    if (sends && s < last && l.slot(flow, s + 1).rank != rank)
      out.push_back({true, l.slot(flow, s + 1).rank, Payload::Activation, flow, s, op.f.mb});
  }
  if (op.has_backward()) {
    const int flow = l.flow_of_chunk(op.b.chunk), s = l.stage_of(rank, op.b.chunk);
    if (!sends && s < last && l.slot(flow, s + 1).rank != rank)
      out.push_back({false, l.slot(flow, s + 1).rank, Payload::Gradient, flow, s + 1, op.b.mb});
    if (sends && s > 0 && l.slot(flow, s - 1).rank != rank)
      out.push_back({true, l.slot(flow, s - 1).rank, Payload::Gradient, flow, s, op.b.mb});
  }
}

}  // namespace

void add_p2p(Schedule& schedule) {
  const PipelineLayout& l = schedule.layout;
  auto order = [](const P2POp& a, const P2POp& b) {
    return std::make_tuple(!a.send, a.payload, a.flow, a.stage, a.mb) <
           std::make_tuple(!b.send, b.payload, b.flow, b.stage, b.mb);
  };
  for (int r = 0; r < l.ranks(); ++r) {
    std::vector<Instruction> out;
    std::vector<P2POp> pending;  // sends of the previous compute instruction
    for (const Instruction& op : schedule.ranks[static_cast<size_t>(r)]) {
      if (!op.is_compute()) continue;  // re-inserted from scratch
      transfers(l, r, op, /*sends=*/false, pending);
      if (!pending.empty()) {
        std::sort(pending.begin(), pending.end(), order);
        out.push_back({OpType::P2P, {}, {}, std::move(pending)});
        pending.clear();
      }
      out.push_back(op);
      transfers(l, r, op, /*sends=*/true, pending);
    }
    if (!pending.empty()) {
      std::sort(pending.begin(), pending.end(), order);
      out.push_back({OpType::P2P, {}, {}, std::move(pending)});
    }
    schedule.ranks[static_cast<size_t>(r)] = std::move(out);
  }
}

namespace {

using MessageKey = std::tuple<int, int, int, int>;  // payload, flow, producing stage, micro-batch
MessageKey message_key(const P2POp& p) { return {static_cast<int>(p.payload), p.flow, p.stage, p.mb}; }

std::string message_text(const MessageKey& k) {
  return std::string(std::get<0>(k) == static_cast<int>(Payload::Activation) ? "act" : "grad") + " f" +
         std::to_string(std::get<1>(k)) + ".s" + std::to_string(std::get<2>(k)) + ".m" + std::to_string(std::get<3>(k));
}

// The transfers of a schedule with P2P batches: each at both ends, receives before their consumer,
// sends after their producer, and one payload between two ranks in the same order at both ends.
void check_transfers(const Schedule& schedule, std::vector<std::string>& problems) {
  const PipelineLayout& l = schedule.layout;
  // (from, to, payload) → messages in posting order, as sent and as received.
  std::map<std::tuple<int, int, int>, std::vector<MessageKey>> sent, received;
  for (int r = 0; r < l.ranks(); ++r) {
    const std::vector<Instruction>& ops = schedule.ranks[static_cast<size_t>(r)];
    const std::string where = "rank " + std::to_string(r) + ": ";
    // What the compute instructions need and leave, with their positions.
    std::map<MessageKey, int> needed, produced, recv_at, send_at;
    std::vector<P2POp> io;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Instruction& op = ops[static_cast<size_t>(i)];
      if (!op.is_compute()) {
        for (const P2POp& p : op.p2p) {
          auto& at = p.send ? send_at : recv_at;
          if (!at.emplace(message_key(p), i).second)
            problems.push_back(where + "posts " + p2p_text(p) + " twice");
          (p.send ? sent[{r, p.peer, static_cast<int>(p.payload)}] : received[{p.peer, r, static_cast<int>(p.payload)}])
              .push_back(message_key(p));
        }
        continue;
      }
      io.clear();
      transfers(l, r, op, /*sends=*/false, io);
      for (const P2POp& p : io) needed[message_key(p)] = i;
      io.clear();
      transfers(l, r, op, /*sends=*/true, io);
      for (const P2POp& p : io) produced[message_key(p)] = i;
    }
    for (const auto& [k, i] : needed) {
      auto it = recv_at.find(k);
      if (it == recv_at.end()) problems.push_back(where + to_string(ops[static_cast<size_t>(i)]) + " has no receive of " + message_text(k));
      else if (it->second > i) problems.push_back(where + "receives " + message_text(k) + " after its consumer " + to_string(ops[static_cast<size_t>(i)]));
    }
    for (const auto& [k, i] : produced) {
      auto it = send_at.find(k);
      if (it == send_at.end()) problems.push_back(where + to_string(ops[static_cast<size_t>(i)]) + " sends no " + message_text(k));
      else if (it->second < i) problems.push_back(where + "sends " + message_text(k) + " before its producer " + to_string(ops[static_cast<size_t>(i)]));
    }
    for (const auto& [k, i] : recv_at)
      if (!needed.count(k)) problems.push_back(where + "receives " + message_text(k) + " that no instruction of it uses");
    for (const auto& [k, i] : send_at)
      if (!produced.count(k)) problems.push_back(where + "sends " + message_text(k) + " that no instruction of it produces");
  }
  for (const auto& [pair, messages] : sent) {
    const auto it = received.find(pair);
    const std::string ends = "from rank " + std::to_string(std::get<0>(pair)) + " to rank " + std::to_string(std::get<1>(pair));
    if (it == received.end() || it->second != messages)
      problems.push_back(std::string(std::get<2>(pair) == static_cast<int>(Payload::Activation) ? "activations " : "gradients ") +
                         ends + " are not received in the order they are sent (or not all)");
  }
  for (const auto& [pair, messages] : received)
    if (!sent.count(pair))
      problems.push_back("rank " + std::to_string(std::get<1>(pair)) + " receives from rank " +
                         std::to_string(std::get<0>(pair)) + " what that rank never sends");
}

}  // namespace

std::vector<std::string> check_schedule(const Schedule& schedule) {
  const PipelineLayout& l = schedule.layout;
  std::vector<std::string> problems;
  bool has_p2p = false;
  for (const auto& ops : schedule.ranks)
    for (const Instruction& op : ops) has_p2p = has_p2p || op.type == OpType::P2P;
  if (has_p2p) check_transfers(schedule, problems);
  const bool forward_only = schedule.forward_only;
  for (int r = 0; r < l.ranks(); ++r) {
    const std::vector<Instruction>& ops = schedule.ranks[static_cast<size_t>(r)];
    const size_t n = static_cast<size_t>(l.chunks()) * static_cast<size_t>(l.flow_micro_batches());
    // Position in the list of each piece of every (chunk, micro-batch); −1 where absent.
    std::vector<int> f_at(n, -1), b_at(n, -1), bi_at(n, -1), w_at(n, -1);
    const std::string where = "rank " + std::to_string(r) + ": ";
    auto note = [&](std::vector<int>& at, const ChunkMb& x, int i, const Instruction& op) {
      if (x.chunk < 0 || x.chunk >= l.chunks() || x.mb < 0 || x.mb >= l.flow_micro_batches()) {
        problems.push_back(where + to_string(op) + " names a chunk or micro-batch outside " +
                           std::to_string(l.chunks()) + " chunks × " + std::to_string(l.flow_micro_batches()) +
                           " micro-batches");
        return;
      }
      int& slot = at[static_cast<size_t>(x.chunk * l.flow_micro_batches() + x.mb)];
      if (slot >= 0) problems.push_back(where + to_string(op) + " repeats an instruction of position " + std::to_string(slot));
      slot = i;
    };
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Instruction& op = ops[static_cast<size_t>(i)];
      if (op.has_forward()) note(f_at, op.f, i, op);
      if (op.type == OpType::B || op.type == OpType::FB) note(b_at, op.b, i, op);
      if (op.type == OpType::BInput) note(bi_at, op.b, i, op);
      if (op.type == OpType::W) note(w_at, op.b, i, op);
    }
    for (int c = 0; c < l.chunks(); ++c) {
      for (int m = 0; m < l.flow_micro_batches(); ++m) {
        const size_t k = static_cast<size_t>(c * l.flow_micro_batches() + m);
        const std::string x = std::to_string(c) + "." + std::to_string(m);
        if (f_at[k] < 0) problems.push_back(where + "no F" + x);
        if (forward_only) {
          if (b_at[k] >= 0 || bi_at[k] >= 0 || w_at[k] >= 0) problems.push_back(where + "backward of " + x + " in a forward-only schedule");
          continue;
        }
        const bool full = b_at[k] >= 0, split = bi_at[k] >= 0 || w_at[k] >= 0;
        if (full == split) problems.push_back(where + x + " needs either B" + x + " or B" + x + "w followed by W" + x);
        if (split && (bi_at[k] < 0 || w_at[k] < 0)) problems.push_back(where + "B" + x + "w and W" + x + " come as a pair");
        if (bi_at[k] >= 0 && w_at[k] >= 0 && w_at[k] < bi_at[k]) problems.push_back(where + "W" + x + " before B" + x + "w");
        const int back = full ? b_at[k] : bi_at[k];
        if (f_at[k] >= 0 && back >= 0 && back < f_at[k]) problems.push_back(where + "backward of " + x + " before F" + x);
      }
    }
  }
  return problems;
}

int peak_activations(const std::vector<Instruction>& ops, bool forward_only) {
  int held = 0, peak = 0;
  for (const Instruction& op : ops) {
    if (op.has_forward()) peak = std::max(peak, ++held);
    if (op.type == OpType::B || op.type == OpType::FB || op.type == OpType::W || (forward_only && op.has_forward()))
      --held;
  }
  return peak;
}

double peak_activation_bytes(const Schedule& schedule, int rank, const std::vector<double>& stage_bytes) {
  double held = 0, peak = 0;
  auto bytes = [&](const ChunkMb& x) { return stage_bytes[static_cast<size_t>(schedule.layout.stage_of(rank, x.chunk))]; };
  for (const Instruction& op : schedule.ranks[static_cast<size_t>(rank)]) {
    if (op.has_forward()) peak = std::max(peak, held += bytes(op.f));
    if (schedule.forward_only && op.has_forward()) held -= bytes(op.f);
    if (op.type == OpType::B || op.type == OpType::FB || op.type == OpType::W) held -= bytes(op.b);
  }
  return peak;
}

}  // namespace tetra
