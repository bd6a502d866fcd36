// Device selection and launch context for the CUDA ops (runtime/cuda/device_context.h), and the
// device queries of runtime/cuda/cuda_backend.h (device_count, set_device, device_name).
#include <algorithm>
#include <atomic>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/device_context.h"
#include "runtime/stream.h"

namespace tetra::cuda {

namespace {
constexpr int kMaxDevices = 64;

int checked_index(Device device) {
  if (!device.is_cuda() || device.index < 0 || device.index >= kMaxDevices)
    TETRA_FAIL(Device, "expected a CUDA device, got ", device.str());
  return device.index;
}

// Queries a device attribute once per device and caches it.
int cached_attribute(std::atomic<int> (&cache)[kMaxDevices], Device device, cudaDeviceAttr attr) {
  const int i = checked_index(device);
  int v = cache[i].load(std::memory_order_relaxed);
  if (v > 0) return v;
  TETRA_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, i));
  cache[i].store(v, std::memory_order_relaxed);
  return v;
}

std::atomic<int> g_sm_count[kMaxDevices];
std::atomic<int> g_smem_optin[kMaxDevices];
}  // namespace

int device_count() {
  // Without a driver or a GPU the runtime reports an error: that means zero devices.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    return n;
  }();
  return count;
}

void set_device(Device device) {
  checked_index(device);
  TETRA_CUDA_CHECK(cudaSetDevice(device.index));
}

bool capturing(Device device) {
  DeviceScope scope(device);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TETRA_CUDA_CHECK(cudaStreamIsCapturing(stream_of(device), &status));
  return status != cudaStreamCaptureStatusNone;
}

std::string device_name(Device device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device.index) == cudaSuccess) return prop.name;
  return device.str();
}

DeviceScope::DeviceScope(Device device) {
  const int want = checked_index(device);
  int current = -1;
  TETRA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != want) {
    TETRA_CUDA_CHECK(cudaSetDevice(want));
    previous_ = current;
  }
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

cudaStream_t stream_of(Device device) { return static_cast<cudaStream_t>(current_stream(device).handle()); }

int sm_count(Device device) { return cached_attribute(g_sm_count, device, cudaDevAttrMultiProcessorCount); }

int max_shared_optin(Device device) {
  return cached_attribute(g_smem_optin, device, cudaDevAttrMaxSharedMemoryPerBlockOptin);
}

int grid_size(int64_t items, int threads, Device device, int waves) {
  const int64_t needed = (items + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(sm_count(device)) * waves;
  return static_cast<int>(std::max<int64_t>(1, std::min(needed, cap)));
}

void check_cuda_tensor(const char* op, const char* what, const Tensor& t) {
  if (!t.defined()) TETRA_FAIL(Internal, op, ": ", what, " is an undefined tensor");
  if (!t.device().is_cuda()) TETRA_FAIL(Internal, op, ": ", what, " must be on a CUDA device, got ", t.describe());
}

void check_cuda_float(const char* op, const char* what, const Tensor& t) {
  check_cuda_tensor(op, what, t);
  if (t.dtype() != DType::F32 && t.dtype() != DType::BF16)
    TETRA_FAIL(Internal, op, ": ", what, " must be fp32 or bf16, got ", t.describe());
}

unsigned* start_amax(const char* op, Tensor* amax, cudaStream_t stream) {
  if (!amax) return nullptr;
  check_cuda_tensor(op, "amax", *amax);
  TETRA_CUDA_CHECK(cudaMemsetAsync(amax->data_ptr(), 0, amax->nbytes(), stream));
  return static_cast<unsigned*>(amax->data_ptr());
}

}  // namespace tetra::cuda

namespace tetra {

bool built_with_cuda() { return true; }  // runtime/device.h

}  // namespace tetra
