#include "runtime/communicator.h"

#include <cstring>

namespace tetra {

void Communicator::all_reduce_host(std::vector<double>& values, ReduceOp op) {
  if (values.empty()) return;
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::F64, Device::cpu());
  std::memcpy(t.data_ptr(), values.data(), t.nbytes());
  all_reduce(t, op)->wait();
  std::memcpy(values.data(), t.data_ptr(), t.nbytes());
}

double Communicator::all_reduce_scalar(double v, ReduceOp op) {
  std::vector<double> values{v};
  all_reduce_host(values, op);
  return values[0];
}

}  // namespace tetra
