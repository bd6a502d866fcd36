// Helpers shared by the CPU kernels: argument checks that name the op, the row count of a
// [..., F] tensor, and fp32/bf16 element access (the CPU computes in fp32; bf16 is raw bits).
#pragma once
#include <cstdint>

#include "runtime/tensor.h"

namespace tetra::cpu {

// Fails unless t is a defined tensor of fp32 or bf16.
inline void check_float(const char* op, const char* what, const Tensor& t) {
  if (!t.defined() || (t.dtype() != DType::F32 && t.dtype() != DType::BF16))
    TETRA_FAIL(Internal, op, ": ", what, " must be fp32 or bf16, got ", t.describe());
}

// Reads element i of a contiguous fp32 or bf16 tensor as fp32.
class FloatReader {
 public:
  explicit FloatReader(const Tensor& t)
      : f32_(t.dtype() == DType::F32 ? t.data<float>() : nullptr),
        bf16_(t.dtype() == DType::BF16 ? t.bf16_bits() : nullptr) {}
  float operator[](int64_t i) const { return f32_ ? f32_[i] : bf16_to_float(bf16_[i]); }

 private:
  const float* f32_;
  const uint16_t* bf16_;
};

// Writes element i of a contiguous fp32 or bf16 tensor from fp32 (bf16: round to nearest even).
class FloatWriter {
 public:
  explicit FloatWriter(const Tensor& t)
      : f32_(t.dtype() == DType::F32 ? t.data<float>() : nullptr),
        bf16_(t.dtype() == DType::BF16 ? t.bf16_bits() : nullptr) {}
  void set(int64_t i, float v) const {
    if (f32_) f32_[i] = v;
    else bf16_[i] = float_to_bf16(v);
  }

 private:
  float* f32_;
  uint16_t* bf16_;
};

// An optional tensor argument (pointer that may be null or point to an undefined tensor).
inline bool given(const Tensor* t) { return t != nullptr && t->defined(); }

// A norm's activation-side tensor (y, or dy in backward): x's shape, fp32 or bf16 (bf16 with an fp32
// x: an fp32 residual stream normalised into bf16 activations, runtime/ops.h); of a dtype other
// than x's, it may not share x's memory.
inline void check_norm_output(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  check_float(op, what, t);
  check_shape(op, what, t, x.shape());
  if (t.dtype() != x.dtype()) check_disjoint(op, "x", t, x);
}

// A norm backward's dx_rounded (optional): dx's shape in dy's dtype, which must differ from dx's
// (else it would be a copy of dx), sharing memory with neither. Returns whether it is given.
inline bool check_rounded_copy(const char* op, const Tensor* rounded, const Tensor& dx, const Tensor& dy) {
  if (!given(rounded)) return false;
  check_dtype(op, "dx_rounded", *rounded, dy.dtype());
  if (rounded->dtype() == dx.dtype())
    TETRA_FAIL(Internal, op, ": dx_rounded ", rounded->describe(), " has dx's dtype: it would be a copy of dx (pass none)");
  check_shape(op, "dx_rounded", *rounded, dx.shape());
  check_disjoint(op, "dx", *rounded, dx);
  check_disjoint(op, "dy", *rounded, dy);
  return true;
}

// A norm backward's gradients of x [.., C]: dy as the norm's output (check_norm_output), dx fp32 of
// x's shape (sharing memory with dy only in dy's own dtype), dw fp32 [C].
inline void check_norm_gradients(const char* op, const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x,
                                 int64_t C) {
  check_norm_output(op, "dy", dy, x);
  check_dtype(op, "dx", dx, DType::F32);
  check_shape(op, "dx", dx, x.shape());
  if (dy.dtype() != dx.dtype()) check_disjoint(op, "dy", dx, dy);  // dx may alias dy of its own dtype only
  check_dtype(op, "dw", dw, DType::F32);
  check_shape(op, "dw", dw, {C});
}

// A norm backward's dresidual (optional): fp32 of x's shape, added to the norm's gradient in dx, so
// not with accumulate_dx (which adds to dx's previous value instead). `norm` names the norm in the
// error. Returns whether it is given.
inline bool check_dresidual(const char* op, const char* norm, const Tensor* dresidual, const Tensor& x,
                            bool accumulate_dx) {
  if (!given(dresidual)) return false;
  if (accumulate_dx)
    TETRA_FAIL(Internal, op, ": accumulate_dx must be false with a dresidual (dx = dresidual + the ", norm,
               "'s gradient; to add to dx, pass dx itself as dresidual)");
  check_dtype(op, "dresidual", *dresidual, DType::F32);
  check_shape(op, "dresidual", *dresidual, x.shape());
  return true;
}

}  // namespace tetra::cpu
