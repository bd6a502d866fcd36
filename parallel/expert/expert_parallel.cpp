#include "parallel/expert/expert_parallel.h"

#include "runtime/error.h"
#include "runtime/ops.h"

namespace tetra {

ExpertParallel::ExpertParallel(Communicator& comm, CommScheduler& scheduler, int64_t n_experts)
    : comm_(comm), scheduler_(scheduler), experts_(n_experts) {
  TETRA_CHECK(n_experts > 0 && n_experts % comm.size() == 0, "ExpertParallel: ", n_experts,
              " experts do not split over the ", comm.size(), " ranks of ", comm.name());
}

CommScheduler::Ticket ExpertParallel::issue_counts(Tensor& recv, const Tensor& counts, const std::string& what) {
  TETRA_CHECK(counts.dtype() == DType::I32 && counts.numel() == experts_ && recv.dtype() == DType::I32 &&
                  recv.numel() == experts_,
              "ExpertParallel::issue_counts: counts ", counts.describe(), " and recv ", recv.describe(),
              " must be int32 [", experts_, "]");
  // Chunk r of counts (experts of rank r) goes to rank r; chunk s of recv comes from rank s.
  return scheduler_.issue(
      kRecordPrefix + what, static_cast<int64_t>(counts.nbytes()),
      [&recv, &counts, this] { return comm_.all_to_all(recv, counts); }, MeshAxis::EP);
}

ExpertParallel::ExchangePlan ExpertParallel::plan(const Tensor& counts, const Tensor& recv, Device device) {
  const int ep = size();
  const int64_t El = local_experts();
  if (!readback_) readback_ = std::make_unique<CountsReadback>(device, 2 * experts_);
  readback_->copy_from({&counts, &recv});
  const int32_t* pm = readback_->wait();        // [expert]: this rank's rows per expert
  const int32_t* pt = pm + experts_;            // [source, local expert]
  ExchangePlan p;
  p.send_rows.assign(static_cast<size_t>(ep), 0);
  p.recv_rows.assign(static_cast<size_t>(ep), 0);
  p.expert_rows.assign(static_cast<size_t>(El), 0);
  for (int r = 0; r < ep; ++r)
    for (int64_t e = 0; e < El; ++e) {
      p.send_rows[static_cast<size_t>(r)] += pm[r * El + e];
      p.recv_rows[static_cast<size_t>(r)] += pt[r * El + e];
      p.expert_rows[static_cast<size_t>(e)] += pt[r * El + e];
    }
  for (int64_t n : p.recv_rows) p.recv_total += n;
  // Where each (source, expert) block starts, source-major and expert-major.
  std::vector<int64_t> src_start(static_cast<size_t>(ep * El)), exp_start(static_cast<size_t>(ep * El));
  int64_t at = 0;
  for (int s = 0; s < ep; ++s)
    for (int64_t e = 0; e < El; ++e) {
      src_start[static_cast<size_t>(s * El + e)] = at;
      at += pt[s * El + e];
    }
  Tensor offsets = Tensor::empty({El + 1}, DType::I32);
  int32_t* po = offsets.data<int32_t>();
  at = 0;
  for (int64_t e = 0; e < El; ++e) {
    po[e] = static_cast<int32_t>(at);
    for (int s = 0; s < ep; ++s) {
      exp_start[static_cast<size_t>(s * El + e)] = at;
      at += pt[s * El + e];
    }
  }
  po[El] = static_cast<int32_t>(at);
  const int64_t R = p.recv_total;
  Tensor to_expert = Tensor::empty({R}, DType::I32), to_source = Tensor::empty({R}, DType::I32);
  int32_t* pe = to_expert.data<int32_t>();
  int32_t* ps = to_source.data<int32_t>();
  for (int s = 0; s < ep; ++s)
    for (int64_t e = 0; e < El; ++e) {
      const int64_t n = pt[s * El + e], src = src_start[static_cast<size_t>(s * El + e)],
                    dst = exp_start[static_cast<size_t>(s * El + e)];
      for (int64_t j = 0; j < n; ++j) {
        pe[dst + j] = static_cast<int32_t>(src + j);
        ps[src + j] = static_cast<int32_t>(dst + j);
      }
    }
  p.to_expert = Tensor::empty({R}, DType::I32, device);
  p.to_source = Tensor::empty({R}, DType::I32, device);
  p.offsets = Tensor::empty({El + 1}, DType::I32, device);
  ops::copy(p.to_expert, to_expert);
  ops::copy(p.to_source, to_source);
  ops::copy(p.offsets, offsets);
  return p;
}

CommScheduler::Ticket ExpertParallel::issue_rows(Tensor& out, const std::vector<int64_t>& recv_rows, const Tensor& in,
                                                 const std::vector<int64_t>& send_rows, const std::string& what) {
  TETRA_CHECK(in.ndim() == 2 && out.ndim() == 2 && in.dim(1) == out.dim(1) && in.dtype() == out.dtype(),
              "ExpertParallel::issue_rows: in ", in.describe(), " and out ", out.describe(), " must be [*, d] alike");
  const int64_t d = in.dim(1);
  std::vector<int64_t> sc(send_rows.size()), rc(recv_rows.size());
  for (size_t r = 0; r < sc.size(); ++r) sc[r] = send_rows[r] * d;
  for (size_t r = 0; r < rc.size(); ++r) rc[r] = recv_rows[r] * d;
  return scheduler_.issue(
      kRecordPrefix + what, static_cast<int64_t>(in.nbytes()),
      [&out, &in, rc, sc, this] { return comm_.all_to_all_v(out, rc, in, sc); }, MeshAxis::EP);
}

}  // namespace tetra
