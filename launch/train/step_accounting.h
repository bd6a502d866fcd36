// The accounting of finished steps on the host: each step's wall-clock span and its parts (the
// goodput ledger's step rows, averaged over the ranks so the categories add up within the step,
// docs/goodput.md), the metrics.jsonl row, its TensorBoard scalars and the progress line (rank 0),
// the tokens/s average and MFU, and the trace of the last log.profile_steps steps (every rank;
// merged by rank 0).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launch/config/config.h"
#include "parallel/comm_scheduler.h"
#include "runtime/communicator.h"
#include "runtime/goodput_clock.h"
#include "runtime/metrics_log.h"
#include "runtime/tensorboard_writer.h"

namespace tetra::launch {

// What a finished step reports, read back from the device and the schedulers.
struct StepResult {
  double loss = 0, grad_norm = 0, lr = 0;
  double data_wait_s = 0, exposed_comm_s = 0, optimizer_s = 0;
  double bubble_s = 0;  // compute waiting for pipeline transfers
  // Exposed communication of each mesh axis of size > 1, by axis name ("dp", "tp", ...).
  std::map<std::string, double> exposed_comm_axis_s;
  bool skipped = false;
  bool stop_nonfinite = false;  // skipped, and train.on_nonfinite is stop
  std::vector<double> moe_max_over_mean;  // per MoE layer: max / mean expert load of the step
};

class StepAccounting {
 public:
  // ledger, metrics, tensorboard (null when log.tensorboard is off): rank 0's (null elsewhere);
  // run_info: rank 0's (its FLOPs per token and peak FLOP/s give the MFU). comm, p2p (null at
  // pp = 1): the schedulers whose records a traced step shows. moe_blocks: the block of each MoE
  // layer (the metrics' names).
  StepAccounting(const Config& cfg, int rank, int world_size, Communicator& world, Device device,
                 GoodputLedger* ledger, MetricsLog* metrics, TensorBoardWriter* tensorboard, const RunInfo& run_info,
                 const CommScheduler& comm, const CommScheduler* p2p, int64_t tokens_per_step, int64_t start_step,
                 std::vector<int> moe_blocks);

  // A step launched while no other was in flight: its span starts now (and its trace, if traced).
  // A step launched ahead starts where its predecessor finished.
  void start(int64_t step);
  // The step's outcome is on the host: its span ends now. Every rank calls it (the ledger's shares
  // are reduced over the world); returns the step's seconds on this rank.
  double finish(int64_t step, StepResult& r);
  // Rank 0: the metrics row (and its TensorBoard scalars) and, every log.every steps, the progress
  // line. tokens_seen: after it.
  void log(int64_t step, const StepResult& r, double step_seconds, std::optional<double> val_loss,
           int64_t tokens_seen);
  // Every rank writes its part of the trace; rank 0 merges them into RUN_DIR/trace.json and prints
  // the op profile (nothing when no step was traced).
  void write_trace(const std::string& run_dir);

 private:
  void trace_begin(int64_t step);
  void trace_end(int64_t step, double seconds);
  // Rank 0's ledger row; the shares of the step's parts averaged over the ranks first.
  void ledger_row(int64_t step, StepResult& r, double seconds, double t_start);

  const Config& cfg_;
  int rank_, world_size_;
  Communicator& world_;
  Device device_;
  GoodputLedger* ledger_;
  MetricsLog* metrics_;
  TensorBoardWriter* tensorboard_;
  double flops_per_token_, peak_flops_;  // peak_flops_: of all devices; 0 when unknown
  const CommScheduler& comm_;
  const CommScheduler* p2p_;
  int64_t tokens_per_step_, start_step_;
  std::vector<int> moe_blocks_;
  double clock_ = 0, ledger_clock_ = 0;  // when the step being finished began (its predecessor ended)
  double tokens_per_s_ema_ = 0;
};

}  // namespace tetra::launch
