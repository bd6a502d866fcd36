#include "models/moe_balance.h"

#include <algorithm>

#include "runtime/ops.h"

namespace tetra {

MoeBalance::MoeBalance(std::vector<MoeMlp*> layers, Device device, float rate, int slots)
    : layers_(std::move(layers)), rate_(rate) {
  if (layers_.empty()) return;
  experts_ = layers_.front()->shape().experts;
  const int64_t L = static_cast<int64_t>(layers_.size());
  loads_ = Tensor::zeros({L, experts_}, DType::I32, device);
  for (int64_t l = 0; l < L; ++l) {
    TETRA_CHECK(layers_[static_cast<size_t>(l)]->shape().experts == experts_, "MoeBalance: MoE layers of ",
                experts_, " and ", layers_[static_cast<size_t>(l)]->shape().experts, " experts");
    layers_[static_cast<size_t>(l)]->load() = loads_.slice_flat(l * experts_, {experts_});
  }
  for (int s = 0; s < slots; ++s) {
    kept_.push_back(Tensor::zeros({L, experts_}, DType::I32, device));
    readback_.push_back(std::make_unique<CountsReadback>(device, L * experts_));
  }
}

void MoeBalance::finish_step(Communicator* dp, const Tensor* control, int slot) {
  if (layers_.empty()) return;
  if (dp && dp->size() > 1) dp->all_reduce(loads_, ReduceOp::Sum)->wait();
  if (rate_ > 0)
    for (MoeMlp* m : layers_)
      if (m->bias().value.defined()) ops::moe_bias_update(m->bias().value, m->load(), rate_, control);
  ops::copy(kept_[static_cast<size_t>(slot)], loads_);
  ops::zero(loads_);
}

void MoeBalance::read_back(int slot) {
  if (layers_.empty()) return;
  readback_[static_cast<size_t>(slot)]->copy_from(kept_[static_cast<size_t>(slot)]);
}

const int32_t* MoeBalance::loads(int slot) { return readback_[static_cast<size_t>(slot)]->wait(); }

std::vector<double> MoeBalance::max_over_mean(int slot) {
  std::vector<double> out;
  if (layers_.empty()) return out;
  const int32_t* l = loads(slot);
  for (int64_t i = 0; i < layers(); ++i) {
    const int32_t* row = l + i * experts_;
    double sum = 0, max = 0;
    for (int64_t e = 0; e < experts_; ++e) {
      sum += row[e];
      max = std::max<double>(max, row[e]);
    }
    out.push_back(sum > 0 ? max / (sum / static_cast<double>(experts_)) : 0.0);
  }
  return out;
}

}  // namespace tetra
