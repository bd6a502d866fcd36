// How many bytes of tensor storage tetra holds on a device, now and at the most since the start
// (or the last reset): CUDA from the caching allocator's counters, the CPU from a counter of the
// host allocations made through allocate_storage (not the process's resident set, which also
// holds MPI, BLAS and the loader). The trainer compares the measured peak with the planned memory.
#pragma once
#include <cstddef>

#include "runtime/device.h"

namespace tetra {

size_t allocated_bytes(Device device);
size_t peak_allocated_bytes(Device device);
// The peak restarts from what is allocated now (e.g. after start-up, to measure the steps).
void reset_peak_allocated(Device device);
// The memory of the device, in bytes: a GPU's total (cudaMemGetInfo), the host's physical memory
// for the CPU (shared by every rank on the host). 0 when it cannot be read.
size_t device_capacity_bytes(Device device);

}  // namespace tetra
