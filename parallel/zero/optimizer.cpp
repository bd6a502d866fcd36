#include "parallel/zero/optimizer.h"

#include <algorithm>

#include "parallel/zero/memory.h"
#include "runtime/multi_tensor.h"
#include "runtime/ops.h"

namespace tetra {

ZeroOptimizer::ZeroOptimizer(ParamSet& params, Communicator& dp, CommScheduler& scheduler,
                             const DistributedOptimizerOptions& options, const TpGradGroups& tp)
    : params_(params),
      dp_(dp),
      scheduler_(scheduler),
      tp_(params.layout(), tp, scheduler),
      options_(options),
      stage_(options.zero_stage),
      rank_(dp.rank()) {
  TETRA_CHECK(stage_ >= 1 && stage_ <= 3, "ZeroOptimizer: zero_stage ", stage_, " (valid: 1–3; 0 is ReplicatedOptimizer)");
  const ZeroLayout& layout = params.layout();
  TETRA_CHECK(layout.shards() == dp.size(), "ZeroOptimizer: the ParamSet is laid out for ", layout.shards(),
              " shards but the data-parallel group ", dp.name(), " has ", dp.size(),
              " ranks; build it with param_storage_for(options, dtype, dp.size())");
  Tensor& values = params.flat_values();
  TETRA_CHECK(values.defined(), "ZeroOptimizer: the ParamSet has no full values to take the shards from");
  const Device dev = params.device();
  const int64_t S = layout.shard_total();
  separate_master_ = params.value_dtype() != DType::F32;
  // One data-parallel rank below ZeRO-3: each shard is its whole unit, at the unit's own place, so the
  // optimizer works on the ParamSet's buffers (the working weights; stage 1's gradients) instead of
  // copies that every step would fill from them and back.
  const bool whole = stage_ < 3 && layout.shards_are_units() && values.numel() == S;
  master_ = whole && !separate_master_ ? values : Tensor::zeros({S}, DType::F32, dev);
  const DType state = options.adamw.state_dtype;
  TETRA_CHECK(state == DType::F32 || state == DType::BF16, "ZeroOptimizer: state_dtype ", dtype_name(state),
              " (valid: fp32, bf16)");
  exp_avg_ = Tensor::zeros({S}, state, dev);
  exp_avg_sq_ = Tensor::zeros({S}, state, dev);
  Tensor& flat_grads = params.flat_grads();
  grad_shard_ = whole && stage_ == 1 && flat_grads.defined() && flat_grads.numel() == S
                    ? flat_grads
                    : Tensor::zeros({S}, params.grad_dtype(), dev);
  weight_shard_ = !separate_master_ ? master_ : whole ? values : Tensor::zeros({S}, params.value_dtype(), dev);
  // Take this rank's shard of every unit from the (identically initialised or loaded) full weights:
  // the master from their fp32 initial values where the ParamSet keeps them (bf16 working weights,
  // ParamSet::set_initial_values), the working shard from the working copy.
  const Tensor& initial = params.initial_values();
  TETRA_CHECK(!initial.defined() || initial.numel() == values.numel(), "ZeroOptimizer: initial values of ",
              initial.numel(), " elements for a layout of ", values.numel());
  for (const ZeroUnit& u : layout.units()) {
    Tensor src = values.slice_flat(u.offset + rank_ * u.shard, {u.shard});
    Tensor m = master_.slice_flat(u.shard_offset, {u.shard});
    ops::copy(m, initial.defined() ? initial.slice_flat(u.offset + rank_ * u.shard, {u.shard}) : src);
    if (separate_master_) {
      Tensor w = weight_shard_.slice_flat(u.shard_offset, {u.shard});
      ops::copy(w, src);
    }
  }
  amaxes_ = Fp8UpdateAmaxes(params.params(), dev, /*updates_whole=*/whole);
  segments_.assign(layout.units().size(), {});
  for (const ShardSegment& s : layout.segments(rank_)) segments_[static_cast<size_t>(s.unit)].push_back(s);

  reducer_ = std::make_unique<ZeroGradReducer>(params, dp, scheduler, stage_, grad_shard_,
                                               zero_reduce_scatters_in_flight(options.fsdp_prefetch),
                                               options.overlap_grad_reduce, &tp_);
  if (stage_ == 3) {
    params.release_values();
    gather_ = std::make_unique<ZeroParamGather>(params, dp, scheduler, weight_shard_, options.fsdp_prefetch,
                                                options.keep_gathered_in_step);
  }
  weight_gathers_.resize(layout.units().size());
  if (!layout.units().empty()) {
    first_layer_ = layout.units().front().layer;
    for (const ZeroUnit& u : layout.units()) first_layer_ = std::min(first_layer_, u.layer);
  }
}

bool ZeroOptimizer::gathered_with_update(int u) const {
  return params_.layout().units()[static_cast<size_t>(u)].layer == first_layer_;
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::begin_step() {
  if (stage_ == 1) params_.zero_grads();
  if (gather_) gather_->release_all();  // whatever an evaluation left gathered
  reducer_->begin_step();
  if (stage_ < 3) {
    // The weights the last update left to this step: gathered while the forward runs, in the
    // order it needs them (issued every step, so a captured step graph does it on every replay).
    for (size_t u = 0; u < weight_gathers_.size(); ++u)
      if (!gathered_with_update(static_cast<int>(u))) weight_gathers_[u] = issue_weight_gather(static_cast<int>(u));
  }
}

void ZeroOptimizer::before_forward(int layer) {
  if (gather_) gather_->before(layer, /*backward=*/false);
  for (int u : params_.layout().units_of_layer(layer)) wait_weight_gather(static_cast<size_t>(u));
}

void ZeroOptimizer::after_forward(int layer) {
  if (gather_) gather_->after(layer, /*backward=*/false, /*last_micro=*/false);
}

void ZeroOptimizer::before_backward(int layer) {
  if (gather_) gather_->before(layer, /*backward=*/true);
  reducer_->before_backward(layer);
}

void ZeroOptimizer::after_backward(int layer, bool last_micro) {
  reducer_->after_backward(layer, last_micro);
  if (gather_) gather_->after(layer, /*backward=*/true, last_micro);
}

void ZeroOptimizer::finish_gradients() {
  // A layer whose forward did not run this step still has its weights in flight: wait here, in
  // the step that issued them.
  for (size_t u = 0; u < weight_gathers_.size(); ++u) wait_weight_gather(u);
  reducer_->finish();
  if (gather_ && options_.keep_gathered_in_step) gather_->release_all();  // kept through the step's backwards
  // Pipeline copies: the reduced shards of every copy, added up (their units shard alike).
  if (!tie_group_ || tie_group_->size() <= 1) return;
  for (int u : tied_units_) {
    const ZeroUnit& zu = params_.layout().units()[static_cast<size_t>(u)];
    Tensor shard = grad_shard_.slice_flat(zu.shard_offset, {zu.shard});
    CommScheduler::Ticket t =
        scheduler_.issue("all_reduce tied layer " + std::to_string(zu.layer), static_cast<int64_t>(shard.nbytes()),
                         [&] { return tie_group_->all_reduce(shard, ReduceOp::Sum); });
    scheduler_.wait(t);
  }
}

void ZeroOptimizer::tie(std::vector<Param*> params, Communicator& group, bool owner) {
  const ZeroLayout& layout = params_.layout();
  tied_units_.clear();
  tied_names_.clear();
  for (Param* p : params) {
    int found = -1;
    for (size_t i = 0; i < layout.params().size(); ++i)
      if (layout.params()[i] == p) found = layout.unit_of_param(static_cast<int>(i));
    TETRA_CHECK(found >= 0 && p->own_unit && layout.units()[static_cast<size_t>(found)].params.size() == 1, "tie: ",
                p->name, " must be a parameter of this ParamSet laid out as a unit of its own");
    tied_units_.push_back(found);
    tied_names_.push_back(p->name);
  }
  tie_group_ = &group;
  tie_owner_ = owner;
}

// Every element once: tp-replicated parameters on tp rank 0 only, pipeline copies of a tied weight on
// its owner only (the other copies' units are left out).
void ZeroOptimizer::grad_norm_squared(Tensor& acc) {
  std::vector<Param*> skip;
  if (!tie_owner_)
    for (int u : tied_units_)
      for (int pi : params_.layout().units()[static_cast<size_t>(u)].params)
        skip.push_back(params_.layout().params()[static_cast<size_t>(pi)]);
  tp_.norm_squared(acc, grad_shard_, &dp_, rank_, skip);
}

std::unique_ptr<Work> ZeroOptimizer::gather_weights(int u) {
  const ZeroUnit& zu = params_.layout().units()[static_cast<size_t>(u)];
  Tensor in = weight_shard_.slice_flat(zu.shard_offset, {zu.shard});
  Tensor out = params_.flat_values().slice_flat(zu.offset, {zu.padded});
  if (dp_.size() == 1) {
    ops::copy(out, in);
    return nullptr;
  }
  return dp_.all_gather(out, in);
}

std::optional<CommScheduler::Ticket> ZeroOptimizer::issue_weight_gather(int u) {
  if (dp_.size() == 1) {
    gather_weights(u);
    return std::nullopt;
  }
  const ZeroUnit& zu = params_.layout().units()[static_cast<size_t>(u)];
  const auto bytes = static_cast<int64_t>(static_cast<size_t>(zu.padded) * dtype_size(params_.flat_values().dtype()));
  return scheduler_.issue("all_gather weights layer " + std::to_string(zu.layer), bytes,
                          [&] { return gather_weights(u); });
}

void ZeroOptimizer::wait_weight_gather(size_t u) {
  if (!weight_gathers_[u]) return;
  scheduler_.wait(*weight_gathers_[u]);
  weight_gathers_[u].reset();
}

void ZeroOptimizer::step(float lr, float grad_scale) {
  ++steps_;
  update(options_.adamw.hyper(lr, steps_, grad_scale), nullptr);
}

void ZeroOptimizer::step(const Tensor& control) { update(options_.adamw.hyper(0.0f, 1, 1.0f), &control); }

void ZeroOptimizer::update(const ops::AdamWHyper& h, const Tensor* control) {
  const ZeroLayout& layout = params_.layout();
  std::vector<CommScheduler::Ticket> tickets;
  amaxes_.begin();
  for (size_t u = 0; u < segments_.size(); ++u) {
    // One multi-tensor update per unit (a few launches), so the unit's gather can start after it.
    std::vector<ops::AdamWSegment> segs;
    segs.reserve(segments_[u].size());
    for (const ShardSegment& s : segments_[u]) {
      const Param* p = layout.params()[static_cast<size_t>(s.param)];
      ops::AdamWSegment seg;
      seg.master = master_.slice_flat(s.shard_offset, {s.numel()});
      seg.grad = grad_shard_.slice_flat(s.shard_offset, {s.numel()});
      seg.m = exp_avg_.slice_flat(s.shard_offset, {s.numel()});
      seg.v = exp_avg_sq_.slice_flat(s.shard_offset, {s.numel()});
      if (separate_master_) seg.working = weight_shard_.slice_flat(s.shard_offset, {s.numel()});
      seg.weight_decay = p->weight_decay ? options_.adamw.weight_decay : 0.0f;
      amaxes_.append(segs, std::move(seg), *p);
    }
    if (!segs.empty()) ops::adamw_update_multi(segs, h, control);
    // Stages 1–2: the first layer's new weights travel while the other units update (units are
    // in forward order, so they come first); the others wait for the next step (begin_step).
    if (stage_ < 3 && gathered_with_update(static_cast<int>(u)))
      if (auto t = issue_weight_gather(static_cast<int>(u))) tickets.push_back(*t);
  }
  for (CommScheduler::Ticket& t : tickets) scheduler_.wait(t);
  amaxes_.end();
  if (gather_) gather_->weights_changed();
}

void ZeroOptimizer::sync_weights() {
  if (stage_ == 3) return;  // stage 3 gathers before every use anyway
  // Outside a step: straight on the current stream, not through the step's scheduler records.
  for (size_t u = 0; u < weight_gathers_.size(); ++u) {
    if (gathered_with_update(static_cast<int>(u))) continue;
    if (std::unique_ptr<Work> w = gather_weights(static_cast<int>(u))) w->wait();
  }
}

std::vector<StatePiece> ZeroOptimizer::shard_pieces(bool saved_only) {
  const ZeroLayout& layout = params_.layout();
  std::vector<StatePiece> out;
  for (const std::vector<ShardSegment>& segs : segments_)
    for (const ShardSegment& s : segs) {
      const Param* p = layout.params()[static_cast<size_t>(s.param)];
      // Saving: not what another tp rank saves (its identical copy of a replicated parameter or block).
      auto append = saved_only ? append_saved_state_pieces : append_state_pieces;
      append(out, *p, s.param_begin, s.param_end, master_.slice_flat(s.shard_offset, {s.numel()}),
             exp_avg_.slice_flat(s.shard_offset, {s.numel()}), exp_avg_sq_.slice_flat(s.shard_offset, {s.numel()}));
    }
  return out;
}

// Each rank saves exactly its shard (but not a pipeline copy another rank owns), and loads exactly
// its shard (from whatever layout wrote it).
std::vector<StatePiece> ZeroOptimizer::pieces_to_save() {
  std::vector<StatePiece> out;
  for (StatePiece& s : shard_pieces(/*saved_only=*/true))
    if (tie_owner_ || std::find(tied_names_.begin(), tied_names_.end(), s.name) == tied_names_.end())
      out.push_back(std::move(s));
  return out;
}
std::vector<StatePiece> ZeroOptimizer::pieces_to_load() { return shard_pieces(/*saved_only=*/false); }

void ZeroOptimizer::after_load() {
  if (separate_master_) ops::copy(weight_shard_, master_);
  amaxes_.stale();
  if (stage_ < 3) {
    std::vector<CommScheduler::Ticket> tickets;
    for (size_t u = 0; u < segments_.size(); ++u)
      if (auto t = issue_weight_gather(static_cast<int>(u))) tickets.push_back(*t);
    for (CommScheduler::Ticket& t : tickets) scheduler_.wait(t);
  } else {
    gather_->release_all();  // the next forward gathers the loaded weights
  }
}

StateMemory ZeroOptimizer::memory() const {
  ZeroMemorySpec s;
  s.stage = stage_;
  s.weight_dtype = params_.value_dtype();
  s.grad_dtype = params_.grad_dtype();
  s.accumulation_steps = options_.accumulation_steps;
  s.fsdp_prefetch = options_.fsdp_prefetch;
  s.overlap_grad_reduce = options_.overlap_grad_reduce;
  s.state_dtype = options_.adamw.state_dtype;
  return zero_state_memory(params_.layout(), s);
}

}  // namespace tetra
