#include "launch/environment.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/error.h"

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

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

double process_start_unix_time() {
  static const double start = [] {
    // Field 22 of /proc/self/stat: start time in clock ticks after boot; boot time from /proc/stat.
    std::ifstream stat("/proc/self/stat");
    std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    size_t close = content.rfind(')');
    double btime = 0;
    std::ifstream ps("/proc/stat");
    for (std::string line; std::getline(ps, line);)
      if (line.rfind("btime ", 0) == 0) btime = std::stod(line.substr(6));
    if (close != std::string::npos && btime > 0) {
      std::istringstream rest(content.substr(close + 2));
      std::string field;
      for (int i = 3; i <= 22 && rest >> field; ++i) {
        if (i == 22) {
          double ticks = std::stod(field);
          double t = btime + ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
          double now = now_unix();
          if (t <= now && now - t < 86400.0) return t;  // sane (not in a container with a foreign boot time)
        }
      }
    }
    return now_unix();
  }();
  return start;
}

LaunchEnvironment discover_environment(int mpi_rank, int mpi_size) {
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
  } else if (env_int("SLURM_PROCID", &r) && env_int("SLURM_NTASKS", &n)) {
    env.launcher = "srun";
    env.rank = r;
    env.world_size = n;
    if (env_int("SLURM_LOCALID", &lr)) env.local_rank = lr;
    if (env_int("SLURM_NTASKS_PER_NODE", &ls)) env.local_size = ls;
  } else if (env_int("PMIX_RANK", &r)) {
    env.launcher = "pmix";
    env.rank = r;
    env.world_size = mpi_size;
    if (env_int("PMIX_LOCAL_RANK", &lr)) env.local_rank = lr;
  } else {
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
