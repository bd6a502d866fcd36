#include "parallel/zero/grad_reducer.h"

#include <algorithm>

#include "runtime/ops.h"

namespace tetra {

ZeroGradReducer::ZeroGradReducer(ParamSet& params, Communicator& dp, CommScheduler& scheduler, int stage,
                                 Tensor grad_shard, int max_in_flight, bool overlap, TpGradSync* tp)
    : params_(params),
      layout_(params.layout()),
      dp_(dp),
      scheduler_(scheduler),
      tp_(tp),
      stage_(stage),
      grad_shard_(std::move(grad_shard)),
      max_in_flight_(std::max(1, max_in_flight)),
      overlap_(overlap),
      units_(layout_.units().size()) {
  TETRA_CHECK(stage >= 1 && stage <= 3, "ZeroGradReducer: stage ", stage, " (valid: 1–3)");
  TETRA_CHECK(grad_shard_.numel() == layout_.shard_total(), "ZeroGradReducer: gradient shard ",
              grad_shard_.describe(), " must hold ", layout_.shard_total(), " elements");
  if (stage == 1)
    TETRA_CHECK(params.flat_grads().defined(), "ZeroGradReducer: stage 1 reduces the full flat gradient buffer, "
                                               "but the ParamSet was built without one");
  else
    TETRA_CHECK(!params.flat_grads().defined(), "ZeroGradReducer: stage ", stage,
                " keeps gradients in per-layer buffers; build the ParamSet as param_storage_for() says "
                "(full_grads = false)");
}

void ZeroGradReducer::begin_step() {
  TETRA_CHECK(in_flight_.empty(), "ZeroGradReducer: a step began before the last one's finish()");
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].pending = static_cast<int>(layout_.units()[u].users.size());
    units_[u].issued = false;
  }
}

Tensor ZeroGradReducer::full_of(int u) {
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  if (stage_ == 1) return params_.flat_grads().slice_flat(zu.offset, {zu.padded});
  return units_[static_cast<size_t>(u)].full;
}

void ZeroGradReducer::allocate(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (stage_ == 1 || unit.full.defined()) return;
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  TETRA_CHECK(!unit.issued, "ZeroGradReducer: layer writes gradients of unit (layer ", zu.layer,
              ") after its reduce-scatter was issued (a backward after the last micro-batch's?)");
  unit.full = Tensor::empty({zu.padded}, params_.grad_dtype(), params_.device());
  std::vector<Param*> ps;
  for (int pi : zu.params) {
    Param* p = layout_.params()[static_cast<size_t>(pi)];
    p->grad = unit.full.slice_flat(layout_.offset_of(pi) - zu.offset, p->local_shape);
    ps.push_back(p);
  }
  // Zeroed but for gradients whose first write stores every element (Param::grad_whole_writes).
  prepare_grads(unit.full, zu.offset, ps);
  live_elems_ += zu.padded;
  peak_elems_ = std::max(peak_elems_, live_elems_);
}

std::vector<Param*> ZeroGradReducer::params_of(int u) const {
  std::vector<Param*> out;
  for (int pi : layout_.units()[static_cast<size_t>(u)].params) out.push_back(layout_.params()[static_cast<size_t>(pi)]);
  return out;
}

void ZeroGradReducer::free_buffer(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (stage_ == 1 || !unit.full.defined()) return;
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  for (int pi : zu.params) {
    Param* p = layout_.params()[static_cast<size_t>(pi)];
    p->grad = Tensor();
    p->grad_empty = p->grad_stale = false;
  }
  unit.full = Tensor();
  live_elems_ -= zu.padded;
}

void ZeroGradReducer::before_backward(int layer) {
  for (int u : layout_.units_of_layer(layer)) allocate(u);
}

void ZeroGradReducer::issue(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  while (static_cast<int>(in_flight_.size()) >= max_in_flight_) wait_oldest();
  Tensor out = grad_shard_.slice_flat(zu.shard_offset, {zu.shard});
  unit.issued = true;
  if (stage_ >= 2 && !unit.full.defined()) {
    // No layer wrote this unit this step (every rank sees the same hooks, so all skip alike).
    ops::zero(out);
    return;
  }
  settle_grads(params_of(u));  // a gradient no backward reached this step reduces as zeros
  Tensor in = full_of(u);
  if (tp_) tp_->sync_unit(u, in);
  if (dp_.size() == 1) {
    ops::copy(out, in);  // the same buffer at stage 1 (ZeroOptimizer): no copy
    free_buffer(u);
    return;
  }
  unit.ticket = scheduler_.issue("reduce_scatter grads layer " + std::to_string(zu.layer),
                                 static_cast<int64_t>(in.nbytes()),
                                 [&] { return dp_.reduce_scatter(out, in, ReduceOp::Sum); });
  in_flight_.push_back(u);
}

void ZeroGradReducer::wait_oldest() {
  const int u = in_flight_.front();
  in_flight_.pop_front();
  scheduler_.wait(units_[static_cast<size_t>(u)].ticket);
  free_buffer(u);
}

void ZeroGradReducer::after_backward(int layer, bool last_micro) {
  if (!last_micro) return;
  for (int u : layout_.units_of_layer(layer)) {
    Unit& unit = units_[static_cast<size_t>(u)];
    if (--unit.pending == 0 && overlap_) issue(u);
  }
}

void ZeroGradReducer::finish() {
  // Units not complete yet (deferred reduction, or layers whose backward did not run), in
  // backward order as everywhere else: every rank issues the same collectives in the same order.
  for (int u = static_cast<int>(units_.size()) - 1; u >= 0; --u)
    if (!units_[static_cast<size_t>(u)].issued) issue(u);
  while (!in_flight_.empty()) wait_oldest();
}

}  // namespace tetra
