// CPU fused softmax cross-entropy, one row at a time, max-subtracted so large logits cannot overflow:
//   lse = max + log Σ exp(logits - max),  loss = lse - logits[target]
//   dlogits = grad_scale · (softmax(logits) - onehot(target))
// Shapes: logits, dlogits [..., V]; targets int32 and losses fp32 = the leading dimensions ([N, V] → [N]).
// A target < 0 is ignored: loss 0 and a zero gradient row. dlogits may alias logits: each row's loss
// is computed before the row is overwritten.
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

}  // namespace tetra::cpu
