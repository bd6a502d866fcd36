#include "runtime/mpi_communicator.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "runtime/mpi_check.h"
#include "runtime/ops.h"

namespace tetra {

void mpi_initialize(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  TETRA_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  // Errors come back as return codes (checked above) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

void mpi_finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

void mpi_abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U16: return MPI_UINT16_T;
    case DType::BF16: return MPI_UINT16_T;  // reductions on bf16 use a user op (below)
    case DType::U32: return MPI_UINT32_T;
    case DType::U8: return MPI_UINT8_T;
    case DType::F8E4M3:
    case DType::F8E5M2: return MPI_UINT8_T;  // moved, never reduced
  }
  return MPI_BYTE;
}

// bf16 sum/max/min as an MPI user op: each element widened to fp32, combined, rounded back.
template <int Kind>
void bf16_combine(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = bf16_to_float(a[i]), y = bf16_to_float(b[i]);
    float r = Kind == 0 ? x + y : (Kind == 1 ? (x > y ? x : y) : (x < y ? x : y));
    b[i] = float_to_bf16(r);
  }
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::BF16) {
    static MPI_Op ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
    int k = op == ReduceOp::Max ? 1 : (op == ReduceOp::Min ? 2 : 0);
    if (ops[k] == MPI_OP_NULL) {
      MPI_User_function* fns[3] = {&bf16_combine<0>, &bf16_combine<1>, &bf16_combine<2>};
      TETRA_MPI_CHECK(MPI_Op_create(fns[k], 1, &ops[k]));
    }
    return ops[k];
  }
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

void check_host(const char* what, const Tensor& t) {
  if (!t.defined()) TETRA_FAIL(Internal, "MPI ", what, ": undefined tensor");
  if (!t.device().is_cpu())
    TETRA_FAIL(Internal, "MPI ", what, ": tensor on ", t.device().str(), " (the MPI communicator moves host tensors)");
}

int count_of(int64_t n) {
  TETRA_CHECK(n <= INT32_MAX, "MPI message of ", n, " elements exceeds the 2^31 count limit; split it");
  return static_cast<int>(n);
}

class MpiWork : public Work {
 public:
  MpiWork(std::string what, std::vector<MPI_Request> reqs, double timeout_s, std::function<void()> after)
      : what_(std::move(what)), reqs_(std::move(reqs)), timeout_s_(timeout_s), after_(std::move(after)) {}
  ~MpiWork() override {
    // A Work dropped without wait() still completes before its buffers can be reused.
    if (!done_) {
      try {
        wait();
      } catch (...) {
      }
    }
  }
  void wait() override {
    if (done_) return;
    if (timeout_s_ <= 0) {
      TETRA_MPI_CHECK(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE));
    } else {
      auto start = std::chrono::steady_clock::now();
      int flag = 0;
      for (int spins = 0;; ++spins) {
        TETRA_MPI_CHECK(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
        if (flag) break;
        double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (waited > timeout_s_) {
          done_ = true;
          TETRA_FAIL(Comm, what_, " did not complete within ", timeout_s_,
                     " s (run.comm_timeout_s): a peer rank has stopped answering or died");
        }
        if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    done_ = true;
    if (after_) after_();
  }
  bool is_completed() override {
    if (done_) return true;
    int flag = 0;
    TETRA_MPI_CHECK(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) {
      done_ = true;
      if (after_) after_();
    }
    return done_;
  }

 private:
  std::string what_;
  std::vector<MPI_Request> reqs_;
  double timeout_s_;
  std::function<void()> after_;
  bool done_ = false;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  TETRA_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  TETRA_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

std::unique_ptr<Work> MpiCommunicator::make_work(const char* what, std::vector<MPI_Request> reqs,
                                                 std::function<void()> after) {
  return std::make_unique<MpiWork>(std::string(what) + " on group " + name_ + " (rank " + std::to_string(rank_) +
                                       " of " + std::to_string(size_) + ")",
                                   std::move(reqs), timeout_s_, std::move(after));
}

std::unique_ptr<Work> MpiCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  check_host("all_reduce", t);
  MPI_Request req;
  TETRA_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), count_of(t.numel()), mpi_type(t.dtype()),
                                 mpi_op(op, t.dtype()), comm_, &req));
  std::function<void()> after;
  if (op == ReduceOp::Avg) {
    Tensor tt = t;
    int n = size_;
    after = [tt, n]() mutable { ops::scale(tt, 1.0f / static_cast<float>(n)); };
  }
  return make_work("all_reduce", {req}, std::move(after));
}

std::unique_ptr<Work> MpiCommunicator::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  check_host("reduce_scatter", out);
  check_host("reduce_scatter", in);
  TETRA_CHECK(in.numel() == out.numel() * size_ && in.dtype() == out.dtype(), "reduce_scatter: in ",
              in.describe(), " must hold ", size_, " chunks of out ", out.describe());
  MPI_Request req;
  TETRA_MPI_CHECK(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), count_of(out.numel()),
                                            mpi_type(out.dtype()), mpi_op(op, out.dtype()), comm_, &req));
  std::function<void()> after;
  if (op == ReduceOp::Avg) {
    Tensor tt = out;
    int n = size_;
    after = [tt, n]() mutable { ops::scale(tt, 1.0f / static_cast<float>(n)); };
  }
  return make_work("reduce_scatter", {req}, std::move(after));
}

std::unique_ptr<Work> MpiCommunicator::all_gather(Tensor& out, const Tensor& in) {
  check_host("all_gather", out);
  check_host("all_gather", in);
  TETRA_CHECK(out.numel() == in.numel() * size_ && in.dtype() == out.dtype(), "all_gather: out ",
              out.describe(), " must hold ", size_, " chunks of in ", in.describe());
  MPI_Request req;
  TETRA_MPI_CHECK(MPI_Iallgather(in.data_ptr(), count_of(in.numel()), mpi_type(in.dtype()), out.data_ptr(),
                                 count_of(in.numel()), mpi_type(in.dtype()), comm_, &req));
  return make_work("all_gather", {req});
}

std::unique_ptr<Work> MpiCommunicator::all_to_all(Tensor& out, const Tensor& in) {
  check_host("all_to_all", out);
  check_host("all_to_all", in);
  TETRA_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0 && in.dtype() == out.dtype(),
              "all_to_all: in ", in.describe(), " and out ", out.describe(), " must be equal and split into ", size_,
              " chunks");
  int chunk = count_of(in.numel() / size_);
  MPI_Request req;
  TETRA_MPI_CHECK(MPI_Ialltoall(in.data_ptr(), chunk, mpi_type(in.dtype()), out.data_ptr(), chunk,
                                mpi_type(out.dtype()), comm_, &req));
  return make_work("all_to_all", {req});
}

std::unique_ptr<Work> MpiCommunicator::all_to_all_v(Tensor& out, const std::vector<int64_t>& recv_counts,
                                                    const Tensor& in, const std::vector<int64_t>& send_counts) {
  check_host("all_to_all_v", out);
  check_host("all_to_all_v", in);
  TETRA_CHECK(static_cast<int>(recv_counts.size()) == size_ && static_cast<int>(send_counts.size()) == size_,
              "all_to_all_v: need one count per rank (", size_, ")");
  // MPI wants int counts and displacements; they must outlive the request, so the Work keeps them.
  auto sc = std::make_shared<std::vector<int>>(size_), sd = std::make_shared<std::vector<int>>(size_);
  auto rc = std::make_shared<std::vector<int>>(size_), rd = std::make_shared<std::vector<int>>(size_);
  int64_t so = 0, ro = 0;
  for (int j = 0; j < size_; ++j) {
    (*sc)[j] = count_of(send_counts[j]);
    (*sd)[j] = count_of(so);
    so += send_counts[j];
    (*rc)[j] = count_of(recv_counts[j]);
    (*rd)[j] = count_of(ro);
    ro += recv_counts[j];
  }
  TETRA_CHECK(so <= in.numel() && ro <= out.numel(), "all_to_all_v: counts exceed the buffers (send ", so, " of ",
              in.numel(), ", recv ", ro, " of ", out.numel(), ")");
  MPI_Request req;
  TETRA_MPI_CHECK(MPI_Ialltoallv(in.data_ptr(), sc->data(), sd->data(), mpi_type(in.dtype()), out.data_ptr(),
                                 rc->data(), rd->data(), mpi_type(out.dtype()), comm_, &req));
  return make_work("all_to_all_v", {req}, [sc, sd, rc, rd]() {});
}

std::unique_ptr<Work> MpiCommunicator::broadcast(Tensor& t, int root) {
  check_host("broadcast", t);
  MPI_Request req;
  TETRA_MPI_CHECK(MPI_Ibcast(t.data_ptr(), count_of(t.numel()), mpi_type(t.dtype()), root, comm_, &req));
  return make_work("broadcast", {req});
}

std::unique_ptr<Work> MpiCommunicator::send(const Tensor& t, int peer, int tag) {
  check_host("send", t);
  MPI_Request req;
  TETRA_MPI_CHECK(MPI_Isend(t.data_ptr(), count_of(t.numel()), mpi_type(t.dtype()), peer, tag, comm_, &req));
  return make_work("send", {req});
}

std::unique_ptr<Work> MpiCommunicator::recv(Tensor& t, int peer, int tag) {
  check_host("recv", t);
  MPI_Request req;
  TETRA_MPI_CHECK(MPI_Irecv(t.data_ptr(), count_of(t.numel()), mpi_type(t.dtype()), peer, tag, comm_, &req));
  return make_work("recv", {req});
}

std::unique_ptr<Work> MpiCommunicator::batch_send_recv(const std::vector<P2PTransfer>& ops) {
  // Receives are posted first so that eager sends land in posted buffers; all carry one tag of
  // their own, so they never match a plain send/recv between the same ranks.
  constexpr int kBatchTag = 0x7e7a;
  std::vector<MPI_Request> reqs;
  reqs.reserve(ops.size());
  for (P2PTransfer::Kind kind : {P2PTransfer::Kind::Recv, P2PTransfer::Kind::Send}) {
    for (const P2PTransfer& op : ops) {
      if (op.kind != kind) continue;
      const char* what = kind == P2PTransfer::Kind::Send ? "batch_send_recv (send)" : "batch_send_recv (recv)";
      check_host(what, op.tensor);
      TETRA_CHECK(op.peer >= 0 && op.peer < size_, what, ": peer ", op.peer, " outside the group ", name_, " of ",
                  size_);
      if (op.tensor.numel() == 0) continue;
      MPI_Request req;
      if (kind == P2PTransfer::Kind::Send)
        TETRA_MPI_CHECK(MPI_Isend(op.tensor.data_ptr(), count_of(op.tensor.numel()), mpi_type(op.tensor.dtype()),
                                  op.peer, kBatchTag, comm_, &req));
      else
        TETRA_MPI_CHECK(MPI_Irecv(op.tensor.data_ptr(), count_of(op.tensor.numel()), mpi_type(op.tensor.dtype()),
                                  op.peer, kBatchTag, comm_, &req));
      reqs.push_back(req);
    }
  }
  return make_work("batch_send_recv", std::move(reqs));
}

void MpiCommunicator::barrier() {
  MPI_Request req;
  TETRA_MPI_CHECK(MPI_Ibarrier(comm_, &req));
  make_work("barrier", {req})->wait();
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm sub;
  TETRA_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  auto c = std::make_unique<MpiCommunicator>(sub, true);
  c->set_timeout(timeout_s_);
  return c;
}

}  // namespace tetra
