// Checkpointer: saves and restores the training state of every rank (ARCHITECTURE.md §6,
// docs/operations.md). A save writes this rank's StatePieces to checkpoints/step_N.tmp/rank_R.h5
// (fsync'd, CRC-32 taken), then — once every rank's file is on disk — rank 0 writes meta.json,
// renames step_N.tmp to step_N and fsyncs the directory, so a crash at any point leaves either a
// complete checkpoint or one that resume ignores. The newest checkpoint.keep are kept.
//
// With checkpoint.async the step is blocked only while the state is copied to (pinned) host
// memory; a background thread writes the file while training goes on. The threads never talk
// MPI: the trainer learns from its once-per-step all-reduce when every rank's writer is done and
// then calls commit() on every rank at the same step.
//
// resume() finds the checkpoint named by checkpoint.resume (auto: the newest whose files verify),
// loads the ranges this rank's pieces need from whichever rank files hold them (resharding), and
// returns the position to continue from.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launch/checkpoint/meta.h"
#include "launch/checkpoint/snapshot.h"
#include "launch/config/config.h"
#include "launch/job/fault_injection.h"
#include "parallel/distributed_optimizer.h"
#include "parallel/mesh.h"
#include "runtime/goodput_clock.h"

namespace tetra::launch {

class CheckpointReader;

// Where training stands: the state is the one after `step` steps.
struct TrainingProgress {
  int64_t step = 0;
  int64_t tokens_seen = 0;
  int64_t skipped_steps = 0;
};

class Checkpointer {
 public:
  // `params`: the model's parameters in model order (names and full shapes for meta.json).
  // `ledger` is rank 0's goodput ledger (nullptr elsewhere).
  Checkpointer(const Config& cfg, const std::string& run_dir, Communicator& world, const Mesh& mesh,
               DistributedOptimizer& optimizer, const std::vector<Param*>& params, GoodputLedger* ledger);
  // Waits for a background write (without committing it: a checkpoint left uncommitted stays a
  // step_N.tmp that resume ignores).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective. checkpoint.resume none: nullopt. auto: the newest checkpoint under
  // RUN_DIR/checkpoints whose meta.json reads and whose rank files match their checksums (the
  // newer damaged ones are reported and renamed step_N.discarded); nullopt when there is no
  // checkpoint at all, a Config error listing each and why when there are some and none is usable
  // (nothing renamed). A path: that checkpoint, or a Config error saying why it cannot be used.
  // A checkpoint whose files cannot be read (permissions, I/O errors) stops the resume with a
  // Checkpoint error and nothing renamed, auto or not. Loads weights and optimizer state into the
  // optimizer's pieces and returns the progress the checkpoint holds.
  std::optional<TrainingProgress> resume();

  // Collective: checkpoints the state after progress.step. Synchronous: returns once committed.
  // Async: returns once the state is copied to host memory (waiting first for an earlier write).
  void save(const TrainingProgress& progress);
  // This rank's background write is still going.
  bool writing() const;
  // A save waits for its commit (the same on every rank).
  bool uncommitted() const { return pending_ != nullptr; }
  // Collective: commits the pending save. Call on every rank once writing() is false everywhere.
  void commit();
  // Collective: waits for this rank's write, then commits (before the process ends).
  void finish();

  std::optional<int64_t> last_committed_step() const { return last_committed_; }
  // TETRA_FAULT drills that act inside a save (launch/job/fault_injection.h); not owned.
  void set_faults(const FaultPlan* faults) { faults_ = faults; }
  // The training corpus' fingerprint (data/corpus.h): saved in meta.json, compared at resume.
  void set_data_fingerprint(const std::string& fingerprint) { data_fingerprint_ = fingerprint; }

 private:
  struct Pending;
  void write_file(Pending& p);  // on the writer thread (async) or the caller's; never throws
  CheckpointMeta make_meta(const Pending& p) const;
  std::vector<RankFileInfo> gather_index(const std::vector<SavedPiece>& mine);
  void commit_on_rank0(Pending& p, const std::vector<RankFileInfo>& files);
  void apply_retention();
  void set_aside(const std::string& path, const std::string& why);
  // Collective: the step_N directories resume: auto tries, newest first (rank 0's listing).
  std::vector<std::string> resume_candidates();
  // Collective: the first candidate every rank verifies; the rejected ones (path, why) before it.
  std::unique_ptr<CheckpointReader> first_usable(const std::vector<std::string>& candidates,
                                                 std::vector<std::pair<std::string, std::string>>& rejected);
  // Collective: loads `chosen` into the optimizer and says so; the progress it holds.
  TrainingProgress load(CheckpointReader& chosen, double t0);
  // Collective: the first non-empty `mine` over the ranks, as "rank R: ...", known to every rank.
  static std::string first_problem(Communicator& world, const std::string& mine);
  // Throws a Config error when `chosen` holds another model (parameter names and shapes, every
  // model.* key) or was trained on other data (unless checkpoint.allow_data_change); warns about
  // other config changes that make the resumed run differ from an uninterrupted one.
  void check_resumable(const CheckpointReader& chosen) const;
  // Part of check_resumable: optimizer.* (the LR schedule) and train.steps against `old`'s.
  void check_schedule(const Config& old, int64_t steps_run) const;
  bool is_rank0() const { return world_.rank() == 0; }
  double now() const;

  Config cfg_;
  std::string run_dir_, dir_;
  Communicator& world_;
  const Mesh& mesh_;
  DistributedOptimizer& optimizer_;
  std::vector<ParamInfo> params_;
  GoodputLedger* ledger_;
  HostSnapshot snapshot_;
  std::unique_ptr<Pending> pending_;
  std::optional<std::vector<RankFileInfo>> index_;  // every rank's pieces: fixed for a run
  std::optional<int64_t> last_committed_;
  std::string data_fingerprint_;
  const FaultPlan* faults_ = nullptr;
};

}  // namespace tetra::launch
