#include "parallel/zero/param_gather.h"

#include <algorithm>

#include "runtime/ops.h"

namespace tetra {

ZeroParamGather::ZeroParamGather(ParamSet& params, Communicator& dp, CommScheduler& scheduler, Tensor weight_shard,
                                 int prefetch, bool keep_in_step)
    : params_(params),
      layout_(params.layout()),
      dp_(dp),
      scheduler_(scheduler),
      weight_shard_(std::move(weight_shard)),
      prefetch_(std::max(0, prefetch)),
      keep_in_step_(keep_in_step),
      units_(layout_.units().size()) {
  TETRA_CHECK(weight_shard_.numel() == layout_.shard_total(), "ZeroParamGather: weight shard ",
              weight_shard_.describe(), " must hold ", layout_.shard_total(), " elements");
  TETRA_CHECK(!params.flat_values().defined(), "ZeroParamGather: release the ParamSet's full values first");
  const std::vector<int>& layers = layout_.layers();
  const int max_layer = layers.empty() ? 0 : layers.back();
  fwd_pos_.assign(static_cast<size_t>(max_layer) + 1, -1);
  bwd_pos_.assign(static_cast<size_t>(max_layer) + 1, -1);
  for (int l : layers) {
    fwd_pos_[static_cast<size_t>(l)] = static_cast<int>(sequence_.size());
    sequence_.push_back(l);
  }
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    bwd_pos_[static_cast<size_t>(*it)] = static_cast<int>(sequence_.size());
    sequence_.push_back(*it);
  }
  fp8_ = std::make_unique<ZeroFp8Gather>(layout_, dp_.rank(), weight_shard_);
  if (!fp8_->any()) fp8_.reset();
  for (int pos = 0; pos < static_cast<int>(sequence_.size()); ++pos)
    for (int u : layout_.units_of_layer(sequence_[static_cast<size_t>(pos)])) {
      Unit& unit = units_[static_cast<size_t>(u)];
      if (unit.first < 0) unit.first = pos;
      unit.last = pos;
    }
}

int ZeroParamGather::position(int layer, bool backward) const {
  const std::vector<int>& p = backward ? bwd_pos_ : fwd_pos_;
  if (layer < 0 || static_cast<size_t>(layer) >= p.size()) return -1;
  return p[static_cast<size_t>(layer)];
}

bool ZeroParamGather::needs(int pos, int u) const {
  if (pos < 0 || pos >= static_cast<int>(sequence_.size())) return false;
  const std::vector<int>& us = layout_.units_of_layer(sequence_[static_cast<size_t>(pos)]);
  return std::find(us.begin(), us.end(), u) != us.end();
}

void ZeroParamGather::account(Unit& unit, int64_t elements, int64_t bytes, int64_t gathered) {
  unit.bytes = bytes;
  live_elems_ += elements;
  peak_elems_ = std::max(peak_elems_, live_elems_);
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  gathered_bytes_ += gathered;
  ++gathers_issued_;
}

void ZeroParamGather::issue(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (unit.state != State::Sharded) return;
  if (fp8_ && fp8_->has(u)) return issue_fp8(u);
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  unit.full = Tensor::empty({zu.padded}, weight_shard_.dtype(), weight_shard_.device());
  Tensor in = weight_shard_.slice_flat(zu.shard_offset, {zu.shard});
  const auto bytes = static_cast<int64_t>(unit.full.nbytes());
  account(unit, zu.padded, bytes, bytes);
  if (dp_.size() == 1) {
    ops::copy(unit.full, in);
    unit.state = State::Gathered;
  } else {
    unit.ticket = scheduler_.issue("all_gather weights layer " + std::to_string(zu.layer),
                                   static_cast<int64_t>(unit.full.nbytes()),
                                   [&] { return dp_.all_gather(unit.full, in); });
    unit.state = State::Gathering;
  }
}

// A unit with FP8 weights: its codes and its other parameters' elements, each one all-gather
// (the step's first such gather casts every shard first, ZeroFp8Gather::prepare).
void ZeroParamGather::issue_fp8(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  if (!fp8_->prepared()) fp8_->prepare(dp_, scheduler_);
  unit.fp8 = fp8_->allocate(u);
  Tensor codes_in = fp8_->codes_shard(u), others_in = fp8_->others_shard(u);
  const bool others = unit.fp8.others.defined();
  account(unit, zu.padded, fp8_->gathered_bytes(u),
          static_cast<int64_t>(unit.fp8.codes.nbytes() + (others ? unit.fp8.others.nbytes() : 0)));
  if (dp_.size() == 1) {
    ops::copy(unit.fp8.codes, codes_in);
    if (others) ops::copy(unit.fp8.others, others_in);
    unit.state = State::Gathered;
    return;
  }
  const std::string layer = std::to_string(zu.layer);
  unit.ticket = scheduler_.issue("all_gather fp8 weights layer " + layer, static_cast<int64_t>(unit.fp8.codes.nbytes()),
                                 [&] { return dp_.all_gather(unit.fp8.codes, codes_in); });
  if (others)
    unit.others_ticket =
        scheduler_.issue("all_gather weights layer " + layer, static_cast<int64_t>(unit.fp8.others.nbytes()),
                         [&] { return dp_.all_gather(unit.fp8.others, others_in); });
  unit.state = State::Gathering;
}

void ZeroParamGather::ensure(int u) {
  issue(u);
  Unit& unit = units_[static_cast<size_t>(u)];
  const bool fp8 = unit.fp8.codes.defined();
  if (unit.state == State::Gathering) {
    scheduler_.wait(unit.ticket);
    if (fp8 && unit.fp8.others.defined()) scheduler_.wait(unit.others_ticket);
  }
  unit.state = State::Gathered;
  if (fp8) {
    if (!unit.unpacked.defined()) unit.unpacked = fp8_->bind(u, unit.fp8);
    return;
  }
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  for (int pi : zu.params) {
    Param* p = layout_.params()[static_cast<size_t>(pi)];
    if (!p->value.defined()) p->value = unit.full.slice_flat(layout_.offset_of(pi) - zu.offset, p->local_shape);
  }
}

void ZeroParamGather::release(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (unit.state == State::Sharded) return;
  // A gather still in flight completes before its buffer goes (compute waits for it).
  if (unit.state == State::Gathering) {
    scheduler_.wait(unit.ticket);
    if (unit.fp8.others.defined()) scheduler_.wait(unit.others_ticket);
  }
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  for (int pi : zu.params) layout_.params()[static_cast<size_t>(pi)]->value = Tensor();
  if (unit.fp8.codes.defined()) fp8_->unbind(u);
  unit.full = Tensor();
  unit.fp8 = {};
  unit.unpacked = Tensor();
  unit.state = State::Sharded;
  live_elems_ -= zu.padded;
  live_bytes_ -= unit.bytes;
}

void ZeroParamGather::prefetch_after(int pos) {
  if (prefetch_ == 0) return;
  // Units gathered or gathering for a later position (not the current one, not tied units that
  // stay gathered anyway) count against the prefetch depth.
  int ahead = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = units_[u];
    if (unit.state == State::Sharded || needs(pos, static_cast<int>(u))) continue;
    if (unit.state == State::Gathered && layout_.units()[u].tied()) continue;
    ++ahead;
  }
  // Within the pass of `pos` only: a forward does not prefetch for the backward, which may not come
  // (evaluation), so no gather is ever left in flight past the end of a pass.
  const int forward_end = static_cast<int>(layout_.layers().size());
  const int end = pos < forward_end ? forward_end : static_cast<int>(sequence_.size());
  for (int q = pos + 1; q < end && ahead < prefetch_; ++q)
    for (int u : layout_.units_of_layer(sequence_[static_cast<size_t>(q)])) {
      if (units_[static_cast<size_t>(u)].state != State::Sharded) continue;
      if (ahead >= prefetch_) break;
      issue(u);
      ++ahead;
    }
}

void ZeroParamGather::before(int layer, bool backward) {
  const int pos = position(layer, backward);
  if (pos < 0) return;  // a layer without parameters
  if (keep_in_step_) {
    for (int u : layout_.units_of_layer(layer)) ensure(u);
    return;
  }
  if (pos == 0) {
    // A new forward pass: nothing gathered for an earlier pass that ended early (evaluation runs
    // forward only) is needed except what the first layer reads.
    for (size_t u = 0; u < units_.size(); ++u)
      if (!needs(0, static_cast<int>(u))) release(static_cast<int>(u));
  }
  for (int u : layout_.units_of_layer(layer)) ensure(u);
  prefetch_after(pos);
}

void ZeroParamGather::after(int layer, bool backward, bool last_micro) {
  const int pos = position(layer, backward);
  if (pos < 0 || keep_in_step_) return;
  const bool end_of_pass = pos + 1 == static_cast<int>(sequence_.size());
  // The position that runs next: the next micro-batch's first forward after a non-last backward.
  const int next = end_of_pass ? (last_micro ? -1 : 0) : pos + 1;
  for (int u : layout_.units_of_layer(layer)) {
    const Unit& unit = units_[static_cast<size_t>(u)];
    if (layout_.units()[static_cast<size_t>(u)].tied() && pos < unit.last) continue;
    if (needs(next, u)) continue;
    release(u);
  }
}

void ZeroParamGather::release_all() {
  for (size_t u = 0; u < units_.size(); ++u) release(static_cast<int>(u));
  weights_changed();  // after a load, too: the next gather casts the weights as they are then
}

}  // namespace tetra
