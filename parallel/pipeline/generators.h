// The pipeline schedules tetra runs (parallel.schedule), each a short function of (pipeline ranks,
// rank, micro-batches) returning that rank's compute instructions in order (parallel/pipeline/schedule.h).
// Chunk numbers follow PipelineLayout::for_schedule: 0 for gpipe / 1f1b / zb_h1, the virtual chunk
// for interleaved_1f1b, the direction for dualpipe, the leg of the V for dualpipev.
#pragma once
#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"

namespace tetra {

using RankOps = std::vector<Instruction>;

// Every forward, then every backward (GPipe, Huang et al. 2019).
RankOps gpipe_ops(int pp, int rank, int micro_batches);
// One forward, one backward (PipeDream-Flush / Megatron): pp − 1 − rank warm-up forwards.
RankOps one_f_one_b_ops(int pp, int rank, int micro_batches);
// Megatron's interleaved 1F1B with `chunks` virtual stages per rank (chunk c of rank r is stage
// c·pp + r): micro-batches go through the chunks in groups of pp, depth first.
RankOps interleaved_1f1b_ops(int pp, int rank, int micro_batches, int chunks);
// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): 1F1B with the backward split into
// B (input gradient) and W (weight gradient); rank r holds back its first r W's and runs them at
// the end, where 1F1B leaves that rank idle. Same peak activations as 1F1B.
RankOps zb_h1_ops(int pp, int rank, int micro_batches);
// DualPipe (DeepSeek-V3): micro-batches enter from both ends, each rank holds the stages r and
// pp − 1 − r; exactly the compute of the reference DualPipe.step() (github.com/deepseek-ai/DualPipe).
RankOps dualpipe_ops(int pp, int rank, int micro_batches);
// DualPipeV ("cut-in-half" DualPipe): 2·pp stages in a V, exactly the compute of the reference
// DualPipeV.step().
RankOps dualpipev_ops(int pp, int rank, int micro_batches);
// pp = 1 with two micro-batches in flight (parallel.moe_overlap; docs/moe.md): every forward paired
// with the previous micro-batch's backward, F0.0, FB(F0.1,B0.0), …, FB(F0.m−1,B0.m−2), B0.m−1, so
// each pair's MoE exchanges run while the other micro-batch computes. Backwards (and so gradient
// accumulation) keep the micro-batch order.
RankOps forward_backward_pairs_ops(int micro_batches);
// Evaluation: every forward of chunk 0, then of chunk 1, in micro-batch order.
RankOps forward_only_ops(const PipelineLayout& layout, int rank);

// The schedules by name, in the order the docs list them.
const std::vector<std::string>& schedule_names();
// What a schedule needs of pp and the micro-batch count, as a sentence ("dualpipe needs an even
// number of micro-batches, got 7"); empty when (pp, micro_batches) is valid. pp = 1 is always valid
// (the trivial schedule).
std::string schedule_requirement(const std::string& name, int pp, int micro_batches);

// Every rank's list of a schedule, with the point-to-point batches (add_p2p); pp = 1 gives the
// trivial schedule (F0.m, B0.m for each micro-batch). Throws a Usage error when
// schedule_requirement is not met.
Schedule make_schedule(const std::string& name, int pp, int micro_batches);
// The forward-only schedule of the same layout, for evaluation.
Schedule make_forward_only_schedule(const std::string& name, int pp, int micro_batches);

}  // namespace tetra
