#include "parallel/pipeline/generators.h"

#include <algorithm>
#include <deque>

#include "runtime/error.h"

namespace tetra {

namespace {

// Appends instructions while counting, per chunk, the next micro-batch to forward and to
// backward (every schedule takes a chunk's micro-batches in order), and queueing split backwards
// for their W (first in, first out).
class OpWriter {
 public:
  explicit OpWriter(int chunks) : next_f_(static_cast<size_t>(chunks), 0), next_b_(static_cast<size_t>(chunks), 0) {}
  void f(int c) { ops_.push_back(Instruction::forward(c, take(next_f_, c))); }
  void b(int c, bool split = false) {
    const int m = take(next_b_, c);
    if (!split) {
      ops_.push_back(Instruction::backward(c, m));
      return;
    }
    ops_.push_back(Instruction::backward_input(c, m));
    pending_w_.push_back({c, m});
  }
  void w() {
    TETRA_CHECK(!pending_w_.empty(), "a W with no split backward before it");
    ops_.push_back(Instruction::weight(pending_w_.front().chunk, pending_w_.front().mb));
    pending_w_.pop_front();
  }
  void fb(int cf, int cb) {
    const int mf = take(next_f_, cf), mb = take(next_b_, cb);
    ops_.push_back(Instruction::forward_backward({cf, mf}, {cb, mb}));
  }
  bool w_pending() const { return !pending_w_.empty(); }
  RankOps done() {
    TETRA_CHECK(pending_w_.empty(), pending_w_.size(), " split backwards without their W");
    return std::move(ops_);
  }

 private:
  static int take(std::vector<int>& next, int c) { return next[static_cast<size_t>(c)]++; }
  RankOps ops_;
  std::vector<int> next_f_, next_b_;
  std::deque<ChunkMb> pending_w_;
};

// DualPipe and DualPipeV share one step: n ranks on a side (DualPipe: pp/2 per half, mirrored;
// DualPipeV: pp), this rank i-th from its end, `per_flow` micro-batches entering from the near
// end (the chunk whose micro-batches enter at this rank's end) and the far one. The eight phases
// and their counts are those of the reference step() (github.com/deepseek-ai/DualPipe).
RankOps dual_ops(int n, int i, int per_flow, int near, int far) {
  OpWriter op(2);
  // 1. Fill: forwards of the near flow until the far flow's first micro-batch arrives.
  for (int k = 0; k < 2 * (n - i - 1); ++k) op.f(near);
  // 2. Forwards of both flows, alternating.
  for (int k = 0; k < i + 1; ++k) {
    op.f(near);
    op.f(far);
  }
  // 3. Backwards of the far flow start; their weight gradients fill the wait for its forwards.
  for (int k = 0; k < n - i - 1; ++k) {
    op.b(far, /*split=*/true);
    op.w();
    op.f(far);
  }
  // 4. Steady state: forward of one flow overlapped with backward of the other, both ways. The
  //    innermost rank does its first pair one after the other, which shortens the bubble.
  for (int k = 0; k < per_flow - 2 * n + i + 1; ++k) {
    if (k == 0 && i == n - 1) {
      op.f(near);
      op.b(far);
    } else {
      op.fb(near, far);
    }
    op.fb(far, near);
  }
  // 5. The near flow has no forwards left.
  for (int k = 0; k < n - i - 1; ++k) {
    op.b(far);
    op.fb(far, near);
  }
  // 6. Backwards of both flows; the second half of them leaves its weight gradients for later.
  const int half = (i + 1) / 2;
  for (int k = 0; k < i + 1; ++k) {
    op.b(far, k > half || (k == half && i % 2 == 1));
    op.b(near, k >= half);
  }
  // 7. Weight gradients fill the waits for the last near backwards.
  for (int k = 0; k < n - i - 1; ++k) {
    op.w();
    op.b(near, /*split=*/true);
  }
  // 8. The i + 1 weight gradients left.
  for (int k = 0; k < i + 1; ++k) op.w();
  return op.done();
}

}  // namespace

RankOps gpipe_ops(int pp, int rank, int micro_batches) {
  OpWriter op(1);
  for (int m = 0; m < micro_batches; ++m) op.f(0);
  for (int m = 0; m < micro_batches; ++m) op.b(0);
  return op.done();
}

RankOps forward_backward_pairs_ops(int micro_batches) {
  RankOps ops;
  if (micro_batches < 1) return ops;
  ops.push_back(Instruction::forward(0, 0));
  for (int m = 1; m < micro_batches; ++m) ops.push_back(Instruction::forward_backward({0, m}, {0, m - 1}));
  ops.push_back(Instruction::backward(0, micro_batches - 1));
  return ops;
}

RankOps one_f_one_b_ops(int pp, int rank, int micro_batches) {
  OpWriter op(1);
  const int warmup = std::min(pp - 1 - rank, micro_batches);
  for (int k = 0; k < warmup; ++k) op.f(0);
  for (int k = 0; k < micro_batches - warmup; ++k) {
    op.f(0);
    op.b(0);
  }
  for (int k = 0; k < warmup; ++k) op.b(0);
  return op.done();
}

RankOps interleaved_1f1b_ops(int pp, int rank, int micro_batches, int chunks) {
  OpWriter op(chunks);
  const int total = micro_batches * chunks;
  // The k-th forward runs chunk (k / pp) mod chunks; the k-th backward the mirror chunk.
  auto f_chunk = [&](int k) { return (k / pp) % chunks; };
  auto b_chunk = [&](int k) { return chunks - 1 - (k / pp) % chunks; };
  const int warmup = std::min(total, (chunks - 1) * pp + 2 * (pp - 1 - rank));
  for (int k = 0; k < warmup; ++k) op.f(f_chunk(k));
  for (int k = 0; k < total - warmup; ++k) {
    op.f(f_chunk(k + warmup));
    op.b(b_chunk(k));
  }
  for (int k = total - warmup; k < total; ++k) op.b(b_chunk(k));
  return op.done();
}

RankOps zb_h1_ops(int pp, int rank, int micro_batches) {
  OpWriter op(1);
  const int warmup = std::min(pp - 1 - rank, micro_batches);
  for (int k = 0; k < warmup; ++k) op.f(0);
  for (int k = 0; k < micro_batches; ++k) {
    if (k + warmup < micro_batches) op.f(0);
    op.b(0, /*split=*/true);
    if (k >= rank) op.w();
  }
  while (op.w_pending()) op.w();
  return op.done();
}

RankOps dualpipe_ops(int pp, int rank, int micro_batches) {
  // Ranks mirror around the middle: rank r and pp − 1 − r run the same step with the flows swapped.
  const int half_ranks = pp / 2;
  const int near = rank >= half_ranks ? 1 : 0;
  return dual_ops(half_ranks, std::min(rank, pp - 1 - rank), micro_batches / 2, near, 1 - near);
}

RankOps dualpipev_ops(int pp, int rank, int micro_batches) { return dual_ops(pp, rank, micro_batches, 0, 1); }

RankOps forward_only_ops(const PipelineLayout& layout, int rank) {
  OpWriter op(layout.chunks());
  for (int c = 0; c < layout.chunks(); ++c)
    for (int m = 0; m < layout.flow_micro_batches(); ++m) op.f(c);
  return op.done();
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "dualpipe", "dualpipev"};
  return names;
}

std::string schedule_requirement(const std::string& name, int pp, int micro_batches) {
  const std::vector<std::string>& names = schedule_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    return "unknown pipeline schedule \"" + name + "\" (valid: gpipe, 1f1b, interleaved_1f1b, zb_h1, dualpipe, dualpipev)";
  const std::string got = ", got " + std::to_string(micro_batches);
  if (pp < 1 || micro_batches < 1) return "needs pp ≥ 1 and at least one micro-batch (pp " + std::to_string(pp) + got + ")";
  if (pp == 1) return "";
  const std::string p = std::to_string(pp);
  if ((name == "dualpipe" || name == "dualpipev") && micro_batches < 2 * pp)
    return name + " with pp = " + p + " needs at least 2·pp = " + std::to_string(2 * pp) + " micro-batches" + got;
  if (name == "dualpipe" && pp % 2 != 0) return "dualpipe needs an even number of pipeline ranks, got " + p;
  if (name == "dualpipe" && micro_batches % 2 != 0)
    return "dualpipe feeds half the micro-batches from each end and needs an even number" + got;
  if (name == "interleaved_1f1b" && micro_batches % pp != 0)
    return "interleaved_1f1b needs a multiple of pp = " + p + " micro-batches" + got;
  if (name == "zb_h1" && micro_batches < pp) return "zb_h1 needs at least pp = " + p + " micro-batches" + got;
  return "";
}

Schedule make_schedule(const std::string& name, int pp, int micro_batches) {
  const std::string why = schedule_requirement(name, pp, micro_batches);
  if (!why.empty()) TETRA_FAIL(Usage, "pipeline schedule: ", why);
  Schedule s;
  s.name = name;
  s.layout = PipelineLayout::for_schedule(name, pp, micro_batches);
  for (int r = 0; r < pp; ++r) {
    RankOps ops;
    if (pp == 1) {
      ops = one_f_one_b_ops(1, 0, micro_batches);  // F0.m, B0.m for each m: the trivial schedule
    } else if (name == "gpipe") {
      ops = gpipe_ops(pp, r, micro_batches);
    } else if (name == "1f1b") {
      ops = one_f_one_b_ops(pp, r, micro_batches);
    } else if (name == "interleaved_1f1b") {
      ops = interleaved_1f1b_ops(pp, r, micro_batches, s.layout.chunks());
    } else if (name == "zb_h1") {
      ops = zb_h1_ops(pp, r, micro_batches);
    } else if (name == "dualpipe") {
      ops = dualpipe_ops(pp, r, micro_batches);
    } else {
      ops = dualpipev_ops(pp, r, micro_batches);
    }
    s.ranks.push_back(std::move(ops));
  }
  add_p2p(s);
  return s;
}

Schedule make_forward_only_schedule(const std::string& name, int pp, int micro_batches) {
  const std::string why = schedule_requirement(name, pp, micro_batches);
  if (!why.empty()) TETRA_FAIL(Usage, "pipeline schedule: ", why);
  Schedule s;
  s.name = name;
  s.forward_only = true;
  s.layout = PipelineLayout::for_schedule(name, pp, micro_batches);
  for (int r = 0; r < pp; ++r) s.ranks.push_back(forward_only_ops(s.layout, r));
  add_p2p(s);
  return s;
}

}  // namespace tetra
