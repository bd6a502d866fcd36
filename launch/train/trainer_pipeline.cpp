// The Trainer's micro-batches through its pipeline schedule (docs/pipeline.md), evaluation, and
// the step's loss and gradient norm over the pipeline and data-parallel ranks. At pp = 1 the same
// path runs the trivial schedule.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ranges>

#include "launch/train/trainer.h"
#include "models/fp8_step_weights.h"
#include "runtime/ops.h"
#include "runtime/text_join.h"

namespace tetra::launch {

namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void Trainer::copy_batches(int64_t index, bool eval, double* data_wait_s) {
  TrainingParts& p = *parts_;
  for (size_t m = 0; m < p.step_ids.size(); ++m) {
    const double t0 = seconds_now();
    data::LoadedBatch b =
        eval ? p.loader->eval_batch(index, static_cast<int>(m)) : p.loader->batch(index, static_cast<int>(m));
    if (data_wait_s) *data_wait_s += seconds_now() - t0;
    ops::copy(p.step_ids[m], b.inputs);
    ops::copy(p.step_targets[m], b.targets);
  }
}

void Trainer::run_schedule(int64_t step, bool graph_inputs, double* data_wait_s) {
  TrainingParts& p = *parts_;
  ModelStages::BatchSource source;
  if (graph_inputs) {  // the step graph's fixed buffers, filled before each replay (pp = 1)
    source = [this](int m) { return state_->graph_batch(m); };
  } else if (!p.step_ids.empty()) {
    copy_batches(step, /*eval=*/false, data_wait_s);
    source = [&p](int m) {
      return data::LoadedBatch{p.step_ids[static_cast<size_t>(m)], p.step_targets[static_cast<size_t>(m)]};
    };
  } else {
    // pp = 1: from the loader as each forward needs it, as the loader reads ahead.
    source = [&p, step, data_wait_s](int m) {
      const double t0 = seconds_now();
      data::LoadedBatch b = p.loader->batch(step, m);
      *data_wait_s += seconds_now() - t0;
      return b;
    };
  }
  p.stages->begin(/*training=*/true, std::move(source), state_->loss_sum(),
                  1.0f / static_cast<float>(p.loader->tokens_per_step()));
  {
    // each FP8 weight cast once this step
    const Fp8StepWeights fp8_weights(p.model->params(), cfg_.parallel.zero_stage == 3);
    p.executor->run(*p.stages);
  }
  p.stages->end();
}

double Trainer::evaluate() {
  TrainingParts& p = *parts_;
  p.optimizer->sync_weights();  // ZeRO 1–2 leave part of the last update to the next step's forward
  const int64_t batches = std::min<int64_t>(cfg_.train.eval_batches, p.loader->num_eval_batches());
  if (p.p2p) p.p2p->begin_step();  // its records of the evaluation are not a step's
  ops::zero(p.eval_loss);
  for (int64_t b = 0; b < batches; ++b) {
    ModelStages::BatchSource source;
    if (!p.step_ids.empty()) {
      copy_batches(b, /*eval=*/true, nullptr);
      source = [&p](int m) {
        return data::LoadedBatch{p.step_ids[static_cast<size_t>(m)], p.step_targets[static_cast<size_t>(m)]};
      };
    } else {
      source = [&p, b](int m) { return p.loader->eval_batch(b, m); };
    }
    p.stages->begin(/*training=*/false, std::move(source), p.eval_loss, 1.0f);
    p.eval_executor->run(*p.stages);
    p.stages->end();
  }
  // The losses are on the ranks that hold the output layer: summed over the pipeline, then over
  // the data-parallel replicas.
  std::vector<double> sum{ops::sum_to_host(p.eval_loss)};
  if (p.mesh->shape().pp > 1) p.mesh->comm(MeshAxis::PP).all_reduce_host(sum);
  Communicator& dp = p.mesh->comm(MeshAxis::DP);
  if (dp.size() > 1) dp.all_reduce_host(sum);
  return sum[0] / static_cast<double>(batches * p.loader->tokens_per_step());
}

void Trainer::reduce_loss_and_norm() {
  const Mesh& mesh = *parts_->mesh;
  Tensor& loss_sum = state_->loss_sum();
  Tensor& grad_sq = state_->grad_sq();
  // Loss: the sum over every token of the global batch, from the ranks holding the output layer.
  Communicator& dp = mesh.device_comm(MeshAxis::DP);
  if (dp.size() > 1) dp.all_reduce(loss_sum, ReduceOp::Sum)->wait();
  if (mesh.shape().pp > 1) mesh.device_comm(MeshAxis::PP).all_reduce(loss_sum, ReduceOp::Sum)->wait();
  // Gradient norm: every element once — each pipeline rank's layers (one rank of a DualPipe pair
  // for both; the owner's copy of a tied weight), over the data-parallel shards.
  ops::zero(grad_sq);
  parts_->optimizer->grad_norm_squared(grad_sq);
  if (mesh.shape().pp > 1) {
    if (!parts_->holding.counts_norm) ops::zero(grad_sq);
    mesh.device_comm(MeshAxis::PP).all_reduce(grad_sq, ReduceOp::Sum)->wait();
  }
}

void Trainer::report_pipeline_peaks() {
  const int pp = parts_->mesh->shape().pp;
  if (pp <= 1) return;
  // Each pipeline rank's measured peak of micro-batches in flight beside the simulator's.
  std::vector<double> peaks(static_cast<size_t>(pp), 0.0);
  peaks[static_cast<size_t>(parts_->holding.pp_rank)] = parts_->stages->peak_contexts();
  parts_->mesh->comm(MeshAxis::PP).all_reduce_host(peaks);
  if (!is_rank0()) return;
  const auto ranks = std::views::iota(size_t{0}, static_cast<size_t>(pp));
  const std::string measured =
      join_text(ranks, ", ", [&](size_t r) { return std::to_string(static_cast<int>(peaks[r])); });
  const std::string simulated =
      join_text(ranks, ", ", [&](size_t r) { return std::to_string(parts_->pipe->sim.peak_activations[r]); });
  std::printf("tetra: pipeline peak activations per rank [%s] (simulated [%s]), in (chunk, micro-batch) units\n",
              measured.c_str(), simulated.c_str());
  std::fflush(stdout);
}

}  // namespace tetra::launch
