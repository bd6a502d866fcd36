// `tetra train CONFIG [--set k=v ...]`: one rank of a training job. Exit codes: launch/signals.h.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "launch/commands.h"
#include "launch/config.h"
#include "launch/environment.h"
#include "launch/hang_report.h"
#include "launch/signals.h"
#include "launch/trainer.h"
#include "runtime/device.h"
#include "runtime/mpi_communicator.h"

namespace tetra::launch {

int train_command(const std::string& config_path, const std::vector<std::string>& overrides) {
  process_start_unix_time();  // anchor the process start before any work
  try {
    check_launcher_before_mpi();
  } catch (const Error& e) {
    const char* task = std::getenv("SLURM_PROCID");
    if (!task || std::string(task) == "0") std::cerr << "tetra: error: " << e.what() << std::endl;
    return exit_code_for(e.kind());
  }
  mpi_initialize(nullptr, nullptr);
  install_stop_signal_handlers();  // after MPI, so its handlers do not replace ours
  auto world = MpiCommunicator::world();
  const int rank = world->rank();
  int code = 0;
  std::string run_dir;
  double comm_timeout_s = 0;
  std::vector<RankIdentity> ranks;
  try {
    LaunchEnvironment env = discover_environment(rank, world->size());
    // Every rank parses and validates the same config, so they agree on the error without talking.
    Config cfg = resolve(load_config(config_path, overrides), env.world_size, cuda_available());
    validate_for_training(cfg);
    run_dir = (std::filesystem::path(cfg.run.output_dir) / cfg.run.name).string();
    comm_timeout_s = cfg.run.comm_timeout_s;
    ranks = exchange_identities(*world);  // who is who, should one of them stop answering
    Trainer trainer(cfg, env, *world);
    code = trainer.run();
  } catch (const Error& e) {
    // Errors every rank meets alike (config, usage) are reported by rank 0 and end the job cleanly;
    // anything else may have hit one rank only, so it aborts the whole job instead of hanging it.
    const bool uniform = e.kind() == ErrorKind::Config || e.kind() == ErrorKind::Usage;
    code = exit_code_for(e.kind());
    std::string verdict;
    bool reporter = false;
    if (e.kind() == ErrorKind::Comm && world->size() > 1 && !ranks.empty()) {
      // A collective timed out: find which peer never got there before the job goes down.
      const double grace = std::min(15.0, std::max(2.0, 0.2 * comm_timeout_s));
      HangDiagnosis d = diagnose_hang(run_dir, ranks, rank, e.what(), grace);
      verdict = d.message;
      reporter = d.reporter;
    }
    // Whole lines in one write each: ranks print at the same moment.
    std::string lines;
    if (rank == 0 || !uniform)
      lines = "tetra: error" + (world->size() > 1 ? " (rank " + std::to_string(rank) + ")" : std::string()) + ": " +
              e.what() + "\n";
    if (reporter && !verdict.empty()) lines += "tetra: " + verdict + "\n";
    std::fflush(stdout);
    std::cerr << lines << std::flush;
    if (!uniform && world->size() > 1) {
      // The reporter aborts first; the others leave it time to print.
      if (e.kind() == ErrorKind::Comm && !reporter) std::this_thread::sleep_for(std::chrono::seconds(3));
      mpi_abort(code);
    }
  } catch (const std::exception& e) {  // not a tetra::Error (bad_alloc, filesystem_error, ...)
    std::fflush(stdout);
    std::cerr << "tetra: error" + (world->size() > 1 ? " (rank " + std::to_string(rank) + ")" : std::string()) +
                     ": " + e.what() + "\n"
              << std::flush;
    code = exit_code::kError;
    if (world->size() > 1) mpi_abort(code);
  }
  world.reset();
  mpi_finalize();
  return code;
}

}  // namespace tetra::launch
