// `tetra train CONFIG [--set k=v ...]`: one rank of a training job. Exit codes: launch/job/signals.h.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "launch/cli/commands.h"
#include "launch/config/config.h"
#include "launch/job/environment.h"
#include "launch/job/hang_report.h"
#include "launch/job/rank_agreement.h"
#include "launch/job/signals.h"
#include "launch/train/trainer.h"
#include "runtime/device.h"
#include "runtime/goodput_clock.h"
#include "runtime/mpi_communicator.h"

namespace tetra::launch {

int train_command(const std::string& config_path, const std::vector<std::string>& overrides) {
  process_start_unix_time();  // anchor the process start before any work
  try {
    check_launcher_before_mpi();
  } catch (const Error& e) {
    // Before MPI no rank can tell the others: each says why it stops (one whole line per write).
    const char* task = std::getenv("SLURM_PROCID");
    std::cerr << std::string("tetra: error") + (task ? std::string(" (task ") + task + ")" : "") + ": " + e.what() + "\n"
              << std::flush;
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
  // Outside the try: an error that aborts the job does so with the trainer alive, so no destructor
  // waits on device work that a hung peer will never let finish.
  std::unique_ptr<Trainer> trainer;
  auto error_line = [&](int origin, const std::string& what) {
    return "tetra: error" + (world->size() > 1 ? " (rank " + std::to_string(origin) + ")" : std::string()) + ": " +
           what + "\n";
  };
  try {
    LaunchEnvironment env;
    Config cfg;
    // Every rank parses and validates the same config; what only some ranks can see (a file on
    // one node, a GPU) is agreed on before the first collective that would wait for them.
    agree(*world, [&] {
      env = discover_environment(rank, world->size());
      cfg = resolve(load_config(config_path, overrides), env.world_size, cuda_available());
      validate_for_training(cfg);
    });
    run_dir = (std::filesystem::path(cfg.run.output_dir) / cfg.run.name).string();
    comm_timeout_s = cfg.run.comm_timeout_s;
    ranks = exchange_identities(*world);  // who is who, should one of them stop answering
    trainer = std::make_unique<Trainer>(cfg, env, *world);
    code = trainer->run();
  } catch (const AgreedError& e) {
    // Every rank holds this error at the same point (launch/job/rank_agreement.h): rank 0 reports it
    // and all leave together, after rank 0 has written (a launcher may kill the job as soon as
    // one rank exits non-zero).
    code = exit_code_for(e.kind());
    if (rank == 0) {
      std::fflush(stdout);
      std::cerr << error_line(e.origin_rank(), e.what()) << std::flush;
    }
    try {
      if (world->size() > 1) world->barrier();
    } catch (const std::exception&) {
    }
  } catch (const Error& e) {
    // This rank's alone, as far as it knows (a peer may be waiting in a collective): report it
    // and abort the whole job instead of hanging it.
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
    std::string lines = error_line(rank, e.what());
    if (reporter && !verdict.empty()) lines += "tetra: " + verdict + "\n";
    std::fflush(stdout);
    std::cerr << lines << std::flush;
    if (world->size() > 1) {
      // The reporter aborts first; the others leave it time to print.
      if (e.kind() == ErrorKind::Comm && !reporter) std::this_thread::sleep_for(std::chrono::seconds(3));
      mpi_abort(code);
    }
  } catch (const std::exception& e) {  // not a tetra::Error (bad_alloc, filesystem_error, ...)
    std::fflush(stdout);
    std::cerr << error_line(rank, e.what()) << std::flush;
    code = exit_code::kError;
    if (world->size() > 1) mpi_abort(code);
  }
  trainer.reset();
  world.reset();
  mpi_finalize();
  return code;
}

}  // namespace tetra::launch
