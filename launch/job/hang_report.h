// Naming the rank that stopped answering. When a collective times out (run.comm_timeout_s) the
// ranks still alive know only that some peer did not take part. A stopped or dead process cannot
// answer any message, so the side channel is the run directory: each rank that timed out writes
// RUN_DIR/hangs/<launch>/rank_R (its collective) and waits a grace period; the ranks with no file
// are the unresponsive ones. The lowest reporting rank names them with their host and pid (learnt
// at start-up), then the job is aborted.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/communicator.h"

namespace tetra::launch {

struct RankIdentity {
  int rank = 0;
  std::string host;
  int64_t pid = 0;
};

// Collective at start-up: every rank's host and pid, in rank order.
std::vector<RankIdentity> exchange_identities(Communicator& world);

struct HangDiagnosis {
  bool reporter = false;       // this rank is the one that prints the verdict
  std::vector<int> missing;    // ranks that did not report within the grace period
  std::string message;         // "rank 1 (pid 4242 on node7) did not reach ..."; "" when none is missing
};

// Writes this rank's report (into a folder named for rank 0's host and pid, so launches do not
// mix) and waits up to `grace_s` for the others' (less once every rank has reported).
HangDiagnosis diagnose_hang(const std::string& run_dir, const std::vector<RankIdentity>& ranks, int rank,
                            const std::string& what, double grace_s);

}  // namespace tetra::launch
