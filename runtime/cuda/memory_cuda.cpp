// Device memory for the CUDA backend (runtime/cuda/cuda_backend.h):
// - a stream-ordered caching allocator: cudaMallocFromPoolAsync / cudaFreeAsync on the device's
//   default memory pool, whose release threshold is raised to UINT64_MAX so freed blocks stay in
//   the pool and are handed out again; after the first step no allocation reaches the driver;
// - allocated / peak byte counters per device (which also count the plain cudaMalloc blocks that
//   peers map through CUDA IPC, which pool memory cannot be);
// - pinned host memory (allocated here, or registered), memset and byte copies on the current
//   stream of the device involved.
//
// Stream semantics (as PyTorch's caching allocator): a block is allocated and freed on the current
// stream of its device at the time of the call. A block used on another stream (a communication
// stream, say) must have that use ordered before its release on the current stream, e.g. by an
// Event that the current stream waits on, or be kept alive until then.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/device_context.h"

namespace tetra::cuda {

namespace {
constexpr int kMaxDevices = 64;

struct PoolState {
  std::once_flag init;
  cudaMemPool_t pool = nullptr;
  std::atomic<size_t> allocated{0};
  std::atomic<size_t> peak{0};
};

PoolState& pool_state(Device device) {
  static PoolState states[kMaxDevices];
  if (!device.is_cuda() || device.index < 0 || device.index >= kMaxDevices)
    TETRA_FAIL(Device, "expected a CUDA device, got ", device.str());
  PoolState& s = states[device.index];
  std::call_once(s.init, [&] {
    TETRA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&s.pool, device.index));
    uint64_t keep_all = UINT64_MAX;  // never return freed memory to the driver on synchronisation
    TETRA_CUDA_CHECK(cudaMemPoolSetAttribute(s.pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  });
  return s;
}

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

void count_allocation(PoolState& s, size_t bytes) {
  const size_t now = s.allocated.fetch_add(bytes) + bytes;
  size_t peak = s.peak.load();
  while (now > peak && !s.peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

void* allocate(size_t bytes, Device device) {
  if (bytes == 0) return nullptr;
  PoolState& s = pool_state(device);
  DeviceScope scope(device);
  cudaStream_t stream = stream_of(device);
  void* p = nullptr;
  cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, s.pool, stream);
  if (e == cudaErrorMemoryAllocation) {
    // The pool may hold freed blocks of the wrong sizes: wait for all work, give them back, retry once.
    (void)cudaGetLastError();
    TETRA_CUDA_CHECK(cudaDeviceSynchronize());
    TETRA_CUDA_CHECK(cudaMemPoolTrimTo(s.pool, 0));
    e = cudaMallocFromPoolAsync(&p, bytes, s.pool, stream);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    TETRA_FAIL(Device, "out of memory on ", device.str(), ": could not allocate ", mib(bytes), " MiB (",
               cudaGetErrorName(e), "); tetra holds ", mib(s.allocated.load()), " MiB (peak ", mib(s.peak.load()),
               " MiB), the device has ", mib(free_b), " MiB free of ", mib(total_b),
               " MiB. Reduce train.micro_batch or the sequence length, or enable recomputation.");
  }
  count_allocation(s, bytes);
  return p;
}

void* allocate_shareable(size_t bytes, Device device) {
  if (bytes == 0) return nullptr;
  PoolState& s = pool_state(device);
  DeviceScope scope(device);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    TETRA_FAIL(Device, "out of memory on ", device.str(), ": could not allocate ", mib(bytes),
               " MiB of peer-shareable memory (", cudaGetErrorName(e), "); tetra holds ", mib(s.allocated.load()),
               " MiB");
  }
  TETRA_CUDA_CHECK(cudaMemset(p, 0, bytes));
  count_allocation(s, bytes);
  return p;
}

void release_shareable(void* ptr, size_t bytes, Device device) {
  if (!ptr) return;
  try {
    pool_state(device).allocated.fetch_sub(bytes);
    DeviceScope scope(device);
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
  } catch (...) {
    (void)cudaGetLastError();
  }
}

// Called from Storage destructors: never throws. Errors while the process shuts down (the CUDA
// runtime may already be unloading) are ignored; the memory goes away with the process.
void release(void* ptr, size_t bytes, Device device) {
  if (!ptr) return;
  try {
    PoolState& s = pool_state(device);
    s.allocated.fetch_sub(bytes);
    DeviceScope scope(device);
    if (cudaFreeAsync(ptr, stream_of(device)) != cudaSuccess) (void)cudaGetLastError();
  } catch (...) {
    (void)cudaGetLastError();
  }
}

size_t allocated_bytes(Device device) { return pool_state(device).allocated.load(); }
size_t peak_allocated_bytes(Device device) { return pool_state(device).peak.load(); }

size_t capacity_bytes(Device device) {
  DeviceScope scope(device);
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return total_b;
}
void reset_peak(Device device) {
  PoolState& s = pool_state(device);
  s.peak.store(s.allocated.load());
}

void* allocate_pinned(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    TETRA_FAIL(Device, "could not allocate ", mib(bytes), " MiB of pinned host memory: ", cudaGetErrorName(e), " (",
               cudaGetErrorString(e), ")");
  }
  return p;
}

void release_pinned(void* ptr) {
  if (ptr && cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

std::string register_host(void* ptr, size_t bytes) {
  const cudaError_t e = cudaHostRegister(ptr, bytes, cudaHostRegisterDefault);
  if (e == cudaSuccess) return "";
  (void)cudaGetLastError();
  return cudaGetErrorString(e);
}

void unregister_host(void* ptr) { cudaHostUnregister(ptr); }

void memset_zero(void* ptr, size_t bytes, Device device) {
  if (bytes == 0) return;
  DeviceScope scope(device);
  TETRA_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_of(device)));
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes, bool blocking) {
  if (bytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memmove(dst, src, bytes);
    return;
  }
  if (dst_dev.is_cuda() && src_dev.is_cuda() && dst_dev.index != src_dev.index) {
    // Between GPUs: on the destination's stream, after the work already queued on the source's.
    cudaStream_t src_stream = stream_of(src_dev);
    cudaStream_t dst_stream = stream_of(dst_dev);
    cudaEvent_t ready = nullptr;
    {
      DeviceScope scope(src_dev);
      TETRA_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
      TETRA_CUDA_CHECK(cudaEventRecord(ready, src_stream));
    }
    DeviceScope scope(dst_dev);
    TETRA_CUDA_CHECK(cudaStreamWaitEvent(dst_stream, ready, 0));
    TETRA_CUDA_CHECK(cudaEventDestroy(ready));  // released once the wait is satisfied
    TETRA_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, bytes, dst_stream));
    if (blocking) TETRA_CUDA_CHECK(cudaStreamSynchronize(dst_stream));
    return;
  }
  // One CUDA side: the copy runs on that device's current stream. A pageable host source is staged
  // before cudaMemcpyAsync returns, so the caller may reuse it at once; a pinned one must stay
  // unchanged until the stream reaches the copy (or pass blocking = true).
  const Device dev = dst_dev.is_cuda() ? dst_dev : src_dev;
  const cudaMemcpyKind kind = dst_dev.is_cpu()   ? cudaMemcpyDeviceToHost
                              : src_dev.is_cpu() ? cudaMemcpyHostToDevice
                                                 : cudaMemcpyDeviceToDevice;
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  TETRA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
  if (blocking) TETRA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace tetra::cuda
