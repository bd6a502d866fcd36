// The kernel of the copy-engine all-reduce (runtime/peer_copy_communicator.h): the owner's sum of
// every rank's copy of its chunk.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "runtime/dtype.h"

namespace tetra::cuda {

constexpr int kMaxPeerRanks = 8;  // ranks of one host (an NVLink domain of 8 GPUs)

// dst[i] = Σ_r src[r][i] over r = 0 … ranks−1 in rank order, accumulated in fp32 and rounded once
// to dtype (bf16 or fp32); dst may be one of the sources. count elements; pointers 16-byte aligned
// or not (an unaligned start takes a scalar path).
void peer_sum(void* dst, const std::vector<const void*>& src, int64_t count, DType dtype, cudaStream_t stream);

// The CPU twin of peer_sum on host fp32 values that represent `dtype` exactly (bf16 rounded).
std::vector<float> peer_sum_reference(const std::vector<std::vector<float>>& src, DType dtype);

}  // namespace tetra::cuda
