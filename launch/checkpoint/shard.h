// One rank's file of a checkpoint, rank_NNNNN.h5 (ARCHITECTURE.md §6). For every StatePiece the
// rank saves, a group "NAME[BEGIN:END]" (e.g. "transformer.h.0.attn.c_attn.weight[0:49152]") with
// attributes name, full_shape (JSON text, tetra's layout), begin, end, and three 1-D fp32
// datasets: master, exp_avg, exp_avg_sq (elements [begin, end) of the flattened full parameter).
// The moments are fp32 on disk whatever optimizer.state_dtype the run keeps them in (bf16 widens
// exactly on save and rounds to nearest even on load), so the format is one and a checkpoint
// resumes under either setting.
// A piece of a box of the full tensor (a tensor-parallel slice) is "NAME{R0:R1,C0:C1}[BEGIN:END]"
// with attributes box_offset and box_shape (JSON) besides: [begin, end) then counts the box's
// elements in its own row-major order.
// Root attributes say who wrote it: format, version, step, rank, world_size, dp/tp/pp coordinates,
// zero_stage. meta.json indexes the pieces of every file, so readers open only the files they need.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "parallel/distributed_optimizer.h"

namespace tetra::launch {

struct ShardHeader {
  int64_t step = 0;
  int rank = 0, world_size = 1;
  int dp_rank = 0, tp_rank = 0, pp_rank = 0;
  int zero_stage = 0;
};

// "NAME[BEGIN:END]", or "NAME{BOX}[BEGIN:END]" for a piece of a box: the group of a piece.
std::string piece_group(const std::string& name, const TensorBox& box, int64_t begin, int64_t end);

// Writes the pieces (host fp32 tensors of end − begin elements) to a new file at `path`, flushed
// and closed; the caller fsyncs and checksums it. `halfway`, when set, is called once half of the
// pieces are written (at the start when there are none): where fault drills cut a write short.
void write_shard(const std::string& path, const ShardHeader& header, const std::vector<StatePiece>& pieces,
                 const std::function<void()>& halfway = nullptr);

}  // namespace tetra::launch
