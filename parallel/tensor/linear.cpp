#include "parallel/tensor/linear.h"

#include <string>

#include "parallel/tensor/all_gather.h"
#include "parallel/tensor/reduce_scatter.h"

namespace tetra::tp {

namespace {

void check_2d(const char* op, const char* what, const Tensor& t) {
  if (!t.defined() || t.ndim() != 2)
    TETRA_FAIL(Internal, "tp ", op, ": ", what, " must be a 2-D [rows, features] tensor, got ",
               t.defined() ? t.describe() : std::string("an undefined tensor"));
}

void check_rows(const char* op, const char* what, const Tensor& t, int64_t rows) {
  check_2d(op, what, t);
  if (t.dim(0) != rows)
    TETRA_FAIL(Internal, "tp ", op, ": ", what, " must have ", rows, " rows, got ", t.describe());
}

// The gather buffer: the caller's, checked, or a workspace like `shard` with tp times its rows.
Tensor gather_buffer(const TpGroup& g, const char* op, const char* what, Tensor* given, const Tensor& shard) {
  const Shape want = {shard.dim(0) * g.size(), shard.dim(1)};
  if (!given) return Tensor::empty(want, shard.dtype(), shard.device());
  if (given->shape() != want || given->dtype() != shard.dtype())
    TETRA_FAIL(Internal, "tp ", op, ": ", what, " must be ", dtype_name(shard.dtype()), shape_str(want), ", got ",
               given->describe());
  return *given;
}

}  // namespace

void gemm_forward(const LinearGemms* gemms, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                  ops::Activation act, Tensor* pre_act, const Tensor* residual) {
  if (!gemms || !gemms->forward) return ops::linear_forward(y, x, w, b, act, pre_act, residual);
  if (!residual) return gemms->forward(y, x, b, act, pre_act);
  Tensor out = Tensor::empty(y.shape(), y.dtype(), y.device());  // y may be the residual
  gemms->forward(out, x, b, act, pre_act);
  ops::add(y, out, *residual);
}

void gemm_backward_input(const LinearGemms* gemms, Tensor& dx, const Tensor& dy, const Tensor& w,
                         const Tensor* gelu_pre) {
  if (gemms && gemms->backward_input) return gemms->backward_input(dx, dy, gelu_pre);
  if (gelu_pre)
    ops::linear_backward_input_gelu(dx, dy, w, *gelu_pre);
  else
    ops::linear_backward_input(dx, dy, w);
}

void all_gather_linear_forward(TpGroup& g, Tensor& y, const Tensor& x_shard, const Tensor& w, const Tensor& b,
                               ops::Activation act, Tensor* pre_act, Tensor* x_gathered, const LinearGemms* gemms) {
  const char* op = "all_gather_linear_forward";
  check_2d(op, "x_shard", x_shard);
  const int64_t m = x_shard.dim(0);
  check_rows(op, "y", y, m * g.size());
  if (pre_act && pre_act->defined()) check_rows(op, "pre_act", *pre_act, m * g.size());
  if (g.size() == 1) {
    if (x_gathered) ops::copy(*x_gathered, x_shard);
    gemm_forward(gemms, y, x_shard, w, b, act, pre_act);
    return;
  }
  const bool cast_first = gemms && gemms->gather_shard.defined();
  if (cast_first) check_rows(op, "gemms' gather_shard", gemms->gather_shard, m);
  Tensor gathered = cast_first ? gather_buffer(g, op, "", nullptr, gemms->gather_shard)
                               : gather_buffer(g, op, "x_gathered", x_gathered, x_shard);
  all_gather_then(
      g, gathered, cast_first ? gemms->gather_shard : x_shard,
      [&](int q, const Tensor& rows) {
        Tensor yq = TpGroup::chunk(y, q, m);
        Tensor pq = pre_act && pre_act->defined() ? TpGroup::chunk(*pre_act, q, m) : Tensor();
        gemm_forward(gemms, yq, rows, w, b, act, pq.defined() ? &pq : nullptr);
      },
      op);
  if (cast_first && gemms->gathered) gemms->gathered(gathered);
}

void linear_forward_reduce_scatter(TpGroup& g, Tensor& y_shard, const Tensor& x, const Tensor& w, const Tensor& b,
                                   const Tensor* residual_shard, const LinearGemms* gemms) {
  const char* op = "linear_forward_reduce_scatter";
  check_2d(op, "x", x);
  if (g.size() == 1) {
    gemm_forward(gemms, y_shard, x, w, b, ops::Activation::None, nullptr, residual_shard);
    return;
  }
  const int64_t m = g.shard_rows(x.dim(0), op);
  check_rows(op, "y_shard", y_shard, m);
  produce_then_reduce_scatter(
      g, y_shard, [&](int c, Tensor& dst) { gemm_forward(gemms, dst, TpGroup::chunk(x, c, m), w, Tensor()); }, b,
      residual_shard, {}, op);
}

void linear_backward_input_reduce_scatter(TpGroup& g, Tensor& dx_shard, const Tensor& dy, const Tensor& w,
                                          const std::function<void()>& overlap, const LinearGemms* gemms) {
  const char* op = "linear_backward_input_reduce_scatter";
  check_2d(op, "dy", dy);
  if (g.size() == 1) {
    gemm_backward_input(gemms, dx_shard, dy, w);
    if (overlap) overlap();
    return;
  }
  const int64_t m = g.shard_rows(dy.dim(0), op);
  check_rows(op, "dx_shard", dx_shard, m);
  produce_then_reduce_scatter(
      g, dx_shard, [&](int c, Tensor& dst) { gemm_backward_input(gemms, dst, TpGroup::chunk(dy, c, m), w); },
      Tensor(), nullptr, overlap, op);
}

void all_gather_linear_backward_input(TpGroup& g, Tensor& dx, const Tensor& dy_shard, const Tensor& w,
                                      const Tensor* gelu_pre, Tensor* dy_gathered, const LinearGemms* gemms) {
  const char* op = "all_gather_linear_backward_input";
  check_2d(op, "dy_shard", dy_shard);
  const int64_t m = dy_shard.dim(0);
  check_rows(op, "dx", dx, m * g.size());
  const bool gelu = gelu_pre && gelu_pre->defined();
  if (gelu) check_rows(op, "gelu_pre", *gelu_pre, m * g.size());
  auto input_gradient = [&](Tensor& out, const Tensor& d, const Tensor* pre) { gemm_backward_input(gemms, out, d, w, pre); };
  if (g.size() == 1) {
    if (dy_gathered) ops::copy(*dy_gathered, dy_shard);
    input_gradient(dx, dy_shard, gelu ? gelu_pre : nullptr);
    return;
  }
  Tensor gathered = gather_buffer(g, op, "dy_gathered", dy_gathered, dy_shard);
  all_gather_then(
      g, gathered, dy_shard,
      [&](int q, const Tensor& rows) {
        Tensor dxq = TpGroup::chunk(dx, q, m);
        Tensor pq = gelu ? TpGroup::chunk(*gelu_pre, q, m) : Tensor();
        input_gradient(dxq, rows, gelu ? &pq : nullptr);
      },
      op);
}

void linear_forward_all_reduce(TpGroup& g, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                               const Tensor* residual, const LinearGemms* gemms) {
  const char* op = "linear_forward_all_reduce";
  check_2d(op, "x", x);
  if (g.size() == 1) {
    gemm_forward(gemms, y, x, w, b, ops::Activation::None, nullptr, residual);
    return;
  }
  const int64_t m = g.shard_rows(x.dim(0), op);
  check_rows(op, "y", y, x.dim(0));
  produce_then_all_reduce(
      g, y, [&](int c, Tensor& dst) { gemm_forward(gemms, dst, TpGroup::chunk(x, c, m), w, Tensor()); }, b,
      residual, {}, op);
}

void linear_backward_input_all_reduce(TpGroup& g, Tensor& dx, const Tensor& dy, const Tensor& w,
                                      const std::function<void()>& overlap, const LinearGemms* gemms) {
  const char* op = "linear_backward_input_all_reduce";
  check_2d(op, "dy", dy);
  if (g.size() == 1) {
    gemm_backward_input(gemms, dx, dy, w);
    if (overlap) overlap();
    return;
  }
  const int64_t m = g.shard_rows(dy.dim(0), op);
  check_rows(op, "dx", dx, dy.dim(0));
  produce_then_all_reduce(
      g, dx, [&](int c, Tensor& dst) { gemm_backward_input(gemms, dst, TpGroup::chunk(dy, c, m), w); }, Tensor(),
      nullptr, overlap, op);
}

}  // namespace tetra::tp
