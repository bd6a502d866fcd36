#include "runtime/attention_shape.h"

#include "runtime/error.h"

namespace tetra {

namespace {

AttentionDims check_qkv(const char* op, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads) {
  if (qkv.ndim() != 3) TETRA_FAIL(Internal, op, ": qkv must be [B, T, (H + 2·Hkv)·D], got ", qkv.describe());
  if (n_heads <= 0) TETRA_FAIL(Internal, op, ": n_heads must be > 0, got ", n_heads);
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    TETRA_FAIL(Internal, op, ": n_kv_heads = ", n_kv_heads, " must divide n_heads = ", n_heads,
               " (n_kv_heads = n_heads is plain multi-head attention)");
  const int64_t width = qkv.dim(2), heads = n_heads + 2 * n_kv_heads;
  if (width == 0 || width % heads != 0)
    TETRA_FAIL(Internal, op, ": qkv ", qkv.describe(), " has a last dimension of ", width,
               ", which is not (H + 2·Hkv)·D for H = ", n_heads, " query heads and Hkv = ", n_kv_heads,
               " key/value heads");
  return {qkv.dim(0), qkv.dim(1), n_heads, n_kv_heads, width / heads};
}

}  // namespace

AttentionDims check_attention_forward_shapes(const char* op, const Tensor& out, const Tensor& lse,
                                             const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads) {
  const AttentionDims d = check_qkv(op, qkv, n_heads, n_kv_heads);
  check_dtype(op, "out", out, qkv.dtype());
  check_shape(op, "out", out, {d.B, d.T, d.H * d.D});
  check_dtype(op, "lse", lse, DType::F32);
  check_shape(op, "lse", lse, {d.B, d.H, d.T});
  check_same_device(op, {&out, &lse, &qkv});
  return d;
}

AttentionDims check_attention_decode_shapes(const char* op, const Tensor& out, const Tensor& cache, int64_t length,
                                            int64_t n_heads, int64_t n_kv_heads) {
  AttentionDims d = check_qkv(op, cache, n_heads, n_kv_heads);
  check_dtype(op, "out", out, cache.dtype());
  if (out.ndim() != 3 || out.dim(0) != d.B || out.dim(2) != d.H * d.D)
    TETRA_FAIL(Internal, op, ": out must be [B, Tq, H·D] = [", d.B, ", Tq, ", d.H * d.D, "], got ", out.describe());
  if (out.dim(1) < 1 || out.dim(1) > length || length > d.T)
    TETRA_FAIL(Internal, op, ": ", out.dim(1), " queries, ", length, " cached rows of ", d.T,
               " (need 1 ≤ Tq ≤ length ≤ T_max)");
  check_same_device(op, {&out, &cache});
  d.T = length;
  return d;
}

AttentionDims check_attention_backward_shapes(const char* op, const Tensor& dqkv, const Tensor& dout,
                                              const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                              int64_t n_heads, int64_t n_kv_heads) {
  const AttentionDims d = check_qkv(op, qkv, n_heads, n_kv_heads);
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
