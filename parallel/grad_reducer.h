// GradReducer: data-parallel gradient reduction in buckets. The flat gradient buffer of a
// ParamSet is cut into buckets of about `bucket_bytes`, in reverse layer order (the order backward
// finishes them). When the last micro-batch's backward of every layer in a bucket is done, its
// all-reduce (sum) is issued at once, so communication overlaps the rest of backward; finish()
// makes compute wait for all of them (through the CommScheduler, which measures the wait). Gradients are sums, not means: the loss is already scaled by 1/(global tokens).
// With tensor parallelism (`tp` active) a bucket's units first all-reduce their sequence-parallel
// gradients over the tp group (parallel/tensor/grad_sync.h), also at dp = 1.
#pragma once
#include <memory>
#include <vector>

#include "parallel/comm_scheduler.h"
#include "parallel/param_set.h"
#include "parallel/tensor/grad_sync.h"
#include "runtime/communicator.h"

namespace tetra {

class GradReducer {
 public:
  GradReducer(ParamSet& params, Communicator& dp, CommScheduler& scheduler, double bucket_bytes,
              TpGradSync* tp = nullptr);

  // Call once per step before the last micro-batch's backward.
  void begin_step();
  // Layer `layer_index` has produced its final gradients for this step.
  void layer_done(int layer_index);
  // Issues whatever is still pending and waits until every bucket is reduced.
  void finish();

  struct Bucket {
    int64_t begin = 0, end = 0;  // element range of the flat gradient buffer
    int min_layer = 0;           // the bucket is ready once layers ≥ min_layer... are all done
    std::vector<int> layers;     // layers with parameters in the bucket
    std::vector<Param*> params;  // the parameters whose gradients lie in [begin, end)
    int pending = 0;             // layers not yet done this step
    CommScheduler::Ticket ticket;
    bool issued = false;
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void issue(Bucket& b);
  bool reduces() const { return dp_.size() > 1 || (tp_ && tp_->needed()); }
  ParamSet& params_;
  Communicator& dp_;
  CommScheduler& scheduler_;
  TpGradSync* tp_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> buckets_of_layer_;
};

}  // namespace tetra
