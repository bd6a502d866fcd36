// runtime/cuda/cuda_backend.h where tetra is built without CUDA: no devices and nothing allocated on
// one; whatever would need a GPU is an error that says tetra was built without CUDA.
#include <string>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace tetra {

bool built_with_cuda() { return false; }  // runtime/device.h

}  // namespace tetra

namespace tetra::cuda {

namespace {
[[noreturn]] void fail(const std::string& what) { TETRA_FAIL(Device, what, ": tetra was built without CUDA"); }
}  // namespace

void* allocate(size_t, Device device) { fail("cannot allocate on " + device.str()); }
void release(void*, size_t, Device) {}
void* allocate_shareable(size_t, Device device) { fail("cannot allocate on " + device.str()); }
void release_shareable(void*, size_t, Device) {}
size_t allocated_bytes(Device) { return 0; }
size_t peak_allocated_bytes(Device) { return 0; }
void reset_peak(Device) {}
size_t capacity_bytes(Device) { return 0; }

void* allocate_pinned(size_t) { fail("cannot allocate pinned host memory"); }
void release_pinned(void*) {}
std::string register_host(void*, size_t) { return "tetra was built without CUDA"; }
void unregister_host(void*) {}

void memset_zero(void*, size_t, Device device) { fail("cannot set memory on " + device.str()); }
void copy_bytes(void*, Device dst_dev, const void*, Device src_dev, size_t, bool) {
  fail("cannot copy between " + src_dev.str() + " and " + dst_dev.str());
}

int device_count() { return 0; }
void set_device(Device device) { fail("cannot select " + device.str()); }
bool capturing(Device) { return false; }
std::string device_name(Device device) { return device.str(); }

}  // namespace tetra::cuda
