// Where this process sits in the job: rank, world size and local rank as the launcher tells it
// (Open MPI's OMPI_COMM_WORLD_*, SLURM's SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID, PMIx's
// PMIX_RANK), or a lone process. The GPU is the local rank's device among CUDA_VISIBLE_DEVICES.
#pragma once
#include <string>

namespace tetra::launch {

struct LaunchEnvironment {
  std::string launcher = "single";  // "mpirun", "srun", "pmix" or "single"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string host;
  double process_start_unix = 0;  // wall-clock time this process started (s since the epoch)
};

// Reads the launcher's variables; the MPI world (already initialised) must agree with them.
LaunchEnvironment discover_environment(int mpi_rank, int mpi_size);

// Unix time at which this process started (from /proc/self/stat; falls back to first call).
double process_start_unix_time();

}  // namespace tetra::launch
