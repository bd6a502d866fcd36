#include "models/layer.h"

#include "runtime/ops.h"

namespace tetra {

StreamGradient MicroBatchContext::stream_gradient(const Shape& shape, bool amax, bool row_amax) const {
  StreamGradient g;
  g.grad = residual(shape);
  g.rounded = residual_dtype_ == dtype_ ? g.grad : activation(shape);
  if (amax) g.amax = Tensor::empty({1}, DType::U32, device_);
  if (row_amax) g.row_amax = Tensor::empty({rows_of(g.grad)}, DType::U32, device_);
  return g;
}

Tensor MicroBatchContext::in_activation_dtype(const Tensor& grad, const Tensor& rounded) const {
  if (grad.dtype() == dtype_) return grad;
  if (rounded.defined()) {
    TETRA_CHECK(rounded.dtype() == dtype_ && rounded.shape() == grad.shape(), "stream gradient ", grad.describe(),
                " offered with a rounded copy ", rounded.describe());
    return rounded;
  }
  Tensor out = activation(grad.shape());
  ops::copy(out, grad);
  return out;
}

}  // namespace tetra
