// The CUDA memory layer: the stream-ordered caching pool (counters, zero-size, no driver
// allocation once warm), peer-shareable blocks, pinned host memory, memset and byte copies.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_context.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

size_t pool_reserved(int device) {
  cudaMemPool_t pool = nullptr;
  EXPECT_EQ(cudaDeviceGetDefaultMemPool(&pool, device), cudaSuccess);
  uint64_t reserved = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved), cudaSuccess);
  return static_cast<size_t>(reserved);
}

TEST(GpuMemory, ZeroBytesIsNull) {
  TETRA_REQUIRE_GPU();
  const size_t before = cuda::allocated_bytes(gpu());
  EXPECT_EQ(cuda::allocate(0, gpu()), nullptr);
  cuda::release(nullptr, 0, gpu());
  EXPECT_EQ(cuda::allocated_bytes(gpu()), before);
  EXPECT_EQ(cuda::allocate_pinned(0), nullptr);
  cuda::release_pinned(nullptr);
  Tensor empty = Tensor::empty({0, 7}, DType::F32, gpu());
  EXPECT_EQ(empty.numel(), 0);
}

// Peer-shareable blocks (plain cudaMalloc, exportable through CUDA IPC): zeroed, exportable, and
// in the same counters as the pool's.
TEST(GpuMemory, ShareableBlocksAreZeroedExportableAndCounted) {
  TETRA_REQUIRE_GPU();
  cuda::DeviceScope scope(gpu());
  TETRA_CUDA_CHECK(cudaDeviceSynchronize());
  const size_t base = cuda::allocated_bytes(gpu());
  const size_t bytes = (1 << 20) + 12;
  void* p = cuda::allocate_shareable(bytes, gpu());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(cuda::allocated_bytes(gpu()), base + bytes);
  EXPECT_GE(cuda::peak_allocated_bytes(gpu()), base + bytes);
  std::vector<unsigned char> host(bytes, 0xff);
  TETRA_CUDA_CHECK(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::count(host.begin(), host.end(), 0), static_cast<long>(bytes));
  cudaIpcMemHandle_t handle;
  EXPECT_EQ(cudaIpcGetMemHandle(&handle, p), cudaSuccess);
  cuda::release_shareable(p, bytes, gpu());
  EXPECT_EQ(cuda::allocated_bytes(gpu()), base);
}

TEST(GpuMemory, CountersTrackAllocations) {
  TETRA_REQUIRE_GPU();
  device_synchronize(gpu());
  cuda::reset_peak(gpu());
  const size_t base = cuda::allocated_bytes(gpu());
  EXPECT_EQ(cuda::peak_allocated_bytes(gpu()), base);
  void* a = cuda::allocate(1000, gpu());
  void* b = cuda::allocate(3 << 20, gpu());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(cuda::allocated_bytes(gpu()), base + 1000 + (3 << 20));
  cuda::release(b, 3 << 20, gpu());
  EXPECT_EQ(cuda::allocated_bytes(gpu()), base + 1000);
  EXPECT_EQ(cuda::peak_allocated_bytes(gpu()), base + 1000 + (3 << 20));
  cuda::release(a, 1000, gpu());
  EXPECT_EQ(cuda::allocated_bytes(gpu()), base);
  cuda::reset_peak(gpu());
  EXPECT_EQ(cuda::peak_allocated_bytes(gpu()), base);
  {
    Tensor t = Tensor::empty({1024, 1024}, DType::BF16, gpu());
    EXPECT_EQ(cuda::allocated_bytes(gpu()), base + (2 << 20));
  }
  EXPECT_EQ(cuda::allocated_bytes(gpu()), base);
}

// With the release threshold at UINT64_MAX, freed memory stays in the pool across synchronisations
// and the same sizes are served again without the pool growing: no driver allocation when warm.
TEST(GpuMemory, PoolKeepsAndReusesMemory) {
  TETRA_REQUIRE_GPU();
  const size_t sizes[] = {size_t{64} << 20, size_t{3} << 20, 4096, 123457};
  auto step = [&] {  // one "training step": every buffer live at once, then all freed
    void* p[4];
    for (int i = 0; i < 4; ++i) p[i] = cuda::allocate(sizes[i], gpu());
    for (int i = 3; i >= 0; --i) cuda::release(p[i], sizes[i], gpu());
  };
  step();  // warm up
  device_synchronize(gpu());
  const size_t warm = pool_reserved(gpu().index);
  EXPECT_GE(warm, size_t{64} << 20) << "freed memory was returned to the driver";
  for (int i = 0; i < 50; ++i) {
    step();
    if (i % 10 == 0) device_synchronize(gpu());
  }
  device_synchronize(gpu());
  EXPECT_EQ(pool_reserved(gpu().index), warm) << "the pool grew in steady state";
}

TEST(GpuMemory, CopiesAndMemset) {
  TETRA_REQUIRE_GPU();
  const size_t n = 100003;  // odd byte count
  std::vector<unsigned char> src(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>((i * 131 + 7) % 251 + 1);
  void* a = cuda::allocate(n, gpu());
  void* b = cuda::allocate(n, gpu());
  cuda::copy_bytes(a, gpu(), src.data(), Device::cpu(), n, /*blocking=*/false);
  cuda::copy_bytes(b, gpu(), a, gpu(), n, /*blocking=*/false);
  cuda::copy_bytes(back.data(), Device::cpu(), b, gpu(), n, /*blocking=*/true);
  EXPECT_EQ(back, src);
  cuda::memset_zero(b, n, gpu());
  cuda::copy_bytes(back.data(), Device::cpu(), b, gpu(), n, /*blocking=*/true);
  EXPECT_EQ(back, std::vector<unsigned char>(n, 0));
  cuda::release(a, n, gpu());
  cuda::release(b, n, gpu());

  Tensor z = Tensor::zeros({3, 333}, DType::F32, gpu());
  Tensor zh = download_raw(z);
  for (int64_t i = 0; i < zh.numel(); ++i) ASSERT_EQ(zh.data<float>()[i], 0.0f);
}

TEST(GpuMemory, PinnedHostMemory) {
  TETRA_REQUIRE_GPU();
  const size_t n = 1 << 20;
  auto* pinned = static_cast<float*>(cuda::allocate_pinned(n * sizeof(float)));
  ASSERT_NE(pinned, nullptr);
  for (size_t i = 0; i < n; ++i) pinned[i] = static_cast<float>(i) + 0.5f;
  void* d = cuda::allocate(n * sizeof(float), gpu());
  cuda::copy_bytes(d, gpu(), pinned, Device::cpu(), n * sizeof(float), /*blocking=*/true);
  std::vector<float> back(n);
  cuda::copy_bytes(back.data(), Device::cpu(), d, gpu(), n * sizeof(float), /*blocking=*/true);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], static_cast<float>(i) + 0.5f);
  cuda::release(d, n * sizeof(float), gpu());
  cuda::release_pinned(pinned);
}

TEST(GpuMemory, CopyBetweenTwoGpus) {
  TETRA_REQUIRE_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  Rng rng(11);
  Tensor h = random_host(rng, {4099});
  Tensor a = upload(h, DType::F32);
  Tensor b = Tensor::empty({4099}, DType::F32, Device::cuda(1));
  ops::copy(b, a);
  Tensor c = Tensor::empty({4099}, DType::BF16, Device::cuda(1));
  ops::copy(c, a);  // cross-device with conversion
  EXPECT_EQ(close_error(download(b), values(h)), 0.0);
  EXPECT_EQ(close_error(download(c), values(representable(h, DType::BF16))), 0.0);
}

}  // namespace
}  // namespace tetra::gputest
