// Trainer: the training loop of one rank. Its parts — mesh, model, parameters, data loader,
// optimizer, pipeline, checkpointer — come from build_training (launch/train/builder.h); it runs
// steps: the micro-batches through the rank's pipeline schedule (PipelineExecutor; at pp = 1 the
// trivial one), data-parallel gradient reduction in buckets overlapped with backward, global
// gradient-norm clipping, AdamW, periodic evaluation; writes metrics.jsonl and the goodput ledger
// and prints progress and the goodput report (rank 0). Checkpoints every checkpoint.every steps,
// resumes per checkpoint.resume, and stops gracefully on SIGTERM/SIGUSR1/SIGINT (all ranks after
// the same step) and on a non-finite step under train.on_nonfinite: stop (docs/operations.md).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/config/config.h"
#include "launch/job/environment.h"
#include "launch/train/builder.h"
#include "launch/train/step_accounting.h"
#include "launch/train/step_state.h"
#include "launch/train/text_samples.h"
#include "runtime/mpi_communicator.h"

namespace tetra::launch {

class Trainer {
 public:
  Trainer(const Config& cfg, const LaunchEnvironment& env, MpiCommunicator& world);
  ~Trainer();
  // Runs the remaining steps; returns the process exit code (launch/job/signals.h). An error thrown
  // out of it is recorded in the goodput ledger as the end of the attempt first.
  int run();

  // Results for tests and tools.
  const std::vector<double>& losses() const { return losses_; }
  Model& model() { return *parts_->model; }
  ParamSet& params() { return parts_->params; }
  DistributedOptimizer& optimizer() { return *parts_->optimizer; }

 private:
  // A step is launched (its device work enqueued, nothing waited for) and later finished (its
  // outcome read back). While step s runs on the device the host may launch s + 1, so the device
  // never idles between steps for the host's bookkeeping (may_run_ahead says when it may).
  struct Launched {
    int64_t step = 0;
    double data_wait_s = 0;
  };
  Launched launch_step(int64_t step);
  StepResult finish_step(const Launched& l);
  bool may_run_ahead(int64_t step) const;  // step + 1 may be launched before step is finished
  bool eval_due(int64_t step) const;
  bool checkpoint_due(int64_t step) const;
  bool sample_due(int64_t step) const { return samples_ && samples_->due(step); }
  // Waits for a launched step's outcome on the host, for at most run.comm_timeout_s (a peer that
  // stopped leaves the collectives of the step waiting forever on the device).
  const double* wait_readback(int64_t step);
  // The device work of one step, with no host synchronisation: zero gradients, forward and
  // backward of every micro-batch (the loss summed on the device), gradient reduction, the step
  // control (runtime/step_control.h) and the optimizer update. Micro-batch inputs come from the
  // loader, or (graph_inputs) from the static buffers a captured graph reads.
  void enqueue_step(int64_t step, bool graph_inputs, double* data_wait_s);
  bool graph_step(int64_t step) const;  // replayed from (or captured into) a step graph
  void poison_gradient(const Layer& l);      // TETRA_FAULT nan_grad
  void stall_for_drill(int64_t step) const;  // TETRA_FAULT data_stall
  // launch/train/trainer_pipeline.cpp: the step's micro-batches through the schedule (forwards,
  // backwards, transfers); evaluation; the loss and norm of the step.
  void run_schedule(int64_t step, bool graph_inputs, double* data_wait_s);
  // Pipelines (and forward-backward pairs): the micro-batches of a step (or evaluation batch)
  // copied where the schedule reads them.
  void copy_batches(int64_t index, bool eval, double* data_wait_s);
  double evaluate();
  // Loss over the global batch and Σ g² over every parameter, the same on every rank.
  void reduce_loss_and_norm();
  void report_pipeline_peaks();
  int run_steps();
  // launch/train/trainer_end.cpp. After the last step: the non-finite stop, the stop for too many
  // skipped steps, the stop by signal, or the end of a finished run; returns the exit code.
  int end_run(int64_t step, int stop, bool nonfinite, bool skip_limit);
  // train.max_skipped_steps under train.on_nonfinite: skip: counts `step` (0-based) skipped or not
  // and notes when the limit is passed; the message says which bound and which steps.
  void count_skip(int64_t step, bool skipped);
  std::string skip_limit_message(int64_t steps_done) const;
  void report_memory_peaks();
  // After every step, on every rank: the stop signal any rank received (0: none), and in
  // `skip_limit` whether any rank passed train.max_skipped_steps; commits a background checkpoint
  // write once every rank's is done.
  int agree_after_step(bool& skip_limit);
  TrainingProgress progress(int64_t steps_done) const;
  // The end of an attempt that stops early: report, ledger, message; returns the exit code.
  int end_attempt(const std::string& reason, int code, const std::string& message);
  // Rank 0, run.html_report: RUN_DIR/report.html from `report` (computed here when null); a page
  // that cannot be written is a warning, never the attempt's error.
  void write_page(const GoodputReport* report);
  void write_tensorboard_goodput(const GoodputReport& report);
  bool is_rank0() const { return env_.rank == 0; }

  Config cfg_;
  LaunchEnvironment env_;
  MpiCommunicator& world_;
  std::unique_ptr<TrainingParts> parts_;
  std::unique_ptr<StepState> state_;
  std::unique_ptr<TextSamples> samples_;  // log.sample_every (null when off)
  std::unique_ptr<StepAccounting> accounting_;
  bool poison_grad_ = false;  // a nan_grad drill acts in this step's first weight gradient
  int64_t start_step_ = 0;    // steps already done (resume)
  int64_t tokens_seen_ = 0;
  int64_t skipped_steps_ = 0;   // over the run, resumed attempts included
  int64_t skipped_in_a_row_ = 0;
  std::vector<int64_t> skipped_here_;  // steps (1-based) this attempt skipped
  std::string over_skip_limit_;        // which bound was passed, once one was; "" before
  std::vector<double> losses_;
};

}  // namespace tetra::launch
