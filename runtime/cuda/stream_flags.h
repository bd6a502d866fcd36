// Stream-ordered flag writes and waits on 32-bit words of device memory (also a peer's, mapped
// through CUDA IPC): the driver's stream memory operations, run by the GPU's front end, so a
// waiting stream holds no SM. They are captured into CUDA graphs with their values fixed, which is
// why callers use set/wait-equal/reset flags rather than counters.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tetra::cuda {

// After everything issued before it on `stream` (a memory fence: the writes before it are visible
// first), *flag = value.
void stream_write_flag(cudaStream_t stream, uint32_t* flag, uint32_t value);
// Work issued after it on `stream` starts once *flag == value.
void stream_wait_flag(cudaStream_t stream, const uint32_t* flag, uint32_t value);

}  // namespace tetra::cuda
