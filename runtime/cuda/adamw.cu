// CUDA AdamW, the update of torch.optim.AdamW (decoupled weight decay), fused into one pass that
// reads p, g, m, v and writes p, m, v and the optional working copy:
//   g = grad·grad_scale
//   p ← p·(1 - lr·wd)
//   m ← β1·m + (1-β1)·g,   v ← β2·v + (1-β2)·g²
//   p ← p - lr/(1-β1^step) · m / (√v/√(1-β2^step) + eps)
// Shapes: master fp32 [n]; m, v [n], both fp32 or both bf16 (optimizer.state_dtype: read into fp32,
// updated in fp32, the new p from the fp32 values, each rounded to nearest even once when stored);
// grad fp32 or bf16 [n]; working fp32 or bf16 [n] (optional).
//
// Multi-tensor: one launch updates up to kMaxSegments segments (each its own tensors, size and
// weight decay). The segment table travels as a __grid_constant__ kernel parameter (≈ 15 KB; CUDA
// ≥ 12.1 allows 32 KB), so nothing is copied to the device per step. Each block updates one chunk
// of kChunk elements of one segment, found by binary search over the segments' first blocks.
// Segments whose pointers are aligned (fp32 16 bytes, bf16 8 bytes) move 4 elements per access.
// A segment with an amax word max-es into it the bits of its largest new |value| as the model reads
// it (the working copy as stored, else the master): one atomicMax per block (block_amax_to).
#include <algorithm>
#include <cmath>

#include "runtime/adamw_scalars.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"

namespace tetra::cuda {

namespace {

constexpr int kMaxSegments = 256;
constexpr int kChunk = 8192;  // elements per block
constexpr int kThreads = 256;

enum : uint8_t { kWorkNone = 0, kWorkF32 = 1, kWorkBF16 = 2 };

struct SegmentArgs {
  float* master;
  const void* grad;  // fp32 or bf16 (grad_bf16)
  void* m;           // fp32 or bf16 (state_bf16), like v
  void* v;
  void* working;     // null, fp32 or bf16 (working_kind)
  unsigned* amax;    // null, or the word max-ed with the bits of the largest new |value| read
  int64_t numel;
  float decay;       // 1 - lr·weight_decay (host-given lr)
  float weight_decay;  // for the decay from a device control's lr
  uint8_t grad_bf16;
  uint8_t state_bf16;
  uint8_t working_kind;
  uint8_t vec4;      // every pointer aligned for 4-element accesses
};

struct BatchArgs {
  SegmentArgs seg[kMaxSegments];
  int first_block[kMaxSegments + 1];  // segment s owns blocks [first_block[s], first_block[s + 1])
  int count;
};

struct HyperArgs {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, step_size, inv_bc2_sqrt, grad_scale;
};

static_assert(sizeof(BatchArgs) + sizeof(HyperArgs) < 32000, "AdamW kernel parameters exceed the 32 KB limit");

__device__ __forceinline__ float adamw_element(float p, float& m, float& v, float g, float decay, const HyperArgs& h) {
  g *= h.grad_scale;
  p *= decay;
  m = h.beta1 * m + h.one_minus_beta1 * g;
  v = h.beta2 * v + h.one_minus_beta2 * g * g;
  const float denom = sqrtf(v) * h.inv_bc2_sqrt + h.eps;
  return p - h.step_size * m / denom;
}

__device__ __forceinline__ void load4(const void* p, bool bf16_data, int64_t i, float (&out)[4]) {
  if (bf16_data) {
    const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const bf16*>(p) + i);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
    out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
  } else {
    const float4 f = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    out[0] = f.x, out[1] = f.y, out[2] = f.z, out[3] = f.w;
  }
}

__device__ __forceinline__ void store4(void* p, bool bf16_data, int64_t i, const float (&in)[4]) {
  if (bf16_data) {
    uint2 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
    h[0] = __floats2bfloat162_rn(in[0], in[1]);
    h[1] = __floats2bfloat162_rn(in[2], in[3]);
    *reinterpret_cast<uint2*>(static_cast<bf16*>(p) + i) = raw;
  } else {
    *reinterpret_cast<float4*>(static_cast<float*>(p) + i) = make_float4(in[0], in[1], in[2], in[3]);
  }
}

__device__ __forceinline__ float load1(const void* p, bool bf16_data, int64_t i) {
  return bf16_data ? __bfloat162float(static_cast<const bf16*>(p)[i]) : static_cast<const float*>(p)[i];
}

__device__ __forceinline__ void store1(void* p, bool bf16_data, int64_t i, float x) {
  if (bf16_data) static_cast<bf16*>(p)[i] = __float2bfloat16_rn(x);
  else static_cast<float*>(p)[i] = x;
}

// The bits of |p| as the model reads p: rounded to bf16 where the working copy is bf16.
__device__ __forceinline__ unsigned read_abs_bits(const SegmentArgs& s, float p) {
  return s.working_kind == kWorkBF16 ? stored_abs_bits<bf16>(p) : abs_bits(p);
}

// Updates element i; returns the bits of its new |value| as read (read_abs_bits).
__device__ __forceinline__ unsigned update_one(const SegmentArgs& s, int64_t i, const HyperArgs& h) {
  const float g = load1(s.grad, s.grad_bf16, i);
  float m = load1(s.m, s.state_bf16, i), v = load1(s.v, s.state_bf16, i);
  const float p = adamw_element(s.master[i], m, v, g, s.decay, h);
  s.master[i] = p;
  store1(s.m, s.state_bf16, i, m);
  store1(s.v, s.state_bf16, i, v);
  if (s.working_kind != kWorkNone) store1(s.working, s.working_kind == kWorkBF16, i, p);
  return read_abs_bits(s, p);
}

// A step the control skips leaves the weights as they are; a segment with an amax word still gets
// their amax, so that what it holds after the optimizer is always of the values the model reads.
__device__ void amax_unchanged(const SegmentArgs& s, int64_t start, int64_t len) {
  unsigned m = 0;
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x)
    m = max(m, s.working_kind == kWorkNone ? abs_bits(s.master[start + k])
                                           : abs_bits(load1(s.working, s.working_kind == kWorkBF16, start + k)));
  block_amax_to(s.amax, m);
}

// control (may be null): fp64 [kStepControlSlots] (runtime/step_control.h); when given, the step's
// lr, bias corrections and clipping scale are read from it, and a skipped step changes no weight or
// moment (the amax words still get the unchanged weights' amax).
__global__ void __launch_bounds__(kThreads) adamw_multi_kernel(const __grid_constant__ BatchArgs batch,
                                                               const HyperArgs hyper, const double* control) {
  HyperArgs h = hyper;
  // The segment owning this block: the last s with first_block[s] ≤ blockIdx.x.
  const int b = blockIdx.x;
  int lo = 0, hi = batch.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (batch.first_block[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  SegmentArgs s = batch.seg[lo];
  const int64_t start = static_cast<int64_t>(b - batch.first_block[lo]) * kChunk;
  const int64_t len = std::min<int64_t>(kChunk, s.numel - start);
  if (control) {
    if (control[kCtlSkipped] != 0.0) {
      if (s.amax) amax_unchanged(s, start, len);
      return;
    }
    h.step_size = static_cast<float>(control[kCtlStepSize]);
    h.inv_bc2_sqrt = static_cast<float>(control[kCtlInvBc2Sqrt]);
    h.grad_scale = static_cast<float>(control[kCtlGradScale]);
    const float lr = static_cast<float>(control[kCtlLr]);
    s.decay = static_cast<float>(1.0 - static_cast<double>(lr) * s.weight_decay);
  }
  int64_t done = 0;
  unsigned amax = 0;
  if (s.vec4) {
    done = len & ~int64_t{3};
    for (int64_t k = static_cast<int64_t>(threadIdx.x) * 4; k < done; k += static_cast<int64_t>(blockDim.x) * 4) {
      const int64_t i = start + k;
      float g[4];
      load4(s.grad, s.grad_bf16, i, g);
      const float4 p4 = *reinterpret_cast<const float4*>(s.master + i);
      float p[4] = {p4.x, p4.y, p4.z, p4.w};
      float m[4], v[4];
      load4(s.m, s.state_bf16, i, m);
      load4(s.v, s.state_bf16, i, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) p[j] = adamw_element(p[j], m[j], v[j], g[j], s.decay, h);
      *reinterpret_cast<float4*>(s.master + i) = make_float4(p[0], p[1], p[2], p[3]);
      store4(s.m, s.state_bf16, i, m);
      store4(s.v, s.state_bf16, i, v);
      if (s.working_kind != kWorkNone) store4(s.working, s.working_kind == kWorkBF16, i, p);
      if (s.amax) {
#pragma unroll
        for (int j = 0; j < 4; ++j) amax = max(amax, read_abs_bits(s, p[j]));
      }
    }
  }
  for (int64_t k = done + threadIdx.x; k < len; k += blockDim.x) amax = max(amax, update_one(s, start + k, h));
  if (s.amax) block_amax_to(s.amax, amax);
}

bool aligned_for4(const void* p, DType t) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return t == DType::BF16 ? (a % 8) == 0 : (a % 16) == 0;
}

HyperArgs make_hyper(const AdamWHyper& h) {
  if (h.step < 1) TETRA_FAIL(Internal, "adamw_update: step must be ≥ 1 (1-based, for bias correction), got ", h.step);
  if (!(h.beta1 >= 0.0f && h.beta1 < 1.0f) || !(h.beta2 >= 0.0f && h.beta2 < 1.0f))
    TETRA_FAIL(Internal, "adamw_update: betas must lie in [0, 1), got (", h.beta1, ", ", h.beta2, ")");
  const AdamWScalars s = adamw_scalars(h.lr, h.beta1, h.beta2, static_cast<double>(h.step));
  HyperArgs a;
  a.beta1 = h.beta1;
  a.beta2 = h.beta2;
  a.one_minus_beta1 = 1.0f - h.beta1;
  a.one_minus_beta2 = 1.0f - h.beta2;
  a.eps = h.eps;
  a.step_size = s.step_size;
  a.inv_bc2_sqrt = s.inv_bc2_sqrt;
  a.grad_scale = h.grad_scale;
  return a;
}

SegmentArgs make_segment(const ops::AdamWSegment& s, float lr, size_t index) {
  const char* op = "adamw_update";
  check_cuda_tensor(op, "master", s.master);
  check_dtype(op, "master", s.master, DType::F32);
  check_cuda_float(op, "grad", s.grad);
  check_shape(op, "grad", s.grad, s.master.shape());
  check_cuda_float(op, "m", s.m);
  check_shape(op, "m", s.m, s.master.shape());
  check_cuda_tensor(op, "v", s.v);
  check_dtype(op, "v", s.v, s.m.dtype());
  check_shape(op, "v", s.v, s.master.shape());
  const bool working = s.working.defined();
  if (working) {
    check_cuda_float(op, "working", s.working);
    check_shape(op, "working", s.working, s.master.shape());
  }
  if (s.amax.defined()) {
    check_cuda_tensor(op, "amax", s.amax);
    check_dtype(op, "amax", s.amax, DType::U32);
    check_shape(op, "amax", s.amax, {1});
  }
  if (!(s.master.device() == s.grad.device() && s.master.device() == s.m.device() &&
        s.master.device() == s.v.device() && (!working || s.master.device() == s.working.device()) &&
        (!s.amax.defined() || s.master.device() == s.amax.device())))
    TETRA_FAIL(Internal, op, ": segment ", index, " has tensors on different devices (master ", s.master.describe(),
               ")");
  SegmentArgs a;
  a.master = s.master.data<float>();
  a.grad = s.grad.data_ptr();
  a.m = s.m.data_ptr();
  a.v = s.v.data_ptr();
  a.working = working ? s.working.data_ptr() : nullptr;
  a.amax = s.amax.defined() ? static_cast<unsigned*>(s.amax.data_ptr()) : nullptr;
  a.numel = s.master.numel();
  a.decay = static_cast<float>(1.0 - static_cast<double>(lr) * s.weight_decay);
  a.weight_decay = s.weight_decay;
  a.grad_bf16 = s.grad.dtype() == DType::BF16;
  a.state_bf16 = s.m.dtype() == DType::BF16;
  a.working_kind = !working ? kWorkNone : (s.working.dtype() == DType::BF16 ? kWorkBF16 : kWorkF32);
  a.vec4 = aligned_for4(a.master, DType::F32) && aligned_for4(a.m, s.m.dtype()) && aligned_for4(a.v, s.v.dtype()) &&
           aligned_for4(a.grad, s.grad.dtype()) && (!working || aligned_for4(a.working, s.working.dtype()));
  return a;
}

}  // namespace

void adamw_update_multi(const std::vector<ops::AdamWSegment>& segments, const AdamWHyper& h, const Tensor* control) {
  if (segments.empty()) return;
  const HyperArgs hyper = make_hyper(h);
  const double* ctl = control ? control->data<double>() : nullptr;
  const Device dev = segments.front().master.device();
  check_cuda_tensor("adamw_update", "master", segments.front().master);
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);

  BatchArgs batch{};
  int blocks = 0;
  auto launch = [&] {
    if (batch.count == 0) return;
    batch.first_block[batch.count] = blocks;
    adamw_multi_kernel<<<blocks, kThreads, 0, stream>>>(batch, hyper, ctl);
    TETRA_CUDA_CHECK_LAUNCH();
    batch.count = 0;
    blocks = 0;
  };
  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentArgs seg = make_segment(segments[i], h.lr, i);
    if (!(segments[i].master.device() == dev))
      TETRA_FAIL(Internal, "adamw_update_multi: segment ", i, " is on ", segments[i].master.device().str(),
                 ", segment 0 on ", dev.str());
    if (seg.numel == 0) continue;
    const int64_t seg_blocks = (seg.numel + kChunk - 1) / kChunk;
    if (seg_blocks > INT32_MAX / 2)
      TETRA_FAIL(Internal, "adamw_update: segment ", i, " of ", seg.numel, " elements is too large for one launch");
    if (batch.count == kMaxSegments || blocks + seg_blocks > INT32_MAX / 2) launch();
    batch.seg[batch.count] = seg;
    batch.first_block[batch.count] = blocks;
    batch.count += 1;
    blocks += static_cast<int>(seg_blocks);
  }
  launch();
}

void adamw_update(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h, Tensor* working) {
  ops::AdamWSegment s;
  s.master = master;
  s.grad = grad;
  s.m = m;
  s.v = v;
  if (given(working)) s.working = *working;
  s.weight_decay = h.weight_decay;
  cuda::adamw_update_multi({s}, h, nullptr);
}

}  // namespace tetra::cuda
