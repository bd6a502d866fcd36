// The shapes of an FP8 cast (ops::fp8_quantize / fp8_dequantize), checked once for both backends:
// x or y [M, K] (more dimensions: [rows, last]), q [M, K] in an FP8 dtype, scale fp32 with one
// value per group, q_t [K, M]. Element (m, k) belongs to group (m / group_rows, k / group_cols), whose
// scale is scale[k / 128][m] for Rows1x128 (the rows contiguous) and scale[m / 128][k / 128] for
// Blocks128: the layouts of cuBLASLt's VEC128 and BLK128x128 scale modes on Hopper, whose inner
// (contiguous) dimension is padded to a multiple of 4 floats (fp8_scale_shape).
#pragma once
#include <cstdint>

#include "runtime/fp8_format.h"
#include "runtime/ops.h"

namespace tetra {

// The inner dimension of a block-scaled cast's scales is padded to a multiple of this many floats
// (16 bytes): cuBLASLt reads each row of scales at that pitch (Transformer Engine pads its scales so
// for the same GEMMs). The padding holds 0.
constexpr int64_t kFp8ScalePad = 4;

// The scale tensor of a cast of [rows, cols]: Tensorwise [1]; Rows1x128 [⌈cols/128⌉, rows padded];
// Blocks128 [⌈rows/128⌉, ⌈cols/128⌉ padded].
Shape fp8_scale_shape(ops::Fp8Scaling scaling, int64_t rows, int64_t cols);

struct Fp8CastShape {
  int64_t rows = 0, cols = 0;              // M, K
  int64_t group_rows = 1, group_cols = 1;  // a group's extent (Tensorwise: the whole tensor)
  int64_t scale_rows = 1, scale_cols = 1;  // groups down and across
  bool rows_inner = true;  // Rows1x128: scale [scale_cols, ld]; Blocks128: [scale_rows, ld]
  int64_t scale_ld = 1;    // the scale tensor's inner extent: scale_rows (Rows1x128) or scale_cols, padded
  int64_t scale_index(int64_t m, int64_t k) const {
    return rows_inner ? (k / group_cols) * scale_ld + m / group_rows : (m / group_rows) * scale_ld + k / group_cols;
  }
  // Whether scale entry g is padding (no group of x).
  bool is_padding(int64_t g) const { return g % scale_ld >= (rows_inner ? scale_rows : scale_cols); }
  Fp8Format format = Fp8Format::E4M3;
};

// The groups of a cast of [rows, cols] with `scaling` (format E4M3).
Fp8CastShape fp8_groups(ops::Fp8Scaling scaling, int64_t rows, int64_t cols);

// Checks q, scale, the float tensor `x` (x or y: fp32 or bf16), q_t and scale_t (each may be null;
// scale_t as fp8_quantize's for xᵀ) and returns the shape of x's groups; a mismatch is an Internal
// error naming `op` and the tensor.
Fp8CastShape fp8_cast_shape(const char* op, const Tensor& q, const Tensor& scale, const Tensor& x,
                            ops::Fp8Scaling scaling, const Tensor* q_t = nullptr, const Tensor* scale_t = nullptr);

// fp8_quantize's given amax (may be null): U32 [1], and only with Tensorwise scaling; else an Internal
// error naming `op`. Returns whether it is given.
bool fp8_check_amax(const char* op, const Tensor* amax, ops::Fp8Scaling scaling);
// fp8_amax's output: U32 [1].
void fp8_check_amax_out(const char* op, const Tensor& amax);
// A per-row amax (ops.h row_amax): U32 [rows].
void fp8_check_row_amax(const char* op, const Tensor& row_amax, int64_t rows);
// fp8_slice_amax / fp8_slice_quantize: the groups of a cast of w [rows, cols] (format E4M3 unless q
// is given). Checks amax (I32, w's scale shape), x (fp32 or bf16, one dimension, inside w from
// `begin`), and q (x's element count, FP8) and scale (w's) where given.
Fp8CastShape fp8_slice_shape(const char* op, const Tensor& amax, const Tensor& x, int64_t begin, int64_t rows,
                             int64_t cols, ops::Fp8Scaling scaling, const Tensor* q = nullptr,
                             const Tensor* scale = nullptr);
// fp8_transpose: q [M, K] with its scale and q_t [K, M] (q's dtype) with scale_t (as fp8_quantize's of
// qᵀ); Tensorwise or Blocks128. Returns q's groups.
Fp8CastShape fp8_transpose_shape(const char* op, const Tensor& q_t, const Tensor& scale_t, const Tensor& q,
                                 const Tensor& scale, ops::Fp8Scaling scaling);

// fp8_gemm's operands: a [M, K] and b [N, K] FP8 with their scales (checked as fp8_quantize's
// outputs), y [M, N] fp32 or bf16. Returns {M, N, K}.
struct Fp8GemmShape {
  int64_t m = 0, n = 0, k = 0;
};
Fp8GemmShape fp8_gemm_shape(const char* op, const Tensor& y, const Tensor& a, const Tensor& a_scale,
                            ops::Fp8Scaling a_scaling, const Tensor& b, const Tensor& b_scale,
                            ops::Fp8Scaling b_scaling);

// fp8_gemm's epilogue (ops::Fp8Epilogue) against y [M, N]: what it may combine, and each tensor's
// dtype, shape and overlap with y; a violation is an Internal error naming `op` and the tensor.
void fp8_check_epilogue(const char* op, const Tensor& y, bool accumulate, const ops::Fp8Epilogue& e);

}  // namespace tetra
