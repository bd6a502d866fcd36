// Storage allocation and zero-filled tensors for both backends: the host here, a GPU through
// runtime/cuda/cuda_backend.h (whose stub, in a build without CUDA, has no GPU to allocate on).
#include "runtime/memory.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/tensor.h"

namespace tetra {

namespace {
// Host bytes handed out by allocate_storage and not yet released, and their high-water mark.
std::atomic<size_t> g_host_live{0}, g_host_peak{0};

void count_host_alloc(size_t bytes) {
  const size_t now = g_host_live.fetch_add(bytes) + bytes;
  size_t peak = g_host_peak.load();
  while (now > peak && !g_host_peak.compare_exchange_weak(peak, now)) {
  }
}

void release_host(void* p, size_t bytes, Device) {
  std::free(p);
  g_host_live.fetch_sub(bytes);
}
void release_cuda(void* p, size_t bytes, Device d) { cuda::release(p, bytes, d); }
}  // namespace

std::shared_ptr<Storage> allocate_storage(size_t bytes, Device device) {
  if (device.is_cpu()) {
    // 64-byte alignment for vector loads; aligned_alloc needs a multiple of the alignment.
    size_t padded = ((bytes + 63) / 64) * 64;
    void* p = std::aligned_alloc(64, padded ? padded : 64);
    if (!p) TETRA_FAIL(Device, "out of host memory allocating ", bytes, " bytes");
    count_host_alloc(bytes);
    return std::make_shared<Storage>(p, bytes, device, &release_host);
  }
  void* p = cuda::allocate(bytes, device);
  return std::make_shared<Storage>(p, bytes, device, &release_cuda);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes() == 0) return t;
  if (device.is_cpu()) {
    std::memset(t.data_ptr(), 0, t.nbytes());
  } else {
    cuda::memset_zero(t.data_ptr(), t.nbytes(), device);
  }
  return t;
}

size_t allocated_bytes(Device device) {
  return device.is_cpu() ? g_host_live.load() : cuda::allocated_bytes(device);
}

size_t peak_allocated_bytes(Device device) {
  return device.is_cpu() ? g_host_peak.load() : cuda::peak_allocated_bytes(device);
}

size_t device_capacity_bytes(Device device) {
  if (device.is_cuda()) return cuda::capacity_bytes(device);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

void reset_peak_allocated(Device device) {
  if (device.is_cuda()) return cuda::reset_peak(device);
  g_host_peak.store(g_host_live.load());
}

bool cuda_available() { return cuda_device_count() > 0; }

int cuda_device_count() { return cuda::device_count(); }

}  // namespace tetra
