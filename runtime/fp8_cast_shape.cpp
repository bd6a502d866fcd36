#include "runtime/fp8_cast_shape.h"

#include <string>
#include <utility>

#include "runtime/error.h"

namespace tetra {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t padded(int64_t n) { return ceil_div(n, kFp8ScalePad) * kFp8ScalePad; }

}  // namespace

Fp8CastShape fp8_groups(ops::Fp8Scaling scaling, int64_t rows, int64_t cols) {
  Fp8CastShape s;
  s.rows = rows;
  s.cols = cols;
  if (scaling == ops::Fp8Scaling::Tensorwise) {
    s.group_rows = s.rows > 0 ? s.rows : 1;
    s.group_cols = s.cols > 0 ? s.cols : 1;
  } else {
    s.group_rows = scaling == ops::Fp8Scaling::Rows1x128 ? 1 : ops::kFp8Block;
    s.group_cols = ops::kFp8Block;
    s.scale_rows = ceil_div(s.rows, s.group_rows);
    s.scale_cols = ceil_div(s.cols, s.group_cols);
    s.rows_inner = scaling == ops::Fp8Scaling::Rows1x128;
    s.scale_ld = padded(s.rows_inner ? s.scale_rows : s.scale_cols);
  }
  return s;
}

namespace {

// q (an FP8 tensor, [rows, last]) and its scale: the groups of `scaling` over q's shape.
Fp8CastShape fp8_operand_shape(const char* op, const char* name, const Tensor& q, const Tensor& scale,
                               ops::Fp8Scaling scaling) {
  if (!q.defined() || !scale.defined()) TETRA_FAIL(Internal, op, ": ", name, " or its scale is undefined");
  if (q.dtype() != DType::F8E4M3 && q.dtype() != DType::F8E5M2)
    TETRA_FAIL(Internal, op, ": ", name, " must be fp8_e4m3 or fp8_e5m2, got ", q.describe());
  if (q.ndim() < 1) TETRA_FAIL(Internal, op, ": ", name, " must have a dimension, got ", q.describe());
  const int64_t cols = q.dim(-1);
  Fp8CastShape s = fp8_groups(scaling, cols == 0 ? 0 : q.numel() / cols, cols);
  s.format = fp8_format_of(q.dtype());
  const Shape want = fp8_scale_shape(scaling, s.rows, s.cols);
  if (scale.dtype() != DType::F32 || scale.shape() != want)
    TETRA_FAIL(Internal, op, ": the scale of ", name, " must be fp32 ", shape_str(want), ", got ", scale.describe());
  return s;
}

}  // namespace

Shape fp8_scale_shape(ops::Fp8Scaling scaling, int64_t rows, int64_t cols) {
  switch (scaling) {
    case ops::Fp8Scaling::Tensorwise: return {1};
    case ops::Fp8Scaling::Rows1x128: return {ceil_div(cols, ops::kFp8Block), padded(rows)};
    case ops::Fp8Scaling::Blocks128: return {ceil_div(rows, ops::kFp8Block), padded(ceil_div(cols, ops::kFp8Block))};
  }
  return {1};
}

Fp8CastShape fp8_cast_shape(const char* op, const Tensor& q, const Tensor& scale, const Tensor& x,
                            ops::Fp8Scaling scaling, const Tensor* q_t, const Tensor* scale_t) {
  if (!x.defined()) TETRA_FAIL(Internal, op, ": the float operand is undefined");
  if (x.dtype() != DType::F32 && x.dtype() != DType::BF16)
    TETRA_FAIL(Internal, op, ": the float operand must be fp32 or bf16, got ", x.describe());
  const Fp8CastShape s = fp8_operand_shape(op, "q", q, scale, scaling);
  if (q.shape() != x.shape()) TETRA_FAIL(Internal, op, ": q ", q.describe(), " and ", x.describe(), " differ in shape");
  const bool transposed = q_t && q_t->defined();
  if (!transposed) {
    if (scale_t && scale_t->defined()) TETRA_FAIL(Internal, op, ": scale_t is given without q_t");
    return s;
  }
  if (q_t->dtype() != q.dtype() || q_t->shape() != Shape{s.cols, s.rows})
    TETRA_FAIL(Internal, op, ": q_t must be ", dtype_name(q.dtype()), " [", s.cols, ", ", s.rows, "], got ",
               q_t->describe());
  const bool scale_t_given = scale_t && scale_t->defined();
  if (scaling != ops::Fp8Scaling::Tensorwise && !scale_t_given)
    TETRA_FAIL(Internal, op, ": q_t of block scaling needs its own scales (scale_t)");
  if (scale_t_given) fp8_operand_shape(op, "q_t", *q_t, *scale_t, scaling);
  return s;
}

void fp8_check_amax_out(const char* op, const Tensor& amax) {
  if (!amax.defined() || amax.dtype() != DType::U32 || amax.shape() != Shape{1})
    TETRA_FAIL(Internal, op, ": amax must be u32 [1] (the bits of an fp32 amax), got ",
               amax.defined() ? amax.describe() : std::string("an undefined tensor"));
}

void fp8_check_row_amax(const char* op, const Tensor& row_amax, int64_t rows) {
  if (!row_amax.defined() || row_amax.dtype() != DType::U32 || row_amax.shape() != Shape{rows})
    TETRA_FAIL(Internal, op, ": row_amax must be u32 [", rows, "] (one amax per row, the bits), got ",
               row_amax.defined() ? row_amax.describe() : std::string("an undefined tensor"));
}

bool fp8_check_amax(const char* op, const Tensor* amax, ops::Fp8Scaling scaling) {
  if (!amax || !amax->defined()) return false;
  fp8_check_amax_out(op, *amax);
  if (scaling != ops::Fp8Scaling::Tensorwise)
    TETRA_FAIL(Internal, op, ": a given amax scales a Tensorwise cast only (block scaling takes each group's own)");
  return true;
}

Fp8CastShape fp8_slice_shape(const char* op, const Tensor& amax, const Tensor& x, int64_t begin, int64_t rows,
                             int64_t cols, ops::Fp8Scaling scaling, const Tensor* q, const Tensor* scale) {
  if (!amax.defined() || !x.defined()) TETRA_FAIL(Internal, op, ": amax or x is undefined");
  if (rows < 0 || cols < 0 || begin < 0 || begin + x.numel() > rows * cols)
    TETRA_FAIL(Internal, op, ": a slice of ", x.numel(), " elements from ", begin, " is not inside [", rows, ", ",
               cols, "]");
  if (x.dtype() != DType::F32 && x.dtype() != DType::BF16)
    TETRA_FAIL(Internal, op, ": x must be fp32 or bf16, got ", x.describe());
  const Shape want = fp8_scale_shape(scaling, rows, cols);
  if (amax.dtype() != DType::I32 || amax.shape() != want)
    TETRA_FAIL(Internal, op, ": amax must be int32 ", shape_str(want), ", got ", amax.describe());
  Fp8CastShape s = fp8_groups(scaling, rows, cols);
  if (q && q->defined()) {
    if (q->numel() != x.numel()) TETRA_FAIL(Internal, op, ": q ", q->describe(), " must hold x's ", x.numel(), " elements");
    s.format = fp8_format_of(q->dtype());
  }
  if (scale && scale->defined() && (scale->dtype() != DType::F32 || scale->shape() != want))
    TETRA_FAIL(Internal, op, ": scale must be fp32 ", shape_str(want), ", got ", scale->describe());
  return s;
}

Fp8CastShape fp8_transpose_shape(const char* op, const Tensor& q_t, const Tensor& scale_t, const Tensor& q,
                                 const Tensor& scale, ops::Fp8Scaling scaling) {
  if (scaling == ops::Fp8Scaling::Rows1x128)
    TETRA_FAIL(Internal, op, ": a 1x128 cast's transposed copy has groups of its own (cast xᵀ instead)");
  const Fp8CastShape s = fp8_operand_shape(op, "q", q, scale, scaling);
  if (q.ndim() != 2) TETRA_FAIL(Internal, op, ": q must be a matrix, got ", q.describe());
  fp8_operand_shape(op, "q_t", q_t, scale_t, scaling);
  if (q_t.dtype() != q.dtype() || q_t.shape() != Shape{s.cols, s.rows})
    TETRA_FAIL(Internal, op, ": q_t must be ", dtype_name(q.dtype()), " [", s.cols, ", ", s.rows, "], got ",
               q_t.describe());
  return s;
}

Fp8GemmShape fp8_gemm_shape(const char* op, const Tensor& y, const Tensor& a, const Tensor& a_scale,
                            ops::Fp8Scaling a_scaling, const Tensor& b, const Tensor& b_scale,
                            ops::Fp8Scaling b_scaling) {
  for (const Tensor* t : {&y, &a, &b})
    if (!t->defined() || t->ndim() != 2) TETRA_FAIL(Internal, op, ": y, a and b must be 2-D tensors");
  fp8_operand_shape(op, "a", a, a_scale, a_scaling);
  fp8_operand_shape(op, "b", b, b_scale, b_scaling);
  const Fp8GemmShape s{a.dim(0), b.dim(0), a.dim(1)};
  if (b.dim(1) != s.k) TETRA_FAIL(Internal, op, ": a ", a.describe(), " and b ", b.describe(), " differ in K");
  if (y.dtype() != DType::F32 && y.dtype() != DType::BF16)
    TETRA_FAIL(Internal, op, ": y must be fp32 or bf16, got ", y.describe());
  if (y.shape() != Shape{s.m, s.n}) TETRA_FAIL(Internal, op, ": y must be [", s.m, ", ", s.n, "], got ", y.describe());
  return s;
}

void fp8_check_epilogue(const char* op, const Tensor& y, bool accumulate, const ops::Fp8Epilogue& e) {
  if (e.amax) fp8_check_amax_out(op, *e.amax);
  if (!e.transforms()) return;
  if (accumulate) TETRA_FAIL(Internal, op, ": an epilogue writes y whole (accumulate must be false)");
  if ((e.residual ? 1 : 0) + (e.gelu_pre ? 1 : 0) + (e.dgelu_pre ? 1 : 0) > 1)
    TETRA_FAIL(Internal, op, ": an epilogue takes at most one of residual, gelu_pre and dgelu_pre");
  if (e.dgelu_pre && e.bias) TETRA_FAIL(Internal, op, ": the GELU backward epilogue adds no bias");
  const int64_t N = y.ndim() == 2 ? y.dim(1) : 0;
  if (e.bias) {
    const Tensor& b = *e.bias;
    if (!b.defined() || (b.dtype() != DType::F32 && b.dtype() != DType::BF16) || b.shape() != Shape{N})
      TETRA_FAIL(Internal, op, ": bias must be fp32 or bf16 [", N, "], got ",
                 b.defined() ? b.describe() : std::string("an undefined tensor"));
  }
  const std::pair<const char*, const Tensor*> like_y[] = {
      {"residual", e.residual}, {"gelu_pre", e.gelu_pre}, {"dgelu_pre", e.dgelu_pre}};
  for (const auto& [what, t] : like_y) {
    if (!t) continue;
    if (!t->defined() || t->dtype() != y.dtype() || t->shape() != y.shape())
      TETRA_FAIL(Internal, op, ": ", what, " must be ", y.describe(), "'s dtype and shape, got ",
                 t->defined() ? t->describe() : std::string("an undefined tensor"));
    if (t == e.residual)
      check_same_or_disjoint(op, what, y, *t);
    else
      check_disjoint(op, what, y, *t);
  }
}

}  // namespace tetra
