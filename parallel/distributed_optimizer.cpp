// The factory of DistributedOptimizer and the ParamSet storage each stage needs.
#include "parallel/distributed_optimizer.h"

#include <algorithm>

#include "parallel/replicated_optimizer.h"
#include "parallel/zero/optimizer.h"

namespace tetra {

ParamStorage param_storage_for(const DistributedOptimizerOptions& options, DType working_dtype, int dp_size) {
  TETRA_CHECK(dp_size >= 1, "param_storage_for: data-parallel size ", dp_size);
  if (options.zero_stage < 0 || options.zero_stage > 3)
    TETRA_FAIL(Config, "parallel.zero_stage: ", options.zero_stage, " (valid: 0, 1, 2, 3)");
  ParamStorage s;
  s.shards = options.zero_stage == 0 ? 1 : dp_size;
  s.full_grads = options.zero_stage <= 1;
  if (options.grad_dtype == DType::F32) {
    s.grad_dtype = DType::F32;
  } else if (options.grad_dtype == DType::BF16) {
    if (working_dtype != DType::BF16)
      TETRA_FAIL(Config, "parallel.grad_dtype: bf16 needs train.precision bf16 (the weights are ",
                 dtype_name(working_dtype), ")");
    s.grad_dtype = DType::BF16;
  } else {
    TETRA_CHECK(!options.grad_dtype, "param_storage_for: gradients in ", dtype_name(*options.grad_dtype),
                " (fp32 or bf16 only)");
    const bool bf16 = working_dtype == DType::BF16;
    s.grad_dtype = bf16 && (options.zero_stage >= 2 || options.accumulation_steps == 1) ? DType::BF16 : DType::F32;
  }
  return s;
}

void append_state_pieces(std::vector<StatePiece>& out, const Param& p, int64_t begin, int64_t end,
                         const Tensor& master, const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  for (const BoxRange& r : box_ranges(p, begin, end)) {
    StatePiece s;
    s.name = p.name;
    s.full_shape = p.full_shape;
    if (!is_whole(r.box, p.full_shape)) s.box = r.box;
    s.begin = r.begin;
    s.end = r.end;
    const int64_t at = r.local_begin - begin, n = r.end - r.begin;
    s.master = master.slice_flat(at, {n});
    s.exp_avg = exp_avg.slice_flat(at, {n});
    s.exp_avg_sq = exp_avg_sq.slice_flat(at, {n});
    out.push_back(std::move(s));
  }
}

void append_saved_state_pieces(std::vector<StatePiece>& out, const Param& p, int64_t begin, int64_t end,
                               const Tensor& master, const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  for (const auto& [lo, hi] : counted_ranges(p)) {
    const int64_t a = std::max(lo, begin), b = std::min(hi, end);
    if (a >= b) continue;
    append_state_pieces(out, p, a, b, master.slice_flat(a - begin, {b - a}), exp_avg.slice_flat(a - begin, {b - a}),
                        exp_avg_sq.slice_flat(a - begin, {b - a}));
  }
}

std::unique_ptr<DistributedOptimizer> make_distributed_optimizer(ParamSet& params, Communicator& dp,
                                                                 CommScheduler& scheduler,
                                                                 const DistributedOptimizerOptions& options,
                                                                 const TpGradGroups& tp) {
  if (options.zero_stage == 0) return std::make_unique<ReplicatedOptimizer>(params, dp, scheduler, options, tp);
  if (options.zero_stage >= 1 && options.zero_stage <= 3)
    return std::make_unique<ZeroOptimizer>(params, dp, scheduler, options, tp);
  TETRA_FAIL(Config, "parallel.zero_stage: ", options.zero_stage, " (valid: 0, 1, 2, 3)");
}

}  // namespace tetra
