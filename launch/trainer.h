// Trainer: the training loop of one rank. Builds the mesh, the model, its parameters, the data
// loader and the optimizer from a resolved Config, then runs steps: gradient accumulation over
// micro-batches, data-parallel gradient reduction in buckets overlapped with backward, global
// gradient-norm clipping, AdamW, periodic evaluation; writes metrics.jsonl and the goodput ledger
// and prints progress and the goodput report (rank 0).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "data/batch_loader.h"
#include "launch/config.h"
#include "launch/environment.h"
#include "launch/lr_schedule.h"
#include "models/model.h"
#include "parallel/distributed_optimizer.h"
#include "parallel/mesh.h"
#include "parallel/param_set.h"
#include "runtime/goodput_clock.h"
#include "runtime/metrics_log.h"
#include "runtime/mpi_communicator.h"

namespace tetra::launch {

class Trainer {
 public:
  Trainer(const Config& cfg, const LaunchEnvironment& env, MpiCommunicator& world);
  ~Trainer();
  // Runs the remaining steps; returns the process exit code.
  int run();

  // Results for tests and tools.
  const std::vector<double>& losses() const { return losses_; }
  Model& model() { return *model_; }
  ParamSet& params() { return params_; }
  DistributedOptimizer& optimizer() { return *optimizer_; }

 private:
  void setup();
  void archive_previous_run();
  struct StepResult {
    double loss = 0, grad_norm = 0, lr = 0;
    double data_wait_s = 0, exposed_comm_s = 0, optimizer_s = 0;
    bool skipped = false;
  };
  StepResult train_step(int64_t step);
  double evaluate();
  void forward_backward(const data::HostBatch& batch, bool last_micro, double* loss_sum);
  void log_step(int64_t step, const StepResult& r, double step_seconds, std::optional<double> val_loss);
  bool is_rank0() const { return env_.rank == 0; }

  Config cfg_;
  LaunchEnvironment env_;
  MpiCommunicator& world_;
  std::string run_dir_;
  Device device_;
  DType act_dtype_;
  std::unique_ptr<Mesh> mesh_;
  std::unique_ptr<Model> model_;
  ParamSet params_;
  std::unique_ptr<CommScheduler> comm_;
  std::unique_ptr<DistributedOptimizer> optimizer_;
  std::unique_ptr<data::BatchLoader> loader_;
  std::unique_ptr<GoodputLedger> ledger_;  // rank 0 only
  std::unique_ptr<MetricsLog> metrics_;    // rank 0 only
  LrSchedule schedule_;
  std::unique_ptr<MicroBatchContext> ctx_;
  Tensor ids_dev_, targets_dev_;
  int64_t start_step_ = 0;  // steps already done (resume)
  int64_t tokens_seen_ = 0;
  int64_t skipped_steps_ = 0;
  std::vector<double> losses_;
  double tokens_per_s_ema_ = 0;
  double startup_peak_bytes_ = 0;  // tetra's allocations at their peak during setup()
};

}  // namespace tetra::launch
