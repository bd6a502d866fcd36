// CUDA dense layer on cuBLASLt (runtime/cuda/cublaslt.h). Weights are [O, I] row-major, like
// nn.Linear; x, y, dx, dy may carry leading dimensions ([B, T, F] is read as [N = B·T, F]).
//   forward          y[N, O]  = act(x[N, I] · w[O, I]ᵀ + b[O])        (pre_act[N, O] = x·wᵀ + b)
//                    y[N, O]  = x · wᵀ + b + residual[N, O]             (act None; y may be residual)
//   backward input   dx[N, I] (+)= dy[N, O] · w[O, I]
//                    dx[N, I]  = (dy · w) ⊙ gelu'(gelu_pre[N, I])      (DGELU epilogue, aux = gelu_pre)
//   backward weight  dw[O, I] (+)= dy[N, O]ᵀ · x[N, I],   db[O] (+)= Σ_n dy[n, :] (or a given sum of it)
//
// Row-major to column-major. cuBLASLt is column-major; a row-major [r, c] matrix with row stride c
// is, byte for byte, the column-major [c, r] matrix (its transpose) with leading dimension c. So:
//   forward:  yᵀ[O, N] = (wᵀ)ᵀ · xᵀ      A = w as col-major [I, O] (lda I), op T  → [O, I]
//                                         B = x as col-major [I, N] (ldb I), op N
//                                         D = y as col-major [O, N] (ldd O);  m = O, n = N, k = I
//             bias [O] = D's rows → CUBLASLT_EPILOGUE_BIAS; GELU aux = pre_act, col-major [O, N], ld O.
//   dx:       dxᵀ[I, N] = wᵀ · dyᵀ        A = w as col-major [I, O] (lda I), op N
//                                         B = dy as col-major [O, N] (ldb O), op N
//                                         D = dx as col-major [I, N] (ldd I); m = I, n = N, k = O
//   dw:       dwᵀ[I, O] = xᵀ · dy         A = x as col-major [I, N] (lda I), op N
//                                         B = dy as col-major [O, N] (ldb O), op T → [N, O]
//                                         D = dw as col-major [I, O] (ldd I); m = I, n = O, k = N
//             db[O] = Σ_n dy[n, :]: a column sum of dy (runtime/cuda/reduce.h), after the GEMM.
// accumulate: beta = 1 with C = D.
// residual: beta = 1 with C = the residual (its layout is D's: col-major [O, N], ld O); when y is
// the residual itself, C = D (in place). The bias epilogue still applies: y = x·wᵀ + b + residual.
//
// Types: x/w (dy/w, dy/x) fp32 or bf16, the same; outputs of that type or fp32; pre_act, db of the
// output's type; b of the output's type or the inputs' (bf16 x/w/b with an fp32 y and residual:
// the fp32 residual stream, docs/kernels.md "Residual stream precision"). cuBLASLt's bias epilogue
// takes a bias of D's type only, so a bf16 b for an fp32 y is widened into an fp32 [O] scratch
// first (exact; one tiny kernel). Compute fp32 (no TF32). Fused GELU (GELU_AUX_BIAS) is used for
// bf16 outputs; fp32 outputs take GEMM + bias epilogue, then the GELU kernel, so the fp32 path stays
// exact.
// Whenever cuBLASLt has no algorithm for an epilogue, the unfused path (plain GEMM + kernels) runs.
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/reduce.h"

namespace tetra::cuda {

namespace {

cudaDataType_t lt_type(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// The output dtype must be the inputs' dtype or fp32 (cuBLASLt has no fp32-in, bf16-out GEMM).
void check_output_type(const char* op, const char* what, const Tensor& out, DType in) {
  if (out.dtype() != in && out.dtype() != DType::F32)
    TETRA_FAIL(Internal, op, ": ", what, " is ", dtype_name(out.dtype()), " but the inputs are ", dtype_name(in),
               " (outputs must have the inputs' dtype or fp32)");
}

void check_weight(const char* op, const char* what, const Tensor& w) {
  check_cuda_float(op, what, w);
  if (w.ndim() != 2) TETRA_FAIL(Internal, op, ": ", what, " must be 2-D [O, I], got ", w.describe());
}

// y[n, o] += b[o] for y [N, O] (the unfused bias; not on the hot path).
template <class TY, class TB>
__global__ void add_bias_kernel(TY* y, const TB* b, int64_t N, int64_t O) {
  const int64_t total = N * O;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    y[i] = from_f32<TY>(to_f32(y[i]) + to_f32(b[i % O]));
}

void add_bias(Tensor& y, const Tensor& b, int64_t N, int64_t O) {
  const Device dev = y.device();
  dispatch_float(y.dtype(), "linear_forward", "y", [&](auto ty) {
    dispatch_float(b.dtype(), "linear_forward", "b", [&](auto tb) {
      using TY = decltype(ty);
      using TB = decltype(tb);
      add_bias_kernel<TY, TB><<<grid_size(N * O, 256, dev), 256, 0, stream_of(dev)>>>(
          static_cast<TY*>(y.data_ptr()), static_cast<const TB*>(b.data_ptr()), N, O);
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
}

// Runs a plain GEMM (no epilogue), failing with the problem if cuBLASLt has no algorithm at all.
void lt_matmul_plain(LtProblem p, Device dev, const char* op) {
  p.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  p.bias = nullptr;
  p.aux = nullptr;
  p.aux_ld = 0;
  if (!lt_matmul(p, dev, stream_of(dev)))
    TETRA_FAIL(Device, op, ": cuBLASLt has no algorithm for a ", p.m, "×", p.n, "×", p.k,
               " GEMM with these types and alignments");
}

// The checks both input-gradient ops share (dx[N, I] from dy[N, O] and w[O, I]); returns N.
int64_t check_input_gradient(const char* op, const Tensor& dx, const Tensor& dy, const Tensor& w) {
  check_weight(op, "w", w);
  check_cuda_float(op, "dy", dy);
  check_last_dim(op, "dy", dy, w.dim(0));
  check_dtype(op, "dy", dy, w.dtype());
  check_cuda_float(op, "dx", dx);
  check_shape(op, "dx", dx, with_last(leading_shape(dy), w.dim(1)));
  check_output_type(op, "dx", dx, dy.dtype());
  return rows_of(dy);
}

// dxᵀ[I, N] = wᵀ · dyᵀ as cuBLASLt sees it (the mapping in the header comment).
LtProblem input_gradient_problem(Tensor& dx, const Tensor& dy, const Tensor& w, int64_t N) {
  const int64_t O = w.dim(0), I = w.dim(1);
  LtProblem p;
  p.m = I, p.n = N, p.k = O;
  p.lda = I, p.ldb = O, p.ldd = I;
  p.ab_type = lt_type(dy.dtype());
  p.d_type = lt_type(dx.dtype());
  p.a = w.data_ptr();
  p.b = dy.data_ptr();
  p.d = dx.data_ptr();
  return p;
}

// The forward's argument checks (the shapes and dtypes in the header comment); returns N.
int64_t check_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                      const Tensor* pre_act, const Tensor* residual) {
  const char* op = "linear_forward";
  check_weight(op, "w", w);
  const int64_t O = w.dim(0), I = w.dim(1);
  check_cuda_float(op, "x", x);
  check_last_dim(op, "x", x, I);
  check_dtype(op, "x", x, w.dtype());
  const Shape y_shape = with_last(leading_shape(x), O);
  check_cuda_float(op, "y", y);
  check_shape(op, "y", y, y_shape);
  check_output_type(op, "y", y, x.dtype());
  if (b.defined()) {
    check_cuda_float(op, "b", b);
    if (b.dtype() != y.dtype() && b.dtype() != x.dtype())
      TETRA_FAIL(Internal, op, ": b is ", dtype_name(b.dtype()), " but y is ", dtype_name(y.dtype()), " and x ",
                 dtype_name(x.dtype()), " (b must have y's dtype or x's)");
    check_shape(op, "b", b, {O});
  }
  if (given(pre_act)) {
    check_cuda_float(op, "pre_act", *pre_act);
    check_dtype(op, "pre_act", *pre_act, y.dtype());
    check_shape(op, "pre_act", *pre_act, y_shape);
  }
  if (given(residual)) {
    if (act != Activation::None)
      TETRA_FAIL(Internal, op, ": a residual can only be added with Activation::None (y = x·wᵀ + b + residual)");
    if (given(pre_act)) TETRA_FAIL(Internal, op, ": a residual cannot be combined with pre_act");
    check_cuda_float(op, "residual", *residual);
    check_dtype(op, "residual", *residual, y.dtype());
    check_shape(op, "residual", *residual, y_shape);
    check_same_or_disjoint(op, "residual", y, *residual);
  }
  return rows_of(x);
}

// The forward's outputs: y, and z = x·wᵀ + b (+ residual) before the activation, which is pre_act
// when kept and y itself otherwise. by is the bias in y's dtype (null without one).
struct ForwardOutputs {
  Tensor& y;
  Tensor& z;
  bool keep_pre;
  const Tensor* by;
};

// y from z: GELU (elementwise, so z may be y itself), or a copy where z is pre_act.
void finish_activation(const ForwardOutputs& out, Activation act) {
  if (act == Activation::Gelu) gelu_forward(out.y, out.z, nullptr);
  else if (out.keep_pre) copy(out.y, out.z);
}

// I = 0, an empty sum: y = act(b) or act(0), or b + residual.
void forward_empty_sum(const ForwardOutputs& out, Activation act, const Tensor* residual, int64_t N, int64_t O) {
  if (given(residual)) {
    if (residual->data_ptr() != out.y.data_ptr()) copy(out.y, *residual);
  } else {
    zero(out.z);
  }
  if (out.by != nullptr) add_bias(out.z, *out.by, N, O);
  finish_activation(out, act);
}

// Fused GELU for bf16 outputs: y = gelu(z) straight from the GEMM, z into pre_act when kept.
// False when the case does not apply or cuBLASLt has no algorithm for the epilogue.
bool forward_fused_gelu(LtProblem p, const ForwardOutputs& out, Activation act, Device dev) {
  const int64_t O = p.m;
  if (act != Activation::Gelu || out.y.dtype() != DType::BF16 || (out.keep_pre && O % 8 != 0)) return false;
  p.d = out.y.data_ptr();
  p.bias = out.by != nullptr ? out.by->data_ptr() : nullptr;
  if (out.keep_pre) {
    p.epilogue = out.by != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    p.aux = out.z.data_ptr();
    p.aux_ld = O;
  } else {
    p.epilogue = out.by != nullptr ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  return lt_matmul(p, dev, stream_of(dev));
}

// z = x·wᵀ (+ b) (+ residual), the bias by the epilogue where cuBLASLt has one, then the activation.
void forward_unfused(LtProblem p, const ForwardOutputs& out, Activation act, Device dev) {
  const int64_t O = p.m, N = p.n;
  p.d = out.z.data_ptr();
  bool bias_done = false;
  if (out.by != nullptr) {
    LtProblem f = p;
    f.epilogue = CUBLASLT_EPILOGUE_BIAS;
    f.bias = out.by->data_ptr();
    bias_done = lt_matmul(f, dev, stream_of(dev));
  }
  if (!bias_done) {
    lt_matmul_plain(p, dev, "linear_forward");
    if (out.by != nullptr) add_bias(out.z, *out.by, N, O);
  }
  finish_activation(out, act);
}

}  // namespace

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                    Tensor* pre_act, const Tensor* residual) {
  const int64_t N = check_forward(y, x, w, b, act, pre_act, residual);
  const int64_t O = w.dim(0), I = w.dim(1);
  if (N == 0 || O == 0) return;
  const Device dev = y.device();
  DeviceScope scope(dev);
  // The bias in y's dtype, as cuBLASLt's epilogue reads it: b itself, or (an fp32 y with a bf16 b,
  // the fp32 residual stream) b widened into a scratch [O].
  Tensor widened;
  const Tensor* by = b.defined() ? &b : nullptr;
  if (by != nullptr && b.dtype() != y.dtype()) {
    widened = Tensor::empty({O}, y.dtype(), dev);
    copy(widened, b);
    by = &widened;
  }
  const bool keep_pre = given(pre_act);
  const ForwardOutputs out{y, keep_pre ? *pre_act : y, keep_pre, by};
  if (I == 0) return forward_empty_sum(out, act, residual, N, O);

  LtProblem p;
  p.trans_a = true;
  p.trans_b = false;
  p.m = O, p.n = N, p.k = I;
  p.lda = I, p.ldb = I, p.ldd = O;
  p.ab_type = lt_type(x.dtype());
  p.d_type = lt_type(y.dtype());
  p.a = w.data_ptr();
  p.b = x.data_ptr();
  if (given(residual)) {
    p.c = residual->data_ptr();  // y itself when in place
    p.beta = 1.0f;
  }
  if (!forward_fused_gelu(p, out, act, dev)) forward_unfused(p, out, act, dev);
}

void linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, bool accumulate) {
  const char* op = "linear_backward_input";
  const int64_t N = check_input_gradient(op, dx, dy, w);
  if (N == 0 || w.dim(1) == 0) return;
  const Device dev = dx.device();
  DeviceScope scope(dev);
  if (w.dim(0) == 0) {
    if (!accumulate) zero(dx);
    return;
  }
  LtProblem p = input_gradient_problem(dx, dy, w, N);
  p.beta = accumulate ? 1.0f : 0.0f;
  lt_matmul_plain(p, dev, op);
}

void linear_backward_input_gelu(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& gelu_pre) {
  const char* op = "linear_backward_input_gelu";
  const int64_t N = check_input_gradient(op, dx, dy, w);
  check_cuda_float(op, "gelu_pre", gelu_pre);
  check_dtype(op, "gelu_pre", gelu_pre, dx.dtype());
  check_shape(op, "gelu_pre", gelu_pre, dx.shape());
  check_disjoint(op, "gelu_pre", dx, gelu_pre);
  const int64_t O = w.dim(0), I = w.dim(1);
  if (N == 0 || I == 0) return;
  const Device dev = dx.device();
  DeviceScope scope(dev);
  // bf16: the GELU gradient applied in the GEMM's epilogue to the fp32 accumulator, reading gelu_pre
  // as cuBLASLt's aux operand (col-major [I, N], ld I, a multiple of 8). fp32 takes GEMM + the
  // GELU kernel (exact tanhf), as the forward does.
  if (O > 0 && dx.dtype() == DType::BF16 && I % 8 == 0) {
    LtProblem p = input_gradient_problem(dx, dy, w, N);
    p.epilogue = CUBLASLT_EPILOGUE_DGELU;
    p.aux = gelu_pre.data_ptr();  // read, never written (DGELU)
    p.aux_ld = I;
    if (lt_matmul(p, dev, stream_of(dev))) return;
  }
  linear_backward_input(dx, dy, w, /*accumulate=*/false);
  gelu_backward(dx, dx, gelu_pre, nullptr);
}

void linear_backward_weight(Tensor& dw, Tensor* db, const Tensor& dy, const Tensor& x, bool accumulate,
                            const Tensor* dy_column_sum) {
  const char* op = "linear_backward_weight";
  check_cuda_float(op, "dw", dw);
  if (dw.ndim() != 2) TETRA_FAIL(Internal, op, ": dw must be 2-D [O, I], got ", dw.describe());
  const int64_t O = dw.dim(0), I = dw.dim(1);
  check_cuda_float(op, "dy", dy);
  check_last_dim(op, "dy", dy, O);
  check_cuda_float(op, "x", x);
  check_dtype(op, "x", x, dy.dtype());
  check_shape(op, "x", x, with_last(leading_shape(dy), I));
  check_output_type(op, "dw", dw, dy.dtype());
  const int64_t N = rows_of(dy);
  const bool with_bias = given(db);
  if (with_bias) {
    check_cuda_float(op, "db", *db);
    check_shape(op, "db", *db, {O});
    check_output_type(op, "db", *db, dy.dtype());
  }
  const bool with_sum = given(dy_column_sum);
  if (with_sum) {
    if (!with_bias) TETRA_FAIL(Internal, op, ": dy_column_sum is given but there is no db to take it");
    check_cuda_tensor(op, "dy_column_sum", *dy_column_sum);
    check_dtype(op, "dy_column_sum", *dy_column_sum, DType::F32);
    check_shape(op, "dy_column_sum", *dy_column_sum, {O});
  }
  if (O == 0) return;
  const Device dev = dw.device();
  DeviceScope scope(dev);
  // db (+)= Σ_n dy[n, :], from the given sum (one short fold) or by reading dy.
  auto bias_gradient = [&] {
    if (with_sum) column_sum(*db, *dy_column_sum, 1, O, accumulate);
    else column_sum(*db, dy, N, O, accumulate);
  };
  if (N == 0 || I == 0) {  // no GEMM: dw is an empty sum (N = 0) or empty (I = 0)
    if (N == 0 && !accumulate) zero(dw);
    if (with_bias) bias_gradient();
    return;
  }

  LtProblem p;
  p.trans_a = false;
  p.trans_b = true;
  p.m = I, p.n = O, p.k = N;
  p.lda = I, p.ldb = O, p.ldd = I;
  p.ab_type = lt_type(dy.dtype());
  p.d_type = lt_type(dw.dtype());
  p.a = x.data_ptr();
  p.b = dy.data_ptr();
  p.d = dw.data_ptr();
  p.beta = accumulate ? 1.0f : 0.0f;
  lt_matmul_plain(p, dev, op);
  // The bias gradient by its own pass over dy, not cuBLASLt's BGRADB epilogue: on H200 that epilogue
  // costs 15–40 µs more per GPT-2 124M weight-gradient GEMM than reading dy once more (docs/kernels.md v7).
  if (with_bias) bias_gradient();
}

}  // namespace tetra::cuda
