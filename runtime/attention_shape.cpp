#include "runtime/attention_shape.h"

#include "runtime/error.h"

namespace tetra {

namespace {

AttentionDims check_qkv(const char* op, const Tensor& qkv, int64_t n_heads) {
  if (qkv.ndim() != 3) TETRA_FAIL(Internal, op, ": qkv must be [B, T, 3·H·D], got ", qkv.describe());
  if (n_heads <= 0) TETRA_FAIL(Internal, op, ": n_heads must be > 0, got ", n_heads);
  const int64_t width = qkv.dim(2);
  if (width == 0 || width % (3 * n_heads) != 0)
    TETRA_FAIL(Internal, op, ": qkv ", qkv.describe(), " has a last dimension of ", width,
               ", which is not 3·H·D for H = ", n_heads, " heads");
  return {qkv.dim(0), qkv.dim(1), n_heads, width / (3 * n_heads)};
}

}  // namespace

AttentionDims check_attention_forward_shapes(const char* op, const Tensor& out, const Tensor& lse,
                                             const Tensor& qkv, int64_t n_heads) {
  const AttentionDims d = check_qkv(op, qkv, n_heads);
  check_dtype(op, "out", out, qkv.dtype());
  check_shape(op, "out", out, {d.B, d.T, d.H * d.D});
  check_dtype(op, "lse", lse, DType::F32);
  check_shape(op, "lse", lse, {d.B, d.H, d.T});
  check_same_device(op, {&out, &lse, &qkv});
  return d;
}

AttentionDims check_attention_backward_shapes(const char* op, const Tensor& dqkv, const Tensor& dout,
                                              const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                              int64_t n_heads) {
  const AttentionDims d = check_qkv(op, qkv, n_heads);
  check_dtype(op, "dqkv", dqkv, qkv.dtype());
  check_shape(op, "dqkv", dqkv, qkv.shape());
  check_dtype(op, "dout", dout, qkv.dtype());
  check_shape(op, "dout", dout, {d.B, d.T, d.H * d.D});
  check_dtype(op, "out", out, qkv.dtype());
  check_shape(op, "out", out, {d.B, d.T, d.H * d.D});
  check_dtype(op, "lse", lse, DType::F32);
  check_shape(op, "lse", lse, {d.B, d.H, d.T});
  check_same_device(op, {&dqkv, &dout, &qkv, &out, &lse});
  return d;
}

}  // namespace tetra
