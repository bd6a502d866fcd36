// CUDA grouped expert GEMMs (runtime/ops.h, moe_grouped_linear_*): argument checks, then the
// implementation of runtime/cuda/moe_grouped_gemm.h that applies — Hopper's warp-specialised wgmma
// kernel, else the cooperative wgmma kernel, else the mma.sync kernel, for bf16 operands with O and I
// multiples of 8 and aligned tensors; the SIMT kernel
// otherwise (fp32 operands among them) — or what TETRA_MOE_GEMM asks for.
#include <atomic>
#include <cstdlib>
#include <string>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "runtime/moe_shape.h"

namespace tetra::cuda {

namespace {

std::atomic<int> g_impl{-1};  // −1: not read from the environment yet

GroupedGemmImpl impl_from_env() {
  const char* v = std::getenv("TETRA_MOE_GEMM");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return GroupedGemmImpl::Auto;
  if (s == "wgmma") return GroupedGemmImpl::Wgmma;
  if (s == "wgmma_ws") return GroupedGemmImpl::WgmmaWs;
  if (s == "mma") return GroupedGemmImpl::Mma;
  if (s == "simt") return GroupedGemmImpl::Simt;
  if (s == "cublas") return GroupedGemmImpl::Cublas;
  TETRA_FAIL(Usage, "TETRA_MOE_GEMM = '", s, "' is not one of auto, wgmma, wgmma_ws, mma, simt, cublas");
}

// dtype of a float tensor: fp32 or bf16 (checked by the caller).
void check_output(const char* op, const char* what, const Tensor& out, DType in) {
  if (out.dtype() != in && out.dtype() != DType::F32)
    TETRA_FAIL(Internal, op, ": ", what, " is ", dtype_name(out.dtype()), " but the inputs are ", dtype_name(in),
               " (outputs must have the inputs' dtype or fp32)");
}

struct Operand {
  const char* name;
  const Tensor& t;
};

// c = a ∘ b of one grouped GEMM (after runtime/moe_shape.h's shape checks): all CUDA float tensors,
// a and b of one dtype, c of theirs or fp32, offsets on the device.
void check_operands(const char* op, Operand c, Operand a, Operand b, const Tensor& offsets) {
  check_cuda_float(op, c.name, c.t);
  check_cuda_float(op, a.name, a.t);
  check_cuda_float(op, b.name, b.t);
  check_cuda_tensor(op, "offsets", offsets);
  check_dtype(op, b.name, b.t, a.t.dtype());
  check_output(op, c.name, c.t, a.t.dtype());
}

// Enqueues c (+)= a ∘ b in `kind`'s layout (runtime/cuda/moe_grouped_gemm.h) on c's device and stream.
void run(const char* op, GroupedGemmKind kind, const MoeGemmDims& d, Tensor& c, const Tensor& a, const Tensor& b,
         const Tensor& offsets, bool accumulate = false) {
  GroupedGemm p;
  p.kind = kind;
  p.G = d.G, p.R = d.R, p.O = d.O, p.I = d.I;
  p.offsets = offsets.data<int32_t>();
  p.a = a.data_ptr(), p.b = b.data_ptr(), p.c = c.data_ptr();
  p.ab_type = a.dtype(), p.c_type = c.dtype();
  p.accumulate = accumulate;
  p.op = op;
  const Device dev = c.device();
  DeviceScope scope(dev);
  grouped_gemm(p, dev, stream_of(dev));
}

}  // namespace

GroupedGemmImpl grouped_gemm_impl() {
  int v = g_impl.load();
  if (v < 0) {
    v = static_cast<int>(impl_from_env());
    g_impl.store(v);
  }
  return static_cast<GroupedGemmImpl>(v);
}

void set_grouped_gemm_impl(GroupedGemmImpl impl) { g_impl.store(static_cast<int>(impl)); }

const char* grouped_gemm_impl_name(GroupedGemmImpl impl) {
  switch (impl) {
    case GroupedGemmImpl::Auto: return "auto";
    case GroupedGemmImpl::Wgmma: return "wgmma";
    case GroupedGemmImpl::WgmmaWs: return "wgmma_ws";
    case GroupedGemmImpl::Mma: return "mma";
    case GroupedGemmImpl::Simt: return "simt";
    case GroupedGemmImpl::Cublas: return "cublas";
  }
  return "?";
}

void grouped_gemm(const GroupedGemm& p, Device device, cudaStream_t stream, GroupedGemmImpl impl) {
  if (impl == GroupedGemmImpl::Auto) impl = grouped_gemm_impl();
  if (p.G == 0) return;
  switch (impl) {
    case GroupedGemmImpl::Auto:
      if (grouped_gemm_wgmma_ws_applies(p, nullptr)) return grouped_gemm_wgmma_ws(p, device, stream);
      if (grouped_gemm_wgmma_applies(p, nullptr)) return grouped_gemm_wgmma(p, device, stream);
      if (grouped_gemm_mma_applies(p, nullptr)) return grouped_gemm_mma(p, device, stream);
      return grouped_gemm_simt(p, device, stream);
    case GroupedGemmImpl::Wgmma: return grouped_gemm_wgmma(p, device, stream);
    case GroupedGemmImpl::WgmmaWs: return grouped_gemm_wgmma_ws(p, device, stream);
    case GroupedGemmImpl::Mma: return grouped_gemm_mma(p, device, stream);
    case GroupedGemmImpl::Simt: return grouped_gemm_simt(p, device, stream);
    case GroupedGemmImpl::Cublas: return grouped_gemm_cublas(p, device, stream);
  }
}

void moe_grouped_linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& offsets) {
  const char* op = "moe_grouped_linear_forward";
  const MoeGemmDims d = check_moe_grouped_forward(op, y, x, w, offsets);
  check_operands(op, {"y", y}, {"x", x}, {"w", w}, offsets);
  if (d.R == 0 || d.O == 0) return;
  run(op, GroupedGemmKind::Forward, d, y, x, w, offsets);
}

void moe_grouped_linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& offsets) {
  const char* op = "moe_grouped_linear_backward_input";
  const MoeGemmDims d = check_moe_grouped_backward_input(op, dx, dy, w, offsets);
  check_operands(op, {"dx", dx}, {"dy", dy}, {"w", w}, offsets);
  if (d.R == 0 || d.I == 0) return;
  run(op, GroupedGemmKind::BackwardInput, d, dx, dy, w, offsets);
}

void moe_grouped_linear_backward_weight(Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                                        bool accumulate) {
  const char* op = "moe_grouped_linear_backward_weight";
  const MoeGemmDims d = check_moe_grouped_backward_weight(op, dw, dy, x, offsets);
  check_operands(op, {"dw", dw}, {"dy", dy}, {"x", x}, offsets);
  if (d.G == 0 || d.O == 0 || d.I == 0) return;
  run(op, GroupedGemmKind::BackwardWeight, d, dw, dy, x, offsets, accumulate);
}

}  // namespace tetra::cuda
