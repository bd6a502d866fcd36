// Host-side entry points of the CUDA backend, callable from plain C++ (no CUDA headers here):
// memory_cuda.cpp and device_context_cuda.cpp. Where tetra is built without CUDA,
// cuda_backend_stub.cpp stands in: no devices, nothing allocated, and an error that says so from
// whatever would need a GPU.
#pragma once
#include <cstddef>
#include <string>

#include "runtime/device.h"

namespace tetra::cuda {

// Stream-ordered caching allocator on the current stream of `device` (cudaMallocAsync on a memory
// pool that never returns memory to the driver, so steady-state steps make no cudaMalloc calls).
void* allocate(size_t bytes, Device device);
void release(void* ptr, size_t bytes, Device device);
// Zeroed device memory from cudaMalloc, outside the pool, so that cudaIpcGetMemHandle can export it
// to other processes (runtime/peer_copy_communicator.h); counted like the pool's.
void* allocate_shareable(size_t bytes, Device device);
void release_shareable(void* ptr, size_t bytes, Device device);
// Bytes currently allocated through the pool and the high-water mark, per device.
size_t allocated_bytes(Device device);
size_t peak_allocated_bytes(Device device);
void reset_peak(Device device);
// The device's total memory (cudaMemGetInfo); 0 when it cannot be read.
size_t capacity_bytes(Device device);

// Page-locked host memory for fast asynchronous copies.
void* allocate_pinned(size_t bytes);
void release_pinned(void* ptr);
// Page-locks host memory allocated elsewhere (cudaHostRegister): "" when done, else why not (the
// memory stays usable, pageable). unregister_host undoes it.
std::string register_host(void* ptr, size_t bytes);
void unregister_host(void* ptr);

void memset_zero(void* ptr, size_t bytes, Device device);
// Copies between host and device (or device and device) on the current stream of the device side.
// `blocking` waits for the copy before returning.
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes, bool blocking);

int device_count();
void set_device(Device device);
// Whether the device's current stream is being captured into a CUDA graph.
bool capturing(Device device);
// The GPU's name (cudaGetDeviceProperties), or device.str() when it cannot be read.
std::string device_name(Device device);

}  // namespace tetra::cuda
