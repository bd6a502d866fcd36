// CPU fused softmax cross-entropy, one row at a time, max-subtracted so large logits cannot overflow:
//   lse = max + log Σ exp(logits - max),  loss = lse - logits[target]
//   dlogits = grad_scale · (softmax(logits) - onehot(target))
// Shapes: logits, dlogits [..., V]; targets int32 and losses fp32 = the leading dimensions ([N, V] → [N]).
// A target < 0 is ignored: loss 0 and a zero gradient row. dlogits may alias logits: each row's loss
// is computed before the row is overwritten.
//
// The vocabulary-parallel form (tensor parallelism; runtime/ops.h) splits the same computation over
// the shards of a row: cross_entropy_shard_stats gives each shard's (max, Σ exp(x − max), target
// logit), and cross_entropy_from_stats folds every shard's stats in rank order (in double) into the
// row's max M and lse = M + log S, then writes the loss and this shard's gradient columns.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

void softmax_cross_entropy(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                           float grad_scale) {
  const char* op = "softmax_cross_entropy";
  check_dtype(op, "logits", logits, DType::F32);
  if (logits.ndim() < 1) TETRA_FAIL(Internal, op, ": logits must be [N, V], got ", logits.describe());
  const int64_t V = logits.dim(-1);
  const Shape row_shape = leading_shape(logits);
  check_dtype(op, "targets", targets, DType::I32);
  check_shape(op, "targets", targets, row_shape);
  check_dtype(op, "losses", losses, DType::F32);
  check_shape(op, "losses", losses, row_shape);
  const bool with_grad = given(dlogits);
  if (with_grad) {
    check_dtype(op, "dlogits", *dlogits, DType::F32);
    check_shape(op, "dlogits", *dlogits, logits.shape());
  }
  const int64_t N = rows_of(logits);
  const int32_t* pt = targets.data<int32_t>();
  for (int64_t n = 0; n < N; ++n)
    if (pt[n] >= V)
      TETRA_FAIL(Internal, op, ": target ", pt[n], " at row ", n, " is outside the vocabulary [0, ", V,
                 ") (use a negative target to ignore a position)");

  const float* pl = logits.data<float>();
  float* pd = with_grad ? dlogits->data<float>() : nullptr;
  float* ploss = losses.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* row = pl + n * V;
    const int32_t t = pt[n];
    if (t < 0) {
      ploss[n] = 0.0f;
      if (pd) std::fill_n(pd + n * V, V, 0.0f);
      continue;
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, row[v]);
    const float picked = row[t];  // read before an aliased dlogits overwrites the row
    // One exp per element: e_v = exp(logit_v - max), parked in dlogits (if wanted) and summed in double.
    double sum = 0.0;
    float* drow = pd ? pd + n * V : nullptr;  // may be `row` itself: row[v] is read before drow[v] is written
    for (int64_t v = 0; v < V; ++v) {
      const float e = std::exp(row[v] - mx);
      if (drow) drow[v] = e;
      sum += e;
    }
    ploss[n] = static_cast<float>(static_cast<double>(mx) + std::log(sum) - picked);
    if (drow) {
      const float k = static_cast<float>(grad_scale / sum);  // softmax = e / sum, times grad_scale
      for (int64_t v = 0; v < V; ++v) drow[v] *= k;
      drow[t] -= grad_scale;
    }
  }
}

namespace {

// Checks the shapes shared by the two vocabulary-parallel passes; returns the shard's width Vr.
int64_t check_shard_logits(const char* op, const Tensor& logits, const Tensor& targets, const ops::VocabShard& shard) {
  check_dtype(op, "logits", logits, DType::F32);
  if (logits.ndim() != 2) TETRA_FAIL(Internal, op, ": logits must be [N, Vr], got ", logits.describe());
  const int64_t Vr = logits.dim(1);
  check_dtype(op, "targets", targets, DType::I32);
  check_shape(op, "targets", targets, {logits.dim(0)});
  if (shard.begin < 0 || shard.begin + Vr > shard.vocab)
    TETRA_FAIL(Internal, op, ": vocabulary shard [", shard.begin, ", ", shard.begin + Vr, ") outside [0, ", shard.vocab,
               ")");
  const int32_t* pt = targets.data<int32_t>();
  for (int64_t n = 0; n < logits.dim(0); ++n)
    if (pt[n] >= shard.vocab)
      TETRA_FAIL(Internal, op, ": target ", pt[n], " at row ", n, " is outside the vocabulary [0, ", shard.vocab,
                 ") (use a negative target to ignore a position)");
  return Vr;
}

}  // namespace

void cross_entropy_shard_stats(Tensor& stats, const Tensor& logits, const Tensor& targets, ops::VocabShard shard) {
  const char* op = "cross_entropy_shard_stats";
  const int64_t Vr = check_shard_logits(op, logits, targets, shard);
  const int64_t N = logits.dim(0);
  check_dtype(op, "stats", stats, DType::F32);
  check_shape(op, "stats", stats, {3, N});
  const float* pl = logits.data<float>();
  const int32_t* pt = targets.data<int32_t>();
  float* pm = stats.data<float>();
  float* ps = pm + N;
  float* px = pm + 2 * N;
  for (int64_t n = 0; n < N; ++n) {
    const float* row = pl + n * Vr;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < Vr; ++v) mx = std::max(mx, row[v]);
    double sum = 0.0;
    if (Vr > 0)
      for (int64_t v = 0; v < Vr; ++v) sum += std::exp(row[v] - mx);
    pm[n] = mx;
    ps[n] = static_cast<float>(sum);
    const int64_t t = static_cast<int64_t>(pt[n]) - shard.begin;
    px[n] = pt[n] >= 0 && t >= 0 && t < Vr ? row[t] : 0.0f;
  }
}

void cross_entropy_from_stats(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                              ops::VocabShard shard, const Tensor& all_stats, float grad_scale) {
  const char* op = "cross_entropy_from_stats";
  const int64_t Vr = check_shard_logits(op, logits, targets, shard);
  const int64_t N = logits.dim(0);
  check_dtype(op, "all_stats", all_stats, DType::F32);
  if (all_stats.ndim() != 3 || all_stats.dim(1) != 3 || all_stats.dim(2) != N || all_stats.dim(0) < 1)
    TETRA_FAIL(Internal, op, ": all_stats must be [tp, 3, ", N, "], got ", all_stats.describe());
  const int64_t R = all_stats.dim(0);
  check_dtype(op, "losses", losses, DType::F32);
  check_shape(op, "losses", losses, {N});
  const bool with_grad = given(dlogits);
  if (with_grad) {
    check_dtype(op, "dlogits", *dlogits, DType::F32);
    check_shape(op, "dlogits", *dlogits, logits.shape());
  }
  const float* pl = logits.data<float>();
  const int32_t* pt = targets.data<int32_t>();
  const float* st = all_stats.data<float>();
  float* pd = with_grad ? dlogits->data<float>() : nullptr;
  float* ploss = losses.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    float* drow = pd ? pd + n * Vr : nullptr;
    if (pt[n] < 0) {
      ploss[n] = 0.0f;
      if (drow) std::fill_n(drow, Vr, 0.0f);
      continue;
    }
    // The row's max over every shard, then its sum of exponentials rescaled to it, in rank order.
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < R; ++r) mx = std::max(mx, st[(r * 3) * N + n]);
    double sum = 0.0, picked = 0.0;
    for (int64_t r = 0; r < R; ++r) {
      const float m = st[(r * 3) * N + n], s = st[(r * 3 + 1) * N + n];
      if (s > 0.0f) sum += static_cast<double>(s) * std::exp(static_cast<double>(m) - mx);
      picked += st[(r * 3 + 2) * N + n];
    }
    ploss[n] = static_cast<float>(static_cast<double>(mx) + std::log(sum) - picked);
    if (drow) {
      const float* row = pl + n * Vr;  // may be drow itself: row[v] is read before drow[v] is written
      const float k = static_cast<float>(grad_scale / sum);
      for (int64_t v = 0; v < Vr; ++v) drow[v] = std::exp(row[v] - mx) * k;
      const int64_t t = static_cast<int64_t>(pt[n]) - shard.begin;
      if (t >= 0 && t < Vr) drow[t] -= grad_scale;
    }
  }
}

}  // namespace tetra::cpu
