#include "launch/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <thread>

#include "launch/job/signals.h"
#include "launch/report/goodput.h"
#include "runtime/memory.h"
#include "runtime/ops.h"
#include "runtime/nvtx.h"
#include "runtime/trace.h"

namespace tetra::launch {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

Trainer::Trainer(const Config& cfg, const LaunchEnvironment& env, MpiCommunicator& world)
    : cfg_(cfg), env_(env), world_(world), parts_(build_training(cfg_, env_, world_)) {
  TrainingParts& p = *parts_;
  start_step_ = p.resumed.step;
  tokens_seen_ = p.resumed.tokens_seen;
  skipped_steps_ = p.resumed.skipped_steps;
  // TETRA_FAULT nan_grad: the step's first weight gradient on this rank turns NaN.
  p.stages->set_after_weight([this](const Layer& layer) {
    if (poison_grad_) poison_gradient(layer);
  });
  // The device-side step state: the step control starts at the resumed position.
  state_ = std::make_unique<StepState>(cfg_, p.device, start_step_, p.optimizer->steps_taken(),
                                       p.loader->tokens_per_step(), p.loader->accumulation_steps(),
                                       p.optimizer_options.adamw.beta1, p.optimizer_options.adamw.beta2);
  std::vector<int> moe_blocks;
  for (const MoeMlp* m : p.model->moe_layers()) moe_blocks.push_back(m->block());
  accounting_ = std::make_unique<StepAccounting>(cfg_, env_.rank, env_.world_size, world_, p.device, p.ledger.get(),
                                                 p.metrics.get(), p.tensorboard.get(), p.run_info, *p.comm,
                                                 p.p2p.get(), p.loader->tokens_per_step(), start_step_,
                                                 std::move(moe_blocks));
  if (cfg_.log.sample_every > 0) samples_ = std::make_unique<TextSamples>(cfg_, p.device, p.act_dtype);
  device_synchronize(p.device);
  // The measured peak covers the steps; start-up (which may hold the full weights once) apart.
  p.startup_peak_bytes = static_cast<double>(peak_allocated_bytes(p.device));
  reset_peak_allocated(p.device);
}

Trainer::~Trainer() = default;

bool Trainer::graph_step(int64_t step) const {
  const int64_t from = state_->graphs_from();
  if (from < 0 || step < from) return false;
  if (Tracer::instance().enabled()) return false;  // traced steps time each op: eager
  // The host changes the loss or a gradient: eager.
  const FaultPlan& faults = parts_->faults;
  if (faults.poison_loss(step + 1, env_.rank) || faults.poison_grad(step + 1, env_.rank)) return false;
  return true;
}

// TETRA_FAULT nan_grad: one element of the first parameter of layer `l` (the first layer in
// backward that has one) becomes NaN before its gradient is reduced, so every rank sees it.
void Trainer::poison_gradient(const Layer& l) {
  for (Param* p : parts_->model->params()) {
    if (p->layer_index != l.index() || !p->grad.defined() || p->grad.numel() == 0) continue;
    Tensor one = p->grad.slice_flat(0, {1});
    ops::fill(one, std::nanf(""));
    poison_grad_ = false;
    std::fprintf(stderr, "tetra: TETRA_FAULT: rank %d makes a gradient element of %s NaN\n", env_.rank,
                 p->name.c_str());
    return;
  }
}

// TETRA_FAULT data_stall: this rank waits for its data as behind slow storage.
void Trainer::stall_for_drill(int64_t step) const {
  const double s = parts_->faults.data_stall(step + 1, env_.rank);
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

void Trainer::enqueue_step(int64_t step, bool graph_inputs, double* data_wait_s) {
  nvtx::Range step_range(nvtx::enabled() ? "step " + std::to_string(step + 1) : std::string());
  TrainingParts& p = *parts_;
  const int slot = StepState::slot_of(step);
  p.faults.inside_step(step + 1, env_.rank);
  p.comm->begin_step(graph_inputs, slot);
  if (p.p2p) p.p2p->begin_step(graph_inputs, slot);
  p.optimizer->begin_step();
  ops::zero(state_->loss_sum());
  if (!graph_inputs) {
    const double t0 = now_s();
    stall_for_drill(step);
    *data_wait_s += now_s() - t0;
  }
  poison_grad_ = !graph_inputs && p.faults.poison_grad(step + 1, env_.rank);
  run_schedule(step, graph_inputs, data_wait_s);
  p.optimizer->finish_gradients();

  // The optimizer phase (loss and norm reductions, the step control, the update), timed on the
  // compute stream: the host reaches this point long before backward has finished.
  const Stream compute = current_stream(p.device);
  nvtx::Range optimizer_range("optimizer");
  state_->optimizer_begins(step, compute);
  if (!graph_inputs && p.faults.poison_loss(step + 1, env_.rank)) {
    Tensor nan = Tensor::empty({1}, DType::F64, Device::cpu());
    nan.data<double>()[0] = std::nan("");
    ops::copy(state_->loss_sum(), nan);
  }
  // Loss and gradient norm over the global batch and every parameter, whatever the split.
  reduce_loss_and_norm();
  // Every rank holds the same loss and norm, so every rank decides alike (clip, skip, stop).
  state_->decide();
  p.optimizer->step(state_->control());
  // The MoE routers' biases follow the step's loads over the global batch (every dp rank's tokens).
  p.balance->finish_step(&p.groups.balance_comm(*p.mesh), &state_->control(), slot);
  state_->optimizer_ends(step, compute);
}

Trainer::Launched Trainer::launch_step(int64_t step) {
  Launched l;
  l.step = step;
  if (graph_step(step)) {
    // The graph reads its micro-batches from fixed buffers: copy the loader's there first (on
    // the compute stream, so after the previous step's graph has read them).
    for (int micro = 0; micro < parts_->loader->accumulation_steps(); ++micro) {
      double t0 = now_s();
      if (micro == 0) stall_for_drill(step);
      data::LoadedBatch batch = parts_->loader->batch(step, micro);
      l.data_wait_s += now_s() - t0;
      state_->set_graph_batch(micro, batch);
    }
    if (!state_->captured(step)) {
      const size_t nodes = state_->capture(step, [&] { enqueue_step(step, /*graph_inputs=*/true, &l.data_wait_s); });
      if (is_rank0()) {
        std::printf("tetra: step %lld captured as a CUDA graph of %zu nodes; later steps replay it\n",
                    static_cast<long long>(step + 1), nodes);
        std::fflush(stdout);
      }
    } else {
      parts_->comm->begin_replay(StepState::slot_of(step));
      if (parts_->p2p) parts_->p2p->begin_replay(StepState::slot_of(step));
    }
    state_->replay(step);
  } else {
    enqueue_step(step, /*graph_inputs=*/false, &l.data_wait_s);
  }
  state_->read_back(step);
  parts_->balance->read_back(StepState::slot_of(step));  // outside the graph, as the step's own read-back
  return l;
}

const double* Trainer::wait_readback(int64_t step) {
  const double timeout = cfg_.run.comm_timeout_s;
  return state_->wait_read_back(step, timeout, [&] {
    // Name what the device waits for: the first of the step's collectives that has not completed.
    const Communicator& dp = parts_->mesh->device_comm(MeshAxis::DP);
    const std::string stuck = parts_->comm->first_unfinished(StepState::slot_of(step));
    const std::string group =
        " on group " + dp.name() + " (rank " + std::to_string(dp.rank()) + " of " + std::to_string(dp.size()) + ")";
    TETRA_FAIL(Comm, "step ", step + 1, " did not finish on ", parts_->device.str(), " within run.comm_timeout_s = ",
               timeout, " s: ", stuck.empty() ? "its collectives" + group : stuck + group + " has not completed",
               ", waiting for a rank that stopped or failed (this is rank ", env_.rank, " of ", env_.world_size,
               " on ", env_.host, ")");
  });
}

StepResult Trainer::finish_step(const Launched& l) {
  TrainingParts& p = *parts_;
  const int slot = StepState::slot_of(l.step);
  StepResult r;
  r.data_wait_s = l.data_wait_s;
  const double* c = wait_readback(l.step);
  r.loss = c[kCtlLoss];
  r.grad_norm = c[kCtlGradNorm];
  r.lr = c[kCtlLr];
  r.skipped = c[kCtlSkipped] != 0.0;
  if (r.skipped) ++skipped_steps_;
  count_skip(l.step, r.skipped);
  r.stop_nonfinite = c[kCtlNonFinite] != 0.0 && cfg_.train.on_nonfinite == OnNonfinite::Stop;
  p.optimizer->set_steps_taken(static_cast<int64_t>(c[kCtlUpdates]));
  r.optimizer_s = state_->optimizer_seconds(l.step);
  p.comm->end_step(slot);
  r.exposed_comm_s = p.comm->exposed_ms() / 1e3;
  if (p.p2p) {
    p.p2p->end_step(slot);
    r.bubble_s = p.p2p->exposed_ms() / 1e3;
  }
  for (MeshAxis a : kMeshAxes) {
    // Pipeline transfers are waited for through p2p and counted as the bubble, not here; the
    // expert-parallel exchanges only with expert parallelism. The expert-data group's gradient
    // reductions and ZeRO gathers are issued by its optimizer on the DP stream and count under dp.
    if (a == MeshAxis::PP || a == MeshAxis::ExpertDP) continue;
    if (p.mesh->axis_size(a) > 1 && (a != MeshAxis::EP || p.mesh->shape().ep > 1))
      r.exposed_comm_axis_s[axis_name(a)] = p.comm->exposed_ms(a) / 1e3;
  }
  r.moe_max_over_mean = p.balance->max_over_mean(slot);
  return r;
}

bool Trainer::eval_due(int64_t step) const {
  return cfg_.train.eval_every > 0 && parts_->loader->has_validation() &&
         ((step + 1) % cfg_.train.eval_every == 0 || step + 1 == cfg_.train.steps);
}

bool Trainer::checkpoint_due(int64_t step) const {
  const int64_t done = step + 1;
  const int every = cfg_.checkpoint.every;
  return every > 0 && (done % every == 0 || done == cfg_.train.steps);
}

// Step + 1 may start before step is finished unless something must happen in between on the host
// with the state after step: an evaluation, a checkpoint, the last step, traced steps, a planned
// fault.
bool Trainer::may_run_ahead(int64_t step) const {
  // train.run_ahead auto: on a GPU only (CPU ops run as they are issued: nothing to overlap).
  if (cfg_.train.run_ahead == Switch::Off || (cfg_.train.run_ahead == Switch::Auto && parts_->device.is_cpu()))
    return false;
  if (step + 1 >= cfg_.train.steps || eval_due(step) || checkpoint_due(step) || sample_due(step)) return false;
  if (cfg_.log.profile_steps > 0 && step + 1 >= cfg_.train.steps - cfg_.log.profile_steps) return false;
  return !parts_->faults.blocks_run_ahead(step + 1);  // a drill acts after this step, or inside the next
}

int Trainer::run() {
  parts_->loader->start(start_step_);  // a resumed run reads ahead from its step (no-op when already there)
  // Whatever ends the attempt with an error, rank 0's ledger says so first (if it still can).
  GoodputLedger* ledger = parts_->ledger.get();
  auto record = [&](int code) {
    try {
      if (ledger && !ledger->ended()) ledger->attempt_end("error", code);
    } catch (const std::exception& e) {
      std::cerr << "tetra: warning: could not record the end of the attempt: " << e.what() << "\n";
    }
    if (ledger) write_page(nullptr);  // the failed attempt's page too (write_page never throws)
  };
  try {
    return run_steps();
  } catch (const Error& e) {
    record(exit_code_for(e.kind()));
    throw;
  } catch (const std::exception&) {
    record(exit_code::kError);
    throw;
  }
}

TrainingProgress Trainer::progress(int64_t steps_done) const {
  TrainingProgress p;
  p.step = steps_done;
  p.tokens_seen = tokens_seen_;
  p.skipped_steps = skipped_steps_;
  return p;
}

int Trainer::agree_after_step(bool& skip_limit) {
  // One small all-reduce per step: the highest-priority stop signal any rank holds, whether any
  // rank's background checkpoint write is still going, whether any rank passed the skip limit
  // (every rank counts the same skips, from the reduced loss and norm; agreeing costs nothing).
  Checkpointer& ckpt = *parts_->checkpointer;
  std::vector<double> flags{static_cast<double>(stop_signal_priority(stop_signal())), ckpt.writing() ? 1.0 : 0.0,
                            over_skip_limit_.empty() ? 0.0 : 1.0};
  if (world_.size() > 1) world_.all_reduce_host(flags, ReduceOp::Max);
  if (flags[1] == 0.0 && ckpt.uncommitted()) ckpt.commit();
  skip_limit = flags[2] != 0.0;
  return signal_of_priority(static_cast<int>(flags[0]));
}

int Trainer::run_steps() {
  int stop = 0;            // the stop signal the ranks agreed on, 0 while none
  bool nonfinite = false;  // a non-finite step under train.on_nonfinite: stop
  bool skip_limit = false;  // train.max_skipped_steps passed (on every rank alike)
  int64_t step = start_step_;
  std::optional<Launched> ahead;  // step + 1, launched before step was finished
  GoodputLedger* ledger = parts_->ledger.get();
  for (; step < cfg_.train.steps; ++step) {
    Launched cur;
    if (ahead) {
      cur = *ahead;
      ahead.reset();
    } else {
      accounting_->start(step);
      cur = launch_step(step);
    }
    if (stop == 0 && !skip_limit && may_run_ahead(step)) ahead = launch_step(step + 1);
    StepResult r = finish_step(cur);
    const double seconds = accounting_->finish(step, r);
    tokens_seen_ += parts_->loader->tokens_per_step();
    losses_.push_back(r.loss);
    std::optional<double> val_loss;
    if (eval_due(step)) {
      double e0 = ledger ? ledger->now() : 0;
      val_loss = evaluate();
      if (ledger) ledger->eval(e0, ledger->now(), step + 1);
    }
    if (is_rank0()) accounting_->log(step, r, seconds, val_loss, tokens_seen_);
    if (is_rank0() && sample_due(step)) samples_->print(*parts_->model, step, std::cout);
    if (r.stop_nonfinite) {
      nonfinite = true;
      // The step launched ahead changed nothing (the device control halts every update after a
      // non-finite step under on_nonfinite: stop); let it end before the state is saved.
      if (ahead) (void)wait_readback(ahead->step);
      break;
    }
    parts_->faults.after_step(step + 1, env_.rank);
    bool over_limit = false;
    const int agreed = agree_after_step(over_limit);
    if (stop == 0) stop = agreed;
    skip_limit = skip_limit || over_limit;
    const bool stopping = stop != 0 || skip_limit;
    // A stop takes effect after the step already launched ahead, if any.
    if (ahead && stopping) continue;
    if (stopping || checkpoint_due(step)) parts_->checkpointer->save(progress(step + 1));
    if (stopping) {
      ++step;
      break;
    }
  }
  return end_run(step, stop, nonfinite, skip_limit);
}

}  // namespace tetra::launch
