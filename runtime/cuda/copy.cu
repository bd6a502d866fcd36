// CUDA copy (runtime/ops.h): dst = src across host and devices, converting fp32 <-> bf16 on the
// device side (round to nearest even, as runtime/dtype.h does on the host).
//   same dtype      one byte copy (H2D, D2H, D2D, or peer) on the current stream of the device side
//   fp32 <-> bf16   device-side conversion kernel; when one side is the host, the raw bytes travel
//                   in the host's dtype through a stream-ordered scratch buffer on the device
// A copy into host memory returns when the data is there; the others are stream-ordered.
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/elementwise.cuh"

namespace tetra::cuda {

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16; }

// dst[n] = convert(src[n]) for two tensors on the same device, fp32/bf16 in either direction.
void convert_on_device(Tensor& dst, const Tensor& src) {
  DeviceScope scope(dst.device());
  dispatch_float(dst.dtype(), "copy", "dst", [&](auto td) {
    dispatch_float(src.dtype(), "copy", "src", [&](auto ts) {
      using TD = decltype(td);
      using TS = decltype(ts);
      launch_map1(static_cast<TD*>(dst.data_ptr()), static_cast<const TS*>(src.data_ptr()), dst.numel(),
                  IdentityOp{}, dst.device());
    });
  });
}

}  // namespace

// One 2-D copy: rows of cols·size bytes at the two tensors' pitches (checked by ops::copy_columns).
void copy_columns(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t cols) {
  if (!dst.device().is_cuda() || dst.device() != src.device())
    TETRA_FAIL(Internal, "cuda::copy_columns: ", src.describe(), " into ", dst.describe(), ": one GPU's tensors");
  DeviceScope scope(dst.device());
  const size_t es = dtype_size(dst.dtype());
  TETRA_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(dst.data_ptr()) + dst_col * es, dst.dim(1) * es,
                                     static_cast<const char*>(src.data_ptr()) + src_col * es, src.dim(1) * es,
                                     cols * es, dst.dim(0), cudaMemcpyDeviceToDevice, stream_of(dst.device())));
}

void copy(Tensor& dst, const Tensor& src) {
  if (!dst.defined() || !src.defined())
    TETRA_FAIL(Internal, "copy: ", src.describe(), " into ", dst.describe(), ": both must be defined");
  if (dst.numel() != src.numel())
    TETRA_FAIL(Internal, "copy: ", src.describe(), " into ", dst.describe(), ": element counts differ");
  if (dst.numel() == 0) return;
  const Device dd = dst.device(), sd = src.device();
  if (dd.is_cpu() && sd.is_cpu())
    TETRA_FAIL(Internal, "cuda::copy: ", src.describe(), " into ", dst.describe(), ": both on the host (use ops::copy)");

  if (dst.dtype() == src.dtype()) {
    copy_bytes(dst.data_ptr(), dd, src.data_ptr(), sd, dst.nbytes(), /*blocking=*/dd.is_cpu());
    return;
  }
  if (!is_float(dst.dtype()) || !is_float(src.dtype()))
    TETRA_FAIL(Internal, "copy: cannot convert ", src.describe(), " into ", dst.describe(),
               " (only fp32 <-> bf16 conversions are supported; use matching dtypes otherwise)");

  if (dd.is_cuda() && sd.is_cuda() && dd.index == sd.index) {
    convert_on_device(dst, src);
  } else if (dd.is_cuda()) {
    // Host or another GPU -> this GPU: bring the bytes over unchanged, convert here.
    Tensor staged = Tensor::empty(src.shape(), src.dtype(), dd);
    copy_bytes(staged.data_ptr(), dd, src.data_ptr(), sd, src.nbytes(), /*blocking=*/false);
    convert_on_device(dst, staged);
  } else {
    // GPU -> host: convert on the GPU into the host's dtype, then one blocking copy.
    Tensor staged = Tensor::empty(dst.shape(), dst.dtype(), sd);
    convert_on_device(staged, src);
    copy_bytes(dst.data_ptr(), dd, staged.data_ptr(), sd, dst.nbytes(), /*blocking=*/true);
  }
}

}  // namespace tetra::cuda
