// For tests of the optimizers without MPI: a group that knows its rank and size and carries no data,
// and a list of parameters the test owns.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "parallel/param.h"
#include "runtime/communicator.h"

namespace tetra::test {

// A group of `size` ranks seen from rank `rank` that carries no data: what is built over it may read
// its rank and size only (a collective here is a test failure).
class ShapeOnlyGroup : public Communicator {
 public:
  ShapeOnlyGroup(int rank, int size) : rank_(rank), size_(size) { set_name("dp(test)"); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "none"; }
  std::unique_ptr<Work> all_reduce(Tensor&, ReduceOp) override { return none("all_reduce"); }
  std::unique_ptr<Work> reduce_scatter(Tensor&, const Tensor&, ReduceOp) override { return none("reduce_scatter"); }
  std::unique_ptr<Work> all_gather(Tensor&, const Tensor&) override { return none("all_gather"); }
  std::unique_ptr<Work> all_to_all(Tensor&, const Tensor&) override { return none("all_to_all"); }
  std::unique_ptr<Work> all_to_all_v(Tensor&, const std::vector<int64_t>&, const Tensor&,
                                     const std::vector<int64_t>&) override {
    return none("all_to_all_v");
  }
  std::unique_ptr<Work> broadcast(Tensor&, int) override { return none("broadcast"); }
  std::unique_ptr<Work> send(const Tensor&, int, int) override { return none("send"); }
  std::unique_ptr<Work> recv(Tensor&, int, int) override { return none("recv"); }
  std::unique_ptr<Work> batch_send_recv(const std::vector<P2PTransfer>&) override { return none("batch_send_recv"); }
  void barrier() override { none("barrier"); }
  std::unique_ptr<Communicator> split(int, int) override {
    none("split");
    return nullptr;
  }

 private:
  std::unique_ptr<Work> none(const char* op) {
    ADD_FAILURE() << op << " called on a group that carries no data";
    return nullptr;
  }
  int rank_, size_;
};

// Parameters a test declares one by one (name, layer, shape; the rest set on the returned Param).
struct TestParams {
  std::vector<std::unique_ptr<Param>> owned;
  std::vector<Param*> params;
  Param& add(const std::string& name, int layer, Shape shape) {
    auto p = std::make_unique<Param>();
    p->name = name;
    p->layer_index = layer;
    p->full_shape = p->local_shape = shape;
    params.push_back(p.get());
    owned.push_back(std::move(p));
    return *params.back();
  }
};

}  // namespace tetra::test
