// ZeroFp8Gather: ZeRO-3 gathers the FP8 projection weights (Param::fp8_weight, set by a Linear
// under train.fp8.recipe) already cast, with their scales: one byte an element instead of the
// working dtype's two (bf16) or four (fp32), as torchtitan's float8 all-gather does for FSDP2.
//
// The scales are those of the whole weight, so a rank's shard cannot be cast alone. Once per step
// (the weights change only at the update), before the first gather of the step:
//   1. each rank takes the amax of its shard's elements of each FP8 weight, per group of the
//      recipe's weight cast (Tensorwise: the weight; Blocks128: each 128×128 block — a flat shard
//      may cut a block), ops::fp8_slice_amax, all into one int32 vector;
//   2. one all-reduce (max) of that vector over dp gives every rank every weight's amaxes;
//   3. each rank casts its shard's elements with them (ops::fp8_slice_quantize) into an FP8 shard
//      buffer, and every rank writes every weight's scales: those of the cast of the whole weight;
//   4. the shard's elements of the other parameters of those units (norms, biases) are packed into
//      a small buffer of their own, `others_per_rank` elements a rank.
// A unit's gather is then two all-gathers: its FP8 codes [padded] (the unit's layout, a byte an
// element; the bytes of other parameters and padding are not read) and the others [shards ×
// others_per_rank] in the working dtype, unpacked into one buffer that the other parameters' values
// view. The FP8 weights' values stay undefined: fp8_q views the gathered codes as [out, in] and
// fp8_scale holds the scales, which the Linear's FP8 path takes (models/fp8_linear.h) instead of
// casting. The codes and scales are bit for bit those of the cast of the whole weight that a run
// without ZeRO-3 makes, so the two runs compute the same GEMMs.
//
// Units without an FP8 weight (embeddings, the output layer, final norms) gather as before.
#pragma once
#include <vector>

#include "parallel/comm_scheduler.h"
#include "parallel/zero/layout.h"
#include "runtime/communicator.h"

namespace tetra {

class ZeroFp8Gather {
 public:
  // `weight_shard`: this rank's (rank `rank` of layout.shards()) flat shard of working weights.
  ZeroFp8Gather(const ZeroLayout& layout, int rank, Tensor weight_shard);

  bool any() const { return any_; }                     // some unit holds an FP8 weight
  bool has(int u) const { return units_[static_cast<size_t>(u)].fp8; }
  // Steps 1–4 above: a collective over dp (every rank calls it at the same point), once per step.
  void prepare(Communicator& dp, CommScheduler& scheduler);
  bool prepared() const { return prepared_; }
  void invalidate() { prepared_ = false; }  // the weights changed (a step's update, a load)

  // Unit u's gather buffers and the shards they are gathered from (after prepare()).
  struct Buffers {
    Tensor codes;   // FP8 [padded]
    Tensor others;  // working dtype [shards · others_per_rank]; undefined when the unit has no others
  };
  Buffers allocate(int u) const;
  Tensor codes_shard(int u) const;
  Tensor others_shard(int u) const;
  // Bytes of Buffers plus the unpacked others: what a gathered unit holds.
  int64_t gathered_bytes(int u) const;
  // Binds unit u's parameters to the gathered buffers (the FP8 weights' fp8_q and fp8_scale, the
  // others' values into a buffer unpacked from b.others, returned: the caller keeps it alive).
  Tensor bind(int u, const Buffers& b) const;
  void unbind(int u) const;  // clears the FP8 weights' fp8_q and fp8_scale

 private:
  // One FP8 weight of a unit and its part of this rank's shard.
  struct Member {
    int param = 0;
    int64_t rows = 0, cols = 0;
    int64_t unit_offset = 0;     // first element in the unit (layout offset − unit offset)
    int64_t amax_offset = 0;     // first entry in amax_
    Tensor scale;                // the whole weight's scales (fp8_scale_shape), written by prepare()
    int64_t begin = 0, count = 0;  // this rank's elements of the weight: [begin, begin + count)
    int64_t shard_pos = 0;       // where they start in the unit's shard
  };
  struct Piece {  // count elements from src to dst
    int64_t src = 0, dst = 0, count = 0;
  };
  struct Plan {
    bool fp8 = false;
    std::vector<Member> members;
    int64_t others_per_rank = 0;
    int64_t others_offset = 0;  // in others_shard_
    std::vector<Piece> pack;    // unit's shard → its others shard
    std::vector<Piece> unpack;  // gathered others → the unpacked buffer
    std::vector<std::pair<int, int64_t>> others;  // other parameter, its offset in the unpacked buffer
    int64_t unpacked = 0;
  };
  void plan_unit(int u);

  const ZeroLayout& layout_;
  int rank_ = 0;
  Tensor weight_shard_;
  DType format_ = DType::F8E4M3;
  std::vector<Plan> units_;
  Tensor amax_;          // I32 [Σ groups]: every FP8 weight's amaxes as fp32 bits
  Tensor codes_shard_;   // FP8 [shard_total]: this rank's shard cast (the FP8 units' ranges)
  Tensor others_shard_;  // working dtype [Σ others_per_rank]
  bool any_ = false, prepared_ = false, format_known_ = false;
};

}  // namespace tetra
