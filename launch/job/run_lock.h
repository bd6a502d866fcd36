// One run per run directory. Rank 0 holds RUN_DIR/run.lock while its job runs; a second job that
// finds it held by a live run stops with a Usage error (exit 2) naming the holder, before it
// touches anything in the directory.
//
// Whether the holder is alive:
//  - on the same machine (same kernel boot id and pid namespace): its pid exists and started at
//    the recorded time (a reused pid has another start time) — decided at once;
//  - on another machine (a shared file system; a SLURM requeue on another node): a lease. The
//    holder touches the lock's modification time every kHeartbeatS; a lock untouched for kLeaseS
//    (by the file server's clock, compared with a file this process has just written there, so
//    the hosts' clocks need not agree) belongs to a run that is gone. A fresh lock is watched until
//    it is touched again (alive: refused) or its lease runs out (gone: taken over), at most kLeaseS.
// A stale lock is taken over with rename + hard link, so two jobs that find it at once cannot both
// win. A holder stopped (SIGSTOP) for longer than the lease counts as gone.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "launch/job/environment.h"

namespace tetra::launch {

class RunLock {
 public:
  static constexpr double kHeartbeatS = 5;
  static constexpr double kLeaseS = 30;
  static constexpr const char* kFileName = "run.lock";

  // Takes RUN_DIR/run.lock for this process (the directory exists), or throws a Usage error that
  // names the directory, the job that holds it (host, pid, start time) and what to do.
  static std::unique_ptr<RunLock> acquire(const std::string& run_dir, const LaunchEnvironment& env);
  // Stops the heartbeat and removes the lock, if it is still this process's.
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  RunLock(std::string path, unsigned long long inode);
  void heartbeat();

  std::string path_;
  unsigned long long inode_;  // the lock file this process created
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tetra::launch
