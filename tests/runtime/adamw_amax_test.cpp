// AdamW's amax output (runtime/multi_tensor.h AdamWSegment::amax) on the CPU: each segment's word
// holds the bits of the largest |value| the update leaves where the model reads the weights (the
// working copy as stored where there is one, else the master), max-ed with what the word held; a
// step the device control skips leaves the weights and still gives their amax; a NaN shows. The
// comparisons are exact: the amax is a maximum over the stored values, no arithmetic of its own.
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/fp8_format.h"
#include "runtime/multi_tensor.h"
#include "runtime/step_control.h"
#include "tests/runtime/op_test_util.h"

namespace tetra::test {
namespace {

uint32_t word(const Tensor& amax) { return *static_cast<const uint32_t*>(amax.data_ptr()); }

uint32_t amax_bits_of(const Tensor& t) { return row_amax_of(t.view({1, t.numel()}))[0]; }

ops::AdamWSegment segment(Rng& rng, int64_t n, DType working) {
  ops::AdamWSegment s;
  s.master = random_tensor(rng, {n}, 0.05);
  s.grad = random_tensor(rng, {n}, 0.01);
  s.m = random_tensor(rng, {n}, 1e-3);
  s.v = Tensor::from_vector(std::vector<float>(static_cast<size_t>(n), 1e-6f), {n});
  if (working != DType::U8) s.working = Tensor::empty({n}, working);
  s.weight_decay = 0.1f;
  s.amax = Tensor::zeros({1}, DType::U32);
  return s;
}

ops::AdamWHyper hyper() {
  ops::AdamWHyper h;
  h.lr = 1e-2f;
  h.step = 2;
  return h;
}

TEST(AdamWAmax, EachSegmentsWordIsTheAmaxOfTheValuesTheModelReads) {
  Rng rng(5);
  // No working copy (the CPU's fp32 weights: the master is what the model reads), fp32 and bf16 ones.
  std::vector<ops::AdamWSegment> segs = {segment(rng, 300, DType::U8), segment(rng, 257, DType::F32),
                                         segment(rng, 1000, DType::BF16), segment(rng, 64, DType::BF16)};
  segs[3].amax = Tensor();  // a segment without a word is updated as before
  ops::adamw_update_multi(segs, hyper());
  EXPECT_EQ(word(segs[0].amax), amax_bits_of(segs[0].master));
  EXPECT_EQ(word(segs[1].amax), amax_bits_of(segs[1].working));
  EXPECT_EQ(word(segs[2].amax), amax_bits_of(segs[2].working)) << "the bf16 copy's values, rounded";
  EXPECT_NE(amax_bits_of(segs[2].working), amax_bits_of(segs[2].master)) << "a case where rounding shows";

  // The word is max-ed into: a larger value already there stays; the caller zeroes it between steps.
  const uint32_t big = std::bit_cast<uint32_t>(100.0f);
  *static_cast<uint32_t*>(segs[1].amax.data_ptr()) = big;
  ops::adamw_update_multi({segs[1]}, hyper());
  EXPECT_EQ(word(segs[1].amax), big);
}

TEST(AdamWAmax, ASkippedStepGivesTheAmaxOfTheUnchangedValues) {
  Rng rng(6);
  ops::AdamWSegment s = segment(rng, 500, DType::F32);
  ops::copy(s.working, s.master);
  const std::vector<float> before(s.master.data<float>(), s.master.data<float>() + 500);
  Tensor control = Tensor::zeros({kStepControlSlots}, DType::F64);
  control.data<double>()[kCtlSkipped] = 1;
  ops::adamw_update_multi({s}, hyper(), &control);
  EXPECT_EQ(std::vector<float>(s.master.data<float>(), s.master.data<float>() + 500), before) << "skipped";
  EXPECT_EQ(word(s.amax), amax_bits_of(s.working));
  EXPECT_NE(word(s.amax), 0u);
}

TEST(AdamWAmax, ANanShowsAndAWrongWordIsRefused) {
  Rng rng(7);
  ops::AdamWSegment s = segment(rng, 100, DType::U8);
  s.grad.data<float>()[37] = std::numeric_limits<float>::quiet_NaN();
  ops::adamw_update_multi({s}, hyper());
  EXPECT_GT(word(s.amax), fp8_abs_bits(std::numeric_limits<float>::infinity())) << "a NaN's bits win";

  ops::AdamWSegment wrong = segment(rng, 10, DType::U8);
  wrong.amax = Tensor::zeros({2}, DType::U32);
  EXPECT_THROW(ops::adamw_update_multi({wrong}, hyper()), Error);
  wrong.amax = Tensor::zeros({1}, DType::F32);
  EXPECT_THROW(ops::adamw_update_multi({wrong}, hyper()), Error);
}

}  // namespace
}  // namespace tetra::test
