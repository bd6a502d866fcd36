#include "launch/job/environment.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "runtime/goodput_clock.h"

namespace tetra::launch {

namespace {
bool env_int(const char* name, int* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0') TETRA_FAIL(Usage, "environment variable ", name, "='", v, "' is not an integer");
  *out = static_cast<int>(x);
  return true;
}

// Tasks on node `node` from SLURM's compressed list: "2(x3),1" = 2, 2, 2, 1 (0 when malformed).
int slurm_tasks_on_node(const std::string& list, int node) {
  int seen = 0;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t end = list.find(',', pos);
    std::string item = list.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? list.size() : end + 1;
    int tasks = 0, repeat = 1;
    if (std::sscanf(item.c_str(), "%d(x%d)", &tasks, &repeat) < 1) return 0;
    if (node < seen + repeat) return tasks;
    seen += repeat;
  }
  return 0;
}

}  // namespace

void check_launcher_before_mpi() {
  // srun without PMIx (--mpi=none, or pmi2 for an Open MPI without PMI-2 support): Open MPI would
  // abort inside MPI_Init with a message that does not say what to do.
  if (!std::getenv("SLURM_STEP_ID") || std::getenv("PMIX_RANK") || std::getenv("OMPI_COMM_WORLD_RANK")) return;
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(version, &len);  // allowed before MPI_Init
  if (std::string(version, static_cast<size_t>(len)).find("Open MPI") == std::string::npos) return;
  const char* plugin = std::getenv("SLURM_MPI_TYPE");
  TETRA_FAIL(Usage, "srun started this task without PMIx (srun --mpi=", plugin ? plugin : "none",
             "): tetra's MPI (Open MPI) needs srun --mpi=pmix, or MpiDefault=pmix in slurm.conf "
             "(`srun --mpi=list` shows what the cluster offers)");
}

std::optional<unsigned long long> process_start_ticks(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = content.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(content.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return std::nullopt;  // exited, not yet reaped
    if (i == 22) return std::stoull(field);
  }
  return std::nullopt;
}

LaunchEnvironment launcher_environment() {
  LaunchEnvironment env;
  env.process_start_unix = process_start_unix_time();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  env.host = host;
  int r = 0, n = 0, lr = 0, ls = 0;
  if (env_int("OMPI_COMM_WORLD_RANK", &r) && env_int("OMPI_COMM_WORLD_SIZE", &n)) {
    env.launcher = "mpirun";
    env.rank = r;
    env.world_size = n;
    if (env_int("OMPI_COMM_WORLD_LOCAL_RANK", &lr)) env.local_rank = lr;
    if (env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &ls)) env.local_size = ls;
  } else if (std::getenv("SLURM_STEP_ID") && env_int("SLURM_PROCID", &r) &&
             (env_int("SLURM_STEP_NUM_TASKS", &n) || env_int("SLURM_NTASKS", &n))) {
    // A task of an srun step (a batch script itself has no step id and is not a rank).
    env.launcher = "srun";
    env.rank = r;
    env.world_size = n;
    if (env_int("SLURM_LOCALID", &lr)) env.local_rank = lr;
    int node = 0;
    env_int("SLURM_NODEID", &node);
    const char* per_node = std::getenv("SLURM_STEP_TASKS_PER_NODE");
    if (per_node && slurm_tasks_on_node(per_node, node) > 0) env.local_size = slurm_tasks_on_node(per_node, node);
  } else if (env_int("PMIX_RANK", &r)) {
    env.launcher = "pmix";
    env.rank = r;
    env.world_size = 0;  // PMIx's variables do not say it
    if (env_int("PMIX_LOCAL_RANK", &lr)) env.local_rank = lr;
  }
  return env;
}

LaunchEnvironment discover_environment(int mpi_rank, int mpi_size) {
  LaunchEnvironment env = launcher_environment();
  if (env.launcher == "pmix") {
    env.world_size = mpi_size;
  } else if (env.launcher == "single") {
    env.launcher = mpi_size > 1 ? "mpi" : "single";
    env.rank = mpi_rank;
    env.world_size = mpi_size;
  }
  if (env.rank != mpi_rank || env.world_size != mpi_size)
    TETRA_FAIL(Usage, "the launcher (", env.launcher, ") says rank ", env.rank, " of ", env.world_size,
               " but MPI says rank ", mpi_rank, " of ", mpi_size,
               ": was tetra built against a different MPI than the one launching it (srun needs --mpi=pmix)?");
  return env;
}

}  // namespace tetra::launch
