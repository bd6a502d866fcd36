// Where this process sits in the job: rank, world size and local rank as the launcher tells it
// (Open MPI's OMPI_COMM_WORLD_*, an srun step's SLURM_PROCID / SLURM_STEP_NUM_TASKS /
// SLURM_LOCALID / SLURM_STEP_TASKS_PER_NODE, PMIx's PMIX_RANK), or a lone process. The GPU is the local rank's device among CUDA_VISIBLE_DEVICES.
#pragma once
#include <optional>
#include <string>

namespace tetra::launch {

struct LaunchEnvironment {
  std::string launcher = "single";  // "mpirun", "srun", "pmix" or "single"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string host;
  double process_start_unix = 0;  // wall-clock time this process started (s since the epoch, to the 10 ms tick:
                                  // runtime/goodput_clock.h)
};

// The launcher's variables alone, without MPI: mpirun's and srun's rank and world size; PMIx's rank
// with world_size 0 (its variables do not say it); rank 0 of 1, launcher "single", without any.
LaunchEnvironment launcher_environment();

// Reads the launcher's variables; the MPI world (already initialised) must agree with them.
LaunchEnvironment discover_environment(int mpi_rank, int mpi_size);

// Before MPI_Init: throws a Usage error when the launcher started this process in a way MPI_Init
// cannot work with (srun without PMIx for Open MPI), instead of letting MPI abort obscurely.
void check_launcher_before_mpi();

// Start of process `pid` in clock ticks after boot (field 22 of /proc/PID/stat); none when there
// is no such process, or it has exited (a zombie its parent has not reaped yet).
std::optional<unsigned long long> process_start_ticks(int pid);

}  // namespace tetra::launch
