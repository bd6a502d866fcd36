#include "runtime/fp8_cast_shape.h"

#include "runtime/error.h"

namespace tetra {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Fp8CastShape fp8_cast_shape(const char* op, const Tensor& q, const Tensor& scale, const Tensor& x,
                            ops::Fp8Scaling scaling, const Tensor* q_t) {
  for (const Tensor* t : {&q, &scale, &x})
    if (!t->defined()) TETRA_FAIL(Internal, op, ": an operand is an undefined tensor");
  if (x.dtype() != DType::F32 && x.dtype() != DType::BF16)
    TETRA_FAIL(Internal, op, ": the float operand must be fp32 or bf16, got ", x.describe());
  if (x.ndim() < 1) TETRA_FAIL(Internal, op, ": the float operand must have a dimension, got ", x.describe());
  if (q.dtype() != DType::F8E4M3 && q.dtype() != DType::F8E5M2)
    TETRA_FAIL(Internal, op, ": q must be fp8_e4m3 or fp8_e5m2, got ", q.describe());
  if (q.shape() != x.shape()) TETRA_FAIL(Internal, op, ": q ", q.describe(), " and ", x.describe(), " differ in shape");
  Fp8CastShape s;
  s.format = fp8_format_of(q.dtype());
  s.cols = x.dim(-1);
  s.rows = s.cols == 0 ? 0 : x.numel() / s.cols;
  if (scaling == ops::Fp8Scaling::Tensorwise) {
    s.group_rows = s.rows > 0 ? s.rows : 1;
    s.group_cols = s.cols > 0 ? s.cols : 1;
  } else {
    s.group_rows = scaling == ops::Fp8Scaling::Rows1x128 ? 1 : ops::kFp8Block;
    s.group_cols = ops::kFp8Block;
    s.scale_rows = ceil_div(s.rows, s.group_rows);
    s.scale_cols = ceil_div(s.cols, s.group_cols);
  }
  const Shape want = scaling == ops::Fp8Scaling::Tensorwise ? Shape{1} : Shape{s.scale_rows, s.scale_cols};
  if (scale.dtype() != DType::F32 || scale.shape() != want)
    TETRA_FAIL(Internal, op, ": scale must be fp32 ", shape_str(want), ", got ", scale.describe());
  if (q_t && q_t->defined()) {
    if (scaling != ops::Fp8Scaling::Tensorwise)
      TETRA_FAIL(Internal, op, ": a transposed copy shares the scales of Tensorwise scaling only");
    if (q_t->dtype() != q.dtype() || q_t->shape() != Shape{s.cols, s.rows})
      TETRA_FAIL(Internal, op, ": q_t must be ", dtype_name(q.dtype()), " [", s.cols, ", ", s.rows, "], got ",
                 q_t->describe());
  }
  return s;
}

}  // namespace tetra
