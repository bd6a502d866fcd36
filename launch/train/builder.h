// What a training run is made of, built once from a resolved Config on every rank (collective over
// the world): the device, the pipeline plan, the mesh and the groups this rank joins, the model and
// its parameters, the optimizer, the data loader, the pipeline's executors, the checkpointer and
// rank 0's run directory, ledger and metrics log. Anything that can fail on some ranks only is
// agreed on before the next collective (launch/job/rank_agreement.h). The Trainer owns the parts
// and runs steps with them.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/data_loader.h"
#include "launch/checkpoint/checkpointer.h"
#include "launch/config/config.h"
#include "launch/job/environment.h"
#include "launch/job/fault_injection.h"
#include "launch/job/run_lock.h"
#include "launch/report/goodput.h"
#include "launch/train/memory_plan.h"
#include "launch/train/model_stages.h"
#include "launch/train/pipeline_plan.h"
#include "models/model.h"
#include "models/moe_balance.h"
#include "parallel/comm_scheduler.h"
#include "parallel/distributed_optimizer.h"
#include "parallel/expert/expert_parallel.h"
#include "parallel/mesh.h"
#include "parallel/mesh_groups.h"
#include "parallel/param_set.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/transport.h"
#include "parallel/rank_groups.h"
#include "parallel/tensor/tensor_parallel.h"
#include "runtime/goodput_clock.h"
#include "runtime/metrics_log.h"
#include "runtime/mpi_communicator.h"
#include "runtime/tensorboard_writer.h"

namespace tetra::launch {

// Declared in the order they are built; destroyed the other way round (what refers to a part
// comes after it).
struct TrainingParts {
  std::string run_dir;
  std::unique_ptr<RunLock> run_lock;  // rank 0: RUN_DIR/run.lock, held until the last part is gone
  Device device = Device::cpu();
  DType act_dtype = DType::F32;       // working activations (train.precision)
  DType residual_dtype = DType::F32;  // the residual stream between blocks (train.residual_dtype)
  FaultPlan faults;
  // The pipeline: its stage split, every rank's schedule, the simulated step (docs/pipeline.md).
  std::unique_ptr<PipelinePlan> pipe;
  std::unique_ptr<Mesh> mesh;
  RankGroups holding;  // what this rank holds and the groups it joins (parallel/rank_groups.h)
  MeshGroups groups;   // those groups, made
  std::unique_ptr<Model> model;
  ParamSet params;
  // parallel.ep > 1: this rank's experts' slices (over the expert-data group) and the EP group.
  ParamSet expert_params;
  std::unique_ptr<ExpertParallel> expert_parallel;
  std::unique_ptr<CommScheduler> comm;
  std::unique_ptr<TensorParallel> tp;  // parallel.tp > 1: what the model's layers communicate through
  // parallel.grad_all_reduce: copy_engine: the dp group's device communicator with the gradient
  // buffer registered for the copy engines (wraps the mesh's; null otherwise).
  std::unique_ptr<Communicator> grad_comm;
  DistributedOptimizerOptions optimizer_options;
  std::unique_ptr<DistributedOptimizer> optimizer;
  std::unique_ptr<MoeBalance> balance;  // the MoE layers' router biases and loads (none: empty)
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<GoodputLedger> ledger;  // rank 0 only
  std::unique_ptr<MetricsLog> metrics;    // rank 0 only
  RunInfo run_info;                       // rank 0: what its ledger records (FLOPs per token, peak FLOP/s)
  // The pipeline's model side, its transfers and their scheduler (whose waits are the bubble), the
  // executors of training and evaluation; the step's copied micro-batches (pipelines, and pp = 1
  // with forward-backward pairs) and the evaluation's loss sum.
  std::unique_ptr<ModelStages> stages;
  std::unique_ptr<CommScheduler> p2p;
  std::unique_ptr<PipelineTransport> transport;
  std::unique_ptr<PipelineExecutor> executor, eval_executor;
  std::vector<Tensor> step_ids, step_targets;
  Tensor eval_loss;
  std::unique_ptr<Checkpointer> checkpointer;
  TrainingProgress resumed;        // where the run starts (checkpoint.resume; 0 for a fresh run)
  // log.tensorboard: rank 0's event file of this attempt (null elsewhere and when off).
  std::unique_ptr<TensorBoardWriter> tensorboard;
  double startup_peak_bytes = 0;   // tetra's allocations at their peak while building
};

// Collective over `world`. cfg and env must outlive the parts.
std::unique_ptr<TrainingParts> build_training(const Config& cfg, const LaunchEnvironment& env, MpiCommunicator& world);

// This rank's memory plan: the running optimizer's own accounting of its parameters, and under a
// schedule with several micro-batches in flight, its stages' activations at the schedule's peak.
MemoryPlan rank_memory_plan(const Config& cfg, const TrainingParts& parts);

// parallel.grad_all_reduce: copy_engine (launch/train/copy_engine_cuda.cpp): the gradient reduction
// over the dp group by the GPUs' copy engines, the ParamSet's gradient buffer adopted into its
// registered one. Fails where the ranks cannot (no CUDA, not one host, no peer access).
std::unique_ptr<Communicator> copy_engine_grad_comm(const Config& cfg, const Mesh& mesh, Communicator& grad,
                                                   Device device, ParamSet& params);

}  // namespace tetra::launch
