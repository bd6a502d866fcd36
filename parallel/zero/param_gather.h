// ZeroParamGather: stage 3 (FSDP) working weights. Every rank keeps only its shard of each unit
// (= layer); a unit's full weights exist only while a layer that reads them runs.
//
// The hooks of one micro-batch visit the positions F(l0) … F(ln) B(ln) … B(l0) (the layers that
// read parameters, ascending). At the start of a position its units are gathered (issued now if
// no prefetch did, then compute waits for them) and bound to Param::value; then the all-gathers
// of the units needed next are issued, at most `prefetch` units ahead, so the gather of layer i+1
// runs while layer i computes — in forward and in backward order. Prefetch stays inside the pass
// (forward or backward): a forward may be an evaluation that no backward follows, and a gather
// must not stay in flight past the step's communication records. At the end of a position a unit
// is freed (Param::value undefined) unless the next position needs it too (the last layer stays
// gathered from its forward into its backward; the first layer from one micro-batch's backward
// into the next one's forward).
//
// Tied units (read by several layers — GPT-2's wte, read by the embedding and the LM head) stay
// gathered from their first position to their last of the micro-batch (F(l0) … B(l0) for wte):
// gathering the largest matrix of the model twice more per micro-batch would cost more than
// keeping it. docs/zero.md counts it in the memory bound.
//
// Units that hold FP8 projection weights (train.fp8.recipe) gather those already cast, a byte an
// element, with their scales (parallel/zero/fp8_gather.h); the other units gather the working dtype.
#pragma once
#include <memory>
#include <vector>

#include "parallel/comm_scheduler.h"
#include "parallel/param_set.h"
#include "parallel/zero/fp8_gather.h"
#include "runtime/communicator.h"

namespace tetra {

class ZeroParamGather {
 public:
  // `weight_shard`: this rank's flat shard of working weights [layout.shard_total()], the source
  // of every all-gather; the ParamSet's full values must already be released.
  // keep_in_step: a unit, once gathered, stays so until release_all() (pipeline schedules run the
  // micro-batches' forwards and backwards in any order: each unit is gathered once per step).
  ZeroParamGather(ParamSet& params, Communicator& dp, CommScheduler& scheduler, Tensor weight_shard, int prefetch,
                  bool keep_in_step = false);

  void before(int layer, bool backward);
  void after(int layer, bool backward, bool last_micro);
  // Frees every gathered unit (start of a step, after a load, after an evaluation).
  void release_all();
  // The shards were updated: the FP8 weights are cast again before their next gather.
  void weights_changed() {
    if (fp8_) fp8_->invalidate();
  }

  // Elements of gathered (or gathering) units now / at most since construction (a unit counts its
  // padded elements whatever their dtype).
  int64_t live_elements() const { return live_elems_; }
  int64_t peak_elements() const { return peak_elems_; }
  int gathers_issued() const { return gathers_issued_; }
  // Bytes the gathered units hold at most since construction (FP8 codes, the working dtype's
  // elements), and bytes the unit all-gathers have written since construction (their outputs:
  // with FP8 weights a byte for each of their elements).
  int64_t peak_bytes() const { return peak_bytes_; }
  int64_t gathered_bytes() const { return gathered_bytes_; }

 private:
  enum class State { Sharded, Gathering, Gathered };
  struct Unit {
    State state = State::Sharded;
    Tensor full;  // working dtype [padded] while gathering or gathered
    ZeroFp8Gather::Buffers fp8;  // instead of `full`, for a unit with FP8 weights
    Tensor unpacked;             // its other parameters' values, once bound
    int64_t bytes = 0;           // what the unit holds while gathered
    CommScheduler::Ticket ticket, others_ticket;
    int first = -1, last = -1;  // first and last position that reads the unit (tied units)
  };
  int position(int layer, bool backward) const;
  bool needs(int pos, int u) const;
  void issue(int u);
  void issue_fp8(int u);
  void account(Unit& unit, int64_t elements, int64_t bytes, int64_t gathered);
  void ensure(int u);
  void release(int u);
  void prefetch_after(int pos);

  ParamSet& params_;
  const ZeroLayout& layout_;
  Communicator& dp_;
  CommScheduler& scheduler_;
  Tensor weight_shard_;
  int prefetch_;
  bool keep_in_step_;
  std::vector<int> sequence_;          // position → layer (forward ascending, then backward)
  std::vector<int> fwd_pos_, bwd_pos_;  // layer → position (−1: reads no parameter)
  std::vector<Unit> units_;
  std::unique_ptr<ZeroFp8Gather> fp8_;  // null: no FP8 weight in the layout
  int64_t live_elems_ = 0, peak_elems_ = 0;
  int64_t live_bytes_ = 0, peak_bytes_ = 0, gathered_bytes_ = 0;
  int gathers_issued_ = 0;
};

}  // namespace tetra
