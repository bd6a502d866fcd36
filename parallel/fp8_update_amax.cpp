#include "parallel/fp8_update_amax.h"

#include "runtime/error.h"

namespace tetra {

Fp8UpdateAmaxes::Fp8UpdateAmaxes(const std::vector<Param*>& params, Device device, bool updates_whole) {
  if (!updates_whole) return;
  int64_t words = 0;
  for (Param* p : params)
    if (p->fp8_grouped && p->fp8_scaling == ops::Fp8Scaling::Tensorwise && p->fp8_groups() > 0) {
      TETRA_CHECK(p->local_shape.size() == 2 && p->local_shape[0] % p->fp8_group_rows == 0, p->name, ": ",
                  p->local_shape[0], " local rows are not experts' weights of ", p->fp8_group_rows, " rows each");
      params_.push_back(p);
      words += p->fp8_groups();
    }
  if (params_.empty()) return;
  words_ = Tensor::zeros({words}, DType::U32, device);
  int64_t first = 0;
  for (Param* p : params_) {
    p->fp8_update_amax = Param::Fp8UpdateAmax{words_.slice_flat(first, {p->fp8_groups()}), false};
    first += p->fp8_groups();
  }
}

void Fp8UpdateAmaxes::begin() {
  stale();
  if (words_.defined()) ops::zero(words_);
}

void Fp8UpdateAmaxes::append(std::vector<ops::AdamWSegment>& segs, ops::AdamWSegment seg, const Param& p) const {
  const Tensor& bits = p.fp8_update_amax.bits;
  if (!bits.defined()) {
    segs.push_back(std::move(seg));
    return;
  }
  TETRA_CHECK(seg.master.numel() == p.numel(), p.name, ": an update of ", seg.master.numel(), " of its ", p.numel(),
              " elements cannot measure its experts' amaxes");
  const int64_t G = p.fp8_groups(), each = p.numel() / G;
  auto expert = [each](const Tensor& t, int64_t g) { return t.defined() ? t.slice_flat(g * each, {each}) : Tensor(); };
  for (int64_t g = 0; g < G; ++g) {
    ops::AdamWSegment e;
    e.master = expert(seg.master, g);
    e.grad = expert(seg.grad, g);
    e.m = expert(seg.m, g);
    e.v = expert(seg.v, g);
    e.working = expert(seg.working, g);
    e.weight_decay = seg.weight_decay;
    e.amax = bits.slice_flat(g, {1});
    segs.push_back(std::move(e));
  }
}

void Fp8UpdateAmaxes::end() {
  for (Param* p : params_) p->fp8_update_amax.fresh = true;
}

void Fp8UpdateAmaxes::stale() {
  for (Param* p : params_) p->fp8_update_amax.fresh = false;
}

}  // namespace tetra
