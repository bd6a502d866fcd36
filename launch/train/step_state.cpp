#include "launch/train/step_state.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "launch/train/lr_schedule.h"
#include "runtime/ops.h"

namespace tetra::launch {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

StepState::StepState(const Config& cfg, Device device, int64_t start_step, int64_t updates, int64_t tokens_per_step,
                     int accumulation_steps, float beta1, float beta2)
    : device_(device) {
  loss_sum_ = Tensor::zeros({1}, DType::F64, device_);
  grad_sq_ = Tensor::zeros({1}, DType::F64, device_);
  const LrSchedule schedule = LrSchedule::of(cfg);
  const int64_t steps = std::max(1, cfg.train.steps);
  Tensor lr = Tensor::empty({steps}, DType::F64, Device::cpu());
  for (int64_t i = 0; i < steps; ++i) lr.data<double>()[i] = schedule.at(i);
  lr_table_ = Tensor::empty({steps}, DType::F64, device_);
  ops::copy(lr_table_, lr);
  Tensor c = Tensor::zeros({kStepControlSlots}, DType::F64, Device::cpu());
  c.data<double>()[kCtlScheduleStep] = static_cast<double>(start_step);
  c.data<double>()[kCtlUpdates] = static_cast<double>(updates);
  control_ = Tensor::empty({kStepControlSlots}, DType::F64, device_);
  ops::copy(control_, c);
  control_cfg_.max_norm = cfg.train.grad_clip;
  control_cfg_.tokens = static_cast<double>(tokens_per_step);
  control_cfg_.beta1 = beta1;
  control_cfg_.beta2 = beta2;
  control_cfg_.stop_on_nonfinite = cfg.train.on_nonfinite == OnNonfinite::Stop;
  for (Slot& s : slots_) {
    s.readback = std::make_unique<HostReadback<double>>(device_, kStepControlSlots);
    s.opt_begin = std::make_unique<Event>(device_);
    s.opt_end = std::make_unique<Event>(device_);
    if (cfg.train.cuda_graphs) s.graph = std::make_unique<CudaGraph>(device_);
  }
  if (cfg.train.cuda_graphs) {
    // Two eager steps first: GEMM autotuning, attention plans and the memory pool settle there.
    graph_from_step_ = start_step + 2;
    for (int m = 0; m < accumulation_steps; ++m) {
      graph_ids_.push_back(Tensor::empty({cfg.train.micro_batch, cfg.train.seq_len}, DType::I32, device_));
      graph_targets_.push_back(Tensor::empty({cfg.train.micro_batch, cfg.train.seq_len}, DType::I32, device_));
    }
  }
}

void StepState::decide() { ops::step_control(control_, loss_sum_, grad_sq_, lr_table_, control_cfg_); }

void StepState::optimizer_begins(int64_t step, const Stream& compute) {
  slots_[slot_of(step)].opt_begin->record_timing(compute);
}

void StepState::optimizer_ends(int64_t step, const Stream& compute) {
  slots_[slot_of(step)].opt_end->record_timing(compute);
}

double StepState::optimizer_seconds(int64_t step) const {
  const Slot& slot = slots_[slot_of(step)];
  return slot.opt_end->elapsed_ms(*slot.opt_begin) / 1e3;
}

void StepState::set_graph_batch(int micro, const data::LoadedBatch& batch) {
  ops::copy(graph_ids_[static_cast<size_t>(micro)], batch.inputs);
  ops::copy(graph_targets_[static_cast<size_t>(micro)], batch.targets);
}

data::LoadedBatch StepState::graph_batch(int micro) const {
  return data::LoadedBatch{graph_ids_[static_cast<size_t>(micro)], graph_targets_[static_cast<size_t>(micro)]};
}

bool StepState::captured(int64_t step) const { return slots_[slot_of(step)].graph->captured(); }

size_t StepState::capture(int64_t step, const std::function<void()>& enqueue) {
  CudaGraph& graph = *slots_[slot_of(step)].graph;
  graph.begin_capture();
  try {
    enqueue();
  } catch (...) {
    graph.abort_capture();
    throw;
  }
  graph.end_capture();
  return graph.nodes();
}

void StepState::replay(int64_t step) { slots_[slot_of(step)].graph->replay(); }

void StepState::read_back(int64_t step) { slots_[slot_of(step)].readback->copy_from(control_); }

const double* StepState::wait_read_back(int64_t step, double timeout_s, const std::function<void()>& on_timeout) {
  HostReadback<double>& rb = *slots_[slot_of(step)].readback;
  const double t0 = now_s();
  while (!rb.ready()) {
    if (timeout_s > 0 && now_s() - t0 > timeout_s) on_timeout();
    std::this_thread::yield();
  }
  return rb.wait();
}

}  // namespace tetra::launch
