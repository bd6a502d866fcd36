// `tetra train CONFIG [--set k=v ...]`: one rank of a training job.
#include <cstdio>
#include <iostream>

#include "launch/commands.h"
#include "launch/config.h"
#include "launch/environment.h"
#include "launch/trainer.h"
#include "runtime/device.h"
#include "runtime/mpi_communicator.h"

namespace tetra::launch {

int train_command(const std::string& config_path, const std::vector<std::string>& overrides) {
  process_start_unix_time();  // anchor the process start before any work
  mpi_initialize(nullptr, nullptr);
  auto world = MpiCommunicator::world();
  const int rank = world->rank();
  int code = 0;
  try {
    LaunchEnvironment env = discover_environment(rank, world->size());
    // Every rank parses and validates the same config, so they agree on the error without talking.
    Config cfg = resolve(load_config(config_path, overrides), env.world_size, cuda_available());
    validate_for_training(cfg);
    Trainer trainer(cfg, env, *world);
    code = trainer.run();
  } catch (const Error& e) {
    // Errors every rank meets alike (config, usage) are reported by rank 0 and end the job cleanly;
    // anything else may have hit one rank only, so it aborts the whole job instead of hanging it.
    const bool uniform = e.kind() == ErrorKind::Config || e.kind() == ErrorKind::Usage;
    if (rank == 0 || !uniform) {
      std::fflush(stdout);
      std::cerr << "tetra: error" << (world->size() > 1 ? " (rank " + std::to_string(rank) + ")" : "") << ": "
                << e.what() << std::endl;
    }
    code = uniform ? 2 : 1;
    if (!uniform && world->size() > 1) mpi_abort(code);
  }
  world.reset();
  mpi_finalize();
  return code;
}

}  // namespace tetra::launch
