// DeviceRing on the CUDA runtime (see data/device_ring.h for the event protocol).
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "data/device_ring.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_context.h"
#include "runtime/stream.h"

namespace tetra::data {

struct DeviceRing::Impl {
  Options o;
  cudaStream_t copy = nullptr;                       // the loader's copy stream
  std::vector<cudaEvent_t> staged, checked, ready, consumed;
  std::vector<unsigned char> staged_rec, ready_rec, consumed_rec;  // recorded at least once (bytes: one per slot, no bit packing across threads)
  std::vector<void*> host_staging;                   // per slot (pinned or pageable), or null
  StagedRow* host_rows = nullptr;                    // pinned [slots · micro_batch]
  StagedRow* dev_rows = nullptr;                     // device [slots · micro_batch]
  unsigned long long* dev_bad = nullptr;             // device [slots]
  unsigned long long* host_bad = nullptr;            // pinned [slots]
  std::vector<Tensor> inputs, targets;               // device int32 [micro_batch, seq_len]
};

DeviceRing::DeviceRing(const Options& o) : impl_(std::make_unique<Impl>()), slots_(o.slots), slot_bytes_(o.staging_bytes) {
  TETRA_CHECK(o.device.is_cuda() && o.slots > 0 && o.staging_bytes % 4096 == 0, "DeviceRing on ", o.device.str(),
              " with ", o.slots, " slots of ", o.staging_bytes, " bytes");
  Impl& m = *impl_;
  m.o = o;
  cuda::DeviceScope scope(o.device);
  TETRA_CUDA_CHECK(cudaStreamCreateWithFlags(&m.copy, cudaStreamNonBlocking));
  const size_t n = static_cast<size_t>(o.slots);
  for (auto* v : {&m.staged, &m.checked, &m.ready, &m.consumed}) {
    v->resize(n);
    for (cudaEvent_t& e : *v) TETRA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  m.staged_rec.assign(n, 0);
  m.ready_rec.assign(n, 0);
  m.consumed_rec.assign(n, 0);
  // Plain cudaMalloc for the device staging: cuFileBufRegister wants memory of its own allocation.
  TETRA_CUDA_CHECK(cudaMalloc(&dev_staging_, slot_bytes_ * n));
  const size_t rows = n * static_cast<size_t>(o.micro_batch);
  TETRA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&m.dev_rows), rows * sizeof(StagedRow)));
  TETRA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&m.dev_bad), n * sizeof(unsigned long long)));
  m.host_rows = static_cast<StagedRow*>(cuda::allocate_pinned(rows * sizeof(StagedRow)));
  m.host_bad = static_cast<unsigned long long*>(cuda::allocate_pinned(n * sizeof(unsigned long long)));
  m.host_staging.assign(n, nullptr);
  if (o.host_staging)
    for (void*& p : m.host_staging) {
      if (o.pinned) {
        p = cuda::allocate_pinned(slot_bytes_);
      } else {
        p = std::aligned_alloc(4096, slot_bytes_);
        if (!p) TETRA_FAIL(Device, "out of host memory allocating ", slot_bytes_, " bytes of loader staging");
      }
    }
  for (size_t s = 0; s < n; ++s) {
    m.inputs.push_back(Tensor::empty({o.micro_batch, o.seq_len}, DType::I32, o.device));
    m.targets.push_back(Tensor::empty({o.micro_batch, o.seq_len}, DType::I32, o.device));
  }
  // The tensors come from the stream-ordered pool on this thread's current stream: let that
  // allocation complete before the copy stream writes them.
  TETRA_CUDA_CHECK(cudaStreamSynchronize(cuda::stream_of(o.device)));
}

DeviceRing::~DeviceRing() {
  Impl& m = *impl_;
  cuda::DeviceScope scope(m.o.device);
  // The trainer may still compute on the last batch, and the copy stream may still widen: finish.
  (void)cudaDeviceSynchronize();
  for (auto* v : {&m.staged, &m.checked, &m.ready, &m.consumed})
    for (cudaEvent_t e : *v) (void)cudaEventDestroy(e);
  for (void* p : m.host_staging) {
    if (!p) continue;
    if (m.o.pinned)
      cuda::release_pinned(p);
    else
      std::free(p);
  }
  cuda::release_pinned(m.host_rows);
  cuda::release_pinned(m.host_bad);
  (void)cudaFree(m.dev_rows);
  (void)cudaFree(m.dev_bad);
  (void)cudaFree(dev_staging_);
  if (m.copy) (void)cudaStreamDestroy(m.copy);
}

void* DeviceRing::host_staging(int s) const { return impl_->host_staging[static_cast<size_t>(s)]; }

StagedRow* DeviceRing::host_rows(int s) const { return impl_->host_rows + static_cast<int64_t>(s) * impl_->o.micro_batch; }

const Tensor& DeviceRing::inputs(int s) const { return impl_->inputs[static_cast<size_t>(s)]; }
const Tensor& DeviceRing::targets(int s) const { return impl_->targets[static_cast<size_t>(s)]; }

void DeviceRing::wait_writable(int s) {
  Impl& m = *impl_;
  const size_t i = static_cast<size_t>(s);
  cuda::DeviceScope scope(m.o.device);
  if (m.staged_rec[i]) TETRA_CUDA_CHECK(cudaEventSynchronize(m.staged[i]));
  if (!m.o.host_staging && m.ready_rec[i]) TETRA_CUDA_CHECK(cudaEventSynchronize(m.ready[i]));
}

void DeviceRing::submit(int s, size_t staged_bytes, int64_t n_rows, int width, bool check_on_device) {
  Impl& m = *impl_;
  const size_t i = static_cast<size_t>(s);
  TETRA_CHECK(staged_bytes <= slot_bytes_ && n_rows <= m.o.micro_batch, "loader slot overflow: ", staged_bytes,
              " bytes, ", n_rows, " rows");
  cuda::DeviceScope scope(m.o.device);
  char* dev = static_cast<char*>(dev_staging_) + device_staging_offset(s);
  StagedRow* dev_rows = m.dev_rows + static_cast<int64_t>(s) * m.o.micro_batch;
  if (staged_bytes > 0) {
    TETRA_CHECK(m.host_staging[i] != nullptr, "submit of host bytes on a slot without host staging");
    TETRA_CUDA_CHECK(cudaMemcpyAsync(dev, m.host_staging[i], staged_bytes, cudaMemcpyHostToDevice, m.copy));
  }
  TETRA_CUDA_CHECK(cudaMemcpyAsync(dev_rows, host_rows(s), static_cast<size_t>(n_rows) * sizeof(StagedRow),
                                   cudaMemcpyHostToDevice, m.copy));
  TETRA_CUDA_CHECK(cudaEventRecord(m.staged[i], m.copy));
  m.staged_rec[i] = 1;
  if (check_on_device) {
    TETRA_CUDA_CHECK(cudaMemsetAsync(m.dev_bad + s, 0xff, sizeof(unsigned long long), m.copy));
    widen_tokens_cuda(dev, width, dev_rows, n_rows, m.o.seq_len, nullptr, nullptr, m.dev_bad + s, m.copy);
    TETRA_CUDA_CHECK(cudaMemcpyAsync(m.host_bad + s, m.dev_bad + s, sizeof(unsigned long long),
                                     cudaMemcpyDeviceToHost, m.copy));
    TETRA_CUDA_CHECK(cudaEventRecord(m.checked[i], m.copy));
  }
  // The trainer's last use of this slot's inputs/targets must be done before they are overwritten.
  if (m.consumed_rec[i]) TETRA_CUDA_CHECK(cudaStreamWaitEvent(m.copy, m.consumed[i], 0));
  widen_tokens_cuda(dev, width, dev_rows, n_rows, m.o.seq_len, m.inputs[i].data<int32_t>(),
                    m.targets[i].data<int32_t>(), nullptr, m.copy);
  TETRA_CUDA_CHECK(cudaEventRecord(m.ready[i], m.copy));
  m.ready_rec[i] = 1;
}

int64_t DeviceRing::device_check(int s) {
  Impl& m = *impl_;
  cuda::DeviceScope scope(m.o.device);
  TETRA_CUDA_CHECK(cudaEventSynchronize(m.checked[static_cast<size_t>(s)]));
  const unsigned long long bad = m.host_bad[s];
  return bad == ~0ull ? -1 : static_cast<int64_t>(bad);
}

void DeviceRing::read_back(int s, int64_t offset, void* dst, size_t bytes) {
  Impl& m = *impl_;
  cuda::DeviceScope scope(m.o.device);
  TETRA_CUDA_CHECK(cudaStreamSynchronize(m.copy));
  const char* src = static_cast<const char*>(dev_staging_) + device_staging_offset(s) + offset;
  TETRA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void DeviceRing::release(int s) {
  Impl& m = *impl_;
  const size_t i = static_cast<size_t>(s);
  cuda::DeviceScope scope(m.o.device);
  TETRA_CUDA_CHECK(cudaEventRecord(m.consumed[i], cuda::stream_of(m.o.device)));
  m.consumed_rec[i] = 1;
}

bool DeviceRing::acquire(int s) {
  Impl& m = *impl_;
  const size_t i = static_cast<size_t>(s);
  cuda::DeviceScope scope(m.o.device);
  const cudaError_t q = cudaEventQuery(m.ready[i]);
  const bool late = q == cudaErrorNotReady;
  if (!late) TETRA_CUDA_CHECK(q);
  TETRA_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream_of(m.o.device), m.ready[i], 0));
  return late;
}

}  // namespace tetra::data
