// main() of a GPU test that runs one process per rank under mpirun: MPI and GoogleTest start,
// each rank takes the GPU of its rank on the host, `setup` builds the communicators, the tests
// run, `teardown` frees them, and the worst rank's result is the exit code. Skips (exit
// kSkipExitCode, ctest's SKIP_RETURN_CODE, with "SKIPPED: `what` ...") unless there are >= 2 ranks
// and every rank has a GPU of its own (with share_gpus, one GPU that the host's ranks take in
// turn is enough; with one_host, all ranks share this host).
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <functional>
#include <string>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/mpi_communicator.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {

// Every rank exits with it when the test cannot run here; mpirun passes it on and ctest reports
// the test Skipped (SKIP_RETURN_CODE 77 in tests/runtime/cuda/CMakeLists.txt), never Passed.
inline constexpr int kSkipExitCode = 77;

struct GpuPlacement {
  bool one_host = false;    // every rank on this host (copy engines, CUDA IPC)
  bool share_gpus = false;  // ranks may share a GPU (local rank modulo the host's GPUs)
};

inline int run_mpi_gpu_tests(int argc, char** argv, const std::string& what, GpuPlacement placement,
                             const std::function<void()>& setup, const std::function<void()>& teardown) {
  mpi_initialize(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  const int gpus = cuda_device_count();
  const bool enough_gpus = placement.share_gpus ? gpus >= 1 : gpus >= local_size;
  int ok = size >= 2 && enough_gpus && (!placement.one_host || local_size == size) ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok) {
    if (rank == 0)
      std::printf("SKIPPED: %s need >= 2 ranks with %s%s (%d ranks, %d on this host with %d GPUs)\n", what.c_str(),
                  placement.share_gpus ? "a GPU" : "a GPU each", placement.one_host ? ", on one host" : "", size,
                  local_size, gpus);
    mpi_finalize();
    return kSkipExitCode;
  }
  test_gpu() = Device::cuda(local_rank % gpus);
  cuda::set_device(gpu());
  int rc = 1;
  try {
    setup();
    rc = RUN_ALL_TESTS();
    teardown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    mpi_abort(1);
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  mpi_finalize();
  return worst;
}

}  // namespace tetra::gputest
