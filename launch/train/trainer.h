// Trainer: the training loop of one rank. Builds the mesh, the model, its parameters, the data
// loader and the optimizer from a resolved Config, then runs steps: the micro-batches through the
// rank's pipeline schedule (PipelineExecutor; at pp = 1 the trivial one), data-parallel gradient
// reduction in buckets overlapped with backward, global
// gradient-norm clipping, AdamW, periodic evaluation; writes metrics.jsonl and the goodput ledger
// and prints progress and the goodput report (rank 0). Checkpoints every checkpoint.every steps,
// resumes per checkpoint.resume, and stops gracefully on SIGTERM/SIGUSR1/SIGINT (all ranks after
// the same step) and on a non-finite step under train.on_nonfinite: stop (docs/operations.md).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "data/data_loader.h"
#include "launch/checkpoint/checkpointer.h"
#include "launch/config/config.h"
#include "launch/job/environment.h"
#include "launch/job/fault_injection.h"
#include "launch/report/goodput.h"
#include "launch/train/lr_schedule.h"
#include "launch/train/memory_plan.h"
#include "launch/train/model_stages.h"
#include "launch/train/pipeline_plan.h"
#include "models/model.h"
#include "models/moe_balance.h"
#include "parallel/distributed_optimizer.h"
#include "parallel/expert/expert_parallel.h"
#include "parallel/mesh.h"
#include "parallel/param_set.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/transport.h"
#include "parallel/tensor/tensor_parallel.h"
#include "runtime/cuda_graph.h"
#include "runtime/goodput_clock.h"
#include "runtime/host_readback.h"
#include "runtime/metrics_log.h"
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
  Model& model() { return *model_; }
  ParamSet& params() { return params_; }
  DistributedOptimizer& optimizer() { return *optimizer_; }

 private:
  void setup();
  void prepare_run_dir();                       // rank 0: the run directory, ledger, metrics log
  void check_memory_fits(int dp) const;         // the memory plan against the device, before allocating
  void print_startup(const MeshShape& shape);   // rank 0: run_info in the ledger, start-up lines
  void initial_weights(ParamSet& set);  // random init or model.init_from
  void setup_experts(const DistributedOptimizerOptions& oo, const std::vector<Param*>& held);  // parallel.ep > 1
  void trace_step_begin(int64_t step);
  void trace_step_end(int64_t step, double seconds);
  void write_trace();
  void archive_previous_run();
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
  // Waits for a launched step's outcome on the host, for at most run.comm_timeout_s (a peer that
  // stopped leaves the collectives of the step waiting forever on the device).
  const double* wait_readback(int64_t step);
  // The device work of one step, with no host synchronisation: zero gradients, forward and
  // backward of every micro-batch (the loss summed on the device), gradient reduction, the step
  // control (runtime/step_control.h) and the optimizer update. Micro-batch inputs come from the
  // loader, or (graph_inputs) from the static buffers a captured graph reads.
  void enqueue_step(int64_t step, bool graph_inputs, double* data_wait_s);
  bool graph_step(int64_t step) const;  // replayed from (or captured into) a step graph
  double evaluate();
  void poison_gradient(const Layer& l);  // TETRA_FAULT nan_grad
  void stall_for_drill(int64_t step) const;  // TETRA_FAULT data_stall
  // Pipeline parallelism (launch/train/trainer_pipeline.cpp, docs/pipeline.md). The parameters this rank
  // holds (its chunks' layers; tied weights localised to them) and the groups made for them.
  std::vector<Param*> pipeline_params();
  void create_pipeline_groups();  // collective: DualPipe's pairs, the tie of the first and last stage
  // The group the optimizer reduces gradients over: data parallel, and DualPipe's pair.
  Communicator& grad_group() const;
  Communicator& expert_grad_group() const;  // the experts' reduction: expert-data group, and its DualPipe mirror
  void setup_pipeline();  // the model side, the transfers, the executors
  // The step's micro-batches through the schedule (forwards, backwards, transfers).
  void run_schedule(int64_t step, bool graph_inputs, double* data_wait_s);
  // pp > 1: the micro-batches of a step (or evaluation batch) copied where the schedule reads them.
  void copy_batches(int64_t index, bool eval, double* data_wait_s);
  // Loss over the global batch and Σ g² over every parameter, the same on every rank.
  void reduce_loss_and_norm();
  MemoryPlan memory_plan() const;  // this rank's, activations at its schedule's peak
  void report_pipeline_peaks();
  void log_step(int64_t step, const StepResult& r, double step_seconds, std::optional<double> val_loss);
  int run_steps();
  // After every step, on every rank: the stop signal any rank received (0: none); commits a
  // background checkpoint write once every rank's is done.
  int agree_after_step();
  TrainingProgress progress(int64_t steps_done) const;
  // The end of an attempt that stops early: report, ledger, message; returns the exit code.
  int end_attempt(const std::string& reason, int code, const std::string& message);
  // Rank 0, run.html_report: RUN_DIR/report.html from `report` (computed here when null); a page
  // that cannot be written is a warning, never the attempt's error.
  void write_page(const GoodputReport* report);
  bool is_rank0() const { return env_.rank == 0; }

  Config cfg_;
  LaunchEnvironment env_;
  MpiCommunicator& world_;
  std::string run_dir_;
  Device device_;
  DType act_dtype_;       // working activations (train.precision)
  DType residual_dtype_;  // the residual stream between blocks (train.residual_dtype)
  std::unique_ptr<Mesh> mesh_;
  std::unique_ptr<Model> model_;
  ParamSet params_;
  // parallel.ep > 1: this rank's experts' slices (over the expert-data group) and the EP group.
  ParamSet expert_params_;
  std::unique_ptr<ExpertParallel> expert_parallel_;
  std::unique_ptr<CommScheduler> comm_;
  std::unique_ptr<TensorParallel> tp_;  // parallel.tp > 1: what the model's layers communicate through
  // parallel.tp > 1 with parameter parts replicated over r < tp ranks (grouped-query key/value heads
  // when tp > n_kv_heads): per r, this rank's group of the r tp ranks holding its blocks.
  std::map<int, Mesh::Group> tp_replica_groups_;
  // parallel.grad_all_reduce: copy_engine: the dp group's device communicator with the gradient
  // buffer registered for the copy engines (wraps the mesh's; null otherwise).
  std::unique_ptr<Communicator> grad_comm_;
  std::unique_ptr<DistributedOptimizer> optimizer_;
  std::unique_ptr<MoeBalance> balance_;  // the MoE layers' router biases and loads (none: empty)
  Mesh::Group balance_group_;            // pp > 1: the ranks whose loads are summed (else dp)
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<GoodputLedger> ledger_;  // rank 0 only
  std::unique_ptr<MetricsLog> metrics_;    // rank 0 only
  std::unique_ptr<Checkpointer> checkpointer_;
  FaultPlan faults_;
  bool poison_grad_ = false;  // a nan_grad drill acts in this step's first weight gradient
  // The pipeline: the plan (split, schedule, simulation), this rank's place in it, the groups its
  // gradients are summed over, the model side, the transfers and their scheduler (whose waits are
  // the bubble), the executors of training and evaluation, the step's copied micro-batches.
  std::unique_ptr<PipelinePlan> pipe_;
  int pp_rank_ = 0;
  std::vector<int> held_layers_;
  std::vector<Param*> tied_;  // also held by another pipeline rank
  bool tie_owner_ = true;
  bool counts_norm_ = true;   // this pipeline rank adds its layers to the gradient norm
  std::vector<int> grad_members_, tie_members_, expert_grad_members_;  // world ranks; empty where no such group exists
  Mesh::Group grad_group_, tie_group_, expert_grad_group_;
  std::unique_ptr<ModelStages> stages_;
  std::unique_ptr<CommScheduler> p2p_;
  std::unique_ptr<PipelineTransport> transport_;
  std::unique_ptr<PipelineExecutor> executor_, eval_executor_;
  Tensor eval_loss_;
  std::vector<Tensor> step_ids_, step_targets_;
  // Device-side step state (runtime/step_control.h): the loss sum and Σ g² of the step, the control
  // (schedule position, update count, decisions), the LR of every step, and the readback of the
  // control to the host. The step graph and its static micro-batch inputs (train.cuda_graphs).
  // Per slot (step % 2, two steps in flight at most): the readback, the optimizer-phase timing
  // events and the captured graph (each graph records its own events, so both can be in flight).
  Tensor loss_sum_, grad_sq_, control_, lr_table_;
  StepControlConfig control_cfg_;
  struct Slot {
    std::unique_ptr<HostReadback<double>> readback;
    std::unique_ptr<Event> opt_begin, opt_end;
    std::unique_ptr<CudaGraph> graph;
  };
  Slot slots_[2];
  static int slot_of(int64_t step) { return static_cast<int>(step % 2); }
  std::vector<Tensor> graph_ids_, graph_targets_;
  int64_t graph_from_step_ = -1;  // the first step run from a graph (-1: graphs off)
  int64_t start_step_ = 0;  // steps already done (resume)
  int64_t tokens_seen_ = 0;
  int64_t skipped_steps_ = 0;
  std::vector<double> losses_;
  double tokens_per_s_ema_ = 0;
  double startup_peak_bytes_ = 0;  // tetra's allocations at their peak during setup()
};

}  // namespace tetra::launch
