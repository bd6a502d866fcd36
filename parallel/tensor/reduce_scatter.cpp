#include "parallel/tensor/reduce_scatter.h"

#include <string>
#include <vector>

#include "runtime/ops.h"

namespace tetra::tp {

namespace {

void check_rows(const char* what, const char* name, const Tensor& t) {
  if (!t.defined() || t.ndim() != 2)
    TETRA_FAIL(Internal, "tp ", what, ": ", name, " must be a 2-D [rows, P] tensor, got ",
               t.defined() ? t.describe() : std::string("an undefined tensor"));
}

}  // namespace

void produce_then_reduce_scatter(TpGroup& g, Tensor& out, const ChunkProducer& produce, const Tensor& b,
                                 const Tensor* residual, const std::function<void()>& overlap, const char* what) {
  check_rows(what, "out", out);
  const int tp = g.size(), r = g.rank();
  const int64_t m = out.dim(0), p = out.dim(1);
  const Device dev = out.device();
  // recv[q]: rank q's partial of chunk r (q = r: this rank's own); send[s−1]: the partial of chunk
  // r+s for rank r+s. Allocated on the compute stream; released there after compute has waited for
  // every exchange that reads or writes them.
  Tensor recv = Tensor::empty({tp, m, p}, out.dtype(), dev);
  Tensor send = tp > 1 ? Tensor::empty({tp - 1, m, p}, out.dtype(), dev) : Tensor();
  auto slot = [m, p](const Tensor& t, int i) { return t.narrow(i, 1).view({m, p}); };
  auto step_ops = [&](int s) {
    return std::vector<P2PTransfer>{P2PTransfer::send(slot(send, s - 1), g.peer(s)),
                              P2PTransfer::recv(slot(recv, g.peer(-s)), g.peer(-s))};
  };
  std::vector<CommScheduler::Ticket> steps;
  if (g.overlap() && tp > 1) {
    for (int s = 1; s < tp; ++s) {
      Tensor dst = slot(send, s - 1);
      produce(g.peer(s), dst);
      steps.push_back(g.exchange(std::string(what) + " step " + std::to_string(s) + "/" + std::to_string(tp - 1),
                                 step_ops(s)));
    }
    Tensor own = slot(recv, r);
    produce(r, own);
    if (overlap) overlap();
    for (CommScheduler::Ticket& t : steps) g.wait(t);
    ops::sum_partials(out, recv, b, residual);
    return;
  }
  for (int s = 1; s < tp; ++s) {
    Tensor dst = slot(send, s - 1);
    produce(g.peer(s), dst);
  }
  Tensor own = slot(recv, r);
  produce(r, own);
  if (tp > 1) {
    std::vector<P2PTransfer> all;
    for (int s = 1; s < tp; ++s)
      for (const P2PTransfer& op : step_ops(s)) all.push_back(op);
    CommScheduler::Ticket t = g.exchange(std::string(what) + " exchange", all);
    g.wait(t);
  }
  ops::sum_partials(out, recv, b, residual);
  if (overlap) overlap();
}

void produce_then_all_reduce(TpGroup& g, Tensor& out, const ChunkProducer& produce, const Tensor& b,
                             const Tensor* residual, const std::function<void()>& overlap, const char* what) {
  check_rows(what, "out", out);
  const int tp = g.size(), r = g.rank();
  const int64_t m = g.shard_rows(out.dim(0), what);
  Tensor mine = Tensor::empty({m, out.dim(1)}, out.dtype(), out.device());
  Tensor my_residual = residual && residual->defined() ? TpGroup::chunk(*residual, r, m) : Tensor();
  produce_then_reduce_scatter(g, mine, produce, b, my_residual.defined() ? &my_residual : nullptr, {}, what);
  if (tp == 1) {
    ops::copy(out, mine);
    if (overlap) overlap();
    return;
  }
  CommScheduler::Ticket t = g.issue(std::string(what) + " all_gather", static_cast<int64_t>(mine.nbytes()),
                                    [&] { return g.comm().all_gather(out, mine); });
  if (g.overlap() && overlap) overlap();
  g.wait(t);
  if (!g.overlap() && overlap) overlap();
}

void reduce_scatter_rows(TpGroup& g, Tensor& out, const Tensor& in, const Tensor* residual) {
  check_rows("reduce_scatter_rows", "in", in);
  const int64_t m = g.shard_rows(in.dim(0), "reduce_scatter_rows");
  if (out.ndim() != 2 || out.dim(0) != m || out.dim(1) != in.dim(1) || out.dtype() != in.dtype())
    TETRA_FAIL(Internal, "tp reduce_scatter_rows: out must be [", m, ", ", in.dim(1), "] of in's dtype, got ",
               out.describe(), " for in ", in.describe());
  produce_then_reduce_scatter(
      g, out, [&](int c, Tensor& dst) { ops::copy(dst, TpGroup::chunk(in, c, m)); }, Tensor(), residual, {},
      "reduce_scatter_rows");
}

void all_reduce_rows(TpGroup& g, Tensor& t) {
  check_rows("all_reduce_rows", "t", t);
  if (g.size() == 1) return;
  const int64_t m = g.shard_rows(t.dim(0), "all_reduce_rows");
  produce_then_all_reduce(
      g, t, [&](int c, Tensor& dst) { ops::copy(dst, TpGroup::chunk(t, c, m)); }, Tensor(), nullptr, {},
      "all_reduce_rows");
}

}  // namespace tetra::tp
