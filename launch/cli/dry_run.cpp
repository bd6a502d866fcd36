// `tetra train CONFIG --dry-run`: the check a job script runs before it queues. The config is
// loaded, resolved and validated as `tetra train` does it (validate_for_training too: the data and
// any checkpoint.resume path must exist), then planned as `tetra plan` does it: the mesh, the
// model built as shapes only, memory and the pipeline. No MPI, no device, nothing written.
// Resolved as for a node with GPUs when the binary has the CUDA backend (train.device auto reads
// cuda), as for the CPU otherwise.
#include <cstdio>
#include <string>

#include "launch/cli/commands.h"
#include "launch/config/config.h"
#include "launch/job/environment.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace tetra::launch {

int train_dry_run(const std::string& config_path, const std::vector<std::string>& overrides, int world) {
  const LaunchEnvironment env = launcher_environment();
  const bool launched = env.launcher != "single";
  if (world > 0 && launched && env.world_size > 0 && world != env.world_size)
    TETRA_FAIL(Usage, "--world ", world, " but the launcher (", env.launcher, ") started ", env.world_size,
               " ranks; leave --world out under a launcher, or give the same number");
  const std::string from = world > 0 ? "--world" : launched ? env.launcher : "no launcher";
  if (world == 0) world = env.world_size;
  if (world == 0)
    TETRA_FAIL(Usage, "the launcher (", env.launcher, ") does not say how many ranks it started; give --world N");
  Config cfg = resolve(load_config(config_path, overrides), world, built_with_cuda());
  validate_for_training(cfg);
  if (env.rank != 0) return 0;  // one printout per job
  std::printf("tetra: dry run of %s at %d rank%s (%s): the config resolves and validates; nothing was started or "
              "written\n\n%s\n",
              config_path.c_str(), world, world == 1 ? "" : "s", from.c_str(),
              to_yaml(cfg).c_str());
  PlanOptions plan;
  plan.world = world;
  print_plan(cfg, plan);
  std::fflush(stdout);
  return 0;
}

}  // namespace tetra::launch
