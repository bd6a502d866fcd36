// Token widening: raw token ids, as they lie in a file (uint16 or uint32, little-endian, at any
// byte alignment), staged row by row in a buffer → the int32 inputs and targets of a micro-batch,
// with every id checked against its file's vocabulary. Row r holds the seq_len + 1 ids of one
// window from byte rows[r].byte_offset (rows of one run of adjacent windows overlap by one id);
//   inputs [r, t] = id(r, t)       targets[r, t] = id(r, t + 1)       t < seq_len
// both int32 [rows, seq_len]. The CUDA kernel (token_widen.cu) runs on the loader's copy stream
// after a GPUDirect Storage read or a host-to-device copy; the CPU twin below is the CPU backend's
// path, the host-side check of the pinned and posix paths, and the kernel's reference in the tests.
#pragma once
#include <cstdint>

namespace tetra::data {

struct StagedRow {
  int64_t byte_offset = 0;  // where the row's seq_len + 1 ids start in the staging bytes
  int64_t limit = 0;        // ids must be < limit (the file's vocabulary); 0: < 2^31 (the int32 range)
};

// CPU twin of the kernel. `width` is 2 or 4 bytes per id. With inputs == targets == nullptr it
// only checks. Returns the smallest flat index r·(seq_len + 1) + t of an id out of range, or -1.
int64_t widen_tokens(const void* staging, int width, const StagedRow* rows, int64_t n_rows, int64_t seq_len,
                     int32_t* inputs, int32_t* targets);

// The id at flat index `flat` (as widen_tokens numbers them), read from host staging bytes.
uint32_t staged_id(const void* staging, int width, const StagedRow* rows, int64_t seq_len, int64_t flat);

// The kernel (token_widen.cu, built with CUDA only), enqueued on `stream` (a cudaStream_t). staging,
// rows, inputs, targets and bad are device memory; inputs and targets may be null (check only); if
// bad is not null, the smallest bad flat index is atomicMin-ed into it (preset it to all ones: no bad
// id leaves it so).
void widen_tokens_cuda(const void* staging, int width, const StagedRow* rows, int64_t n_rows, int64_t seq_len,
                       int32_t* inputs, int32_t* targets, unsigned long long* bad, void* stream);

}  // namespace tetra::data
