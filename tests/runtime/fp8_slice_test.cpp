// The casts of a weight's flat slices and the FP8 transpose on the CPU (ops::fp8_slice_amax,
// fp8_slice_quantize, fp8_transpose; ZeRO-3's FP8 gather, parallel/zero/fp8_gather.h): a weight cut
// into flat slices anywhere (mid-row, mid-block), each slice's amax taken on its own and the slices'
// amaxes combined by an integer max (the all-reduce), then each slice cast — the concatenated codes
// and every slice's scales are fp8_quantize's of the whole weight, bit for bit; fp8_transpose gives
// the transposed copy fp8_quantize writes alongside, bit for bit. The CUDA twins:
// tests/runtime/cuda/fp8_slice_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/error.h"
#include "runtime/fp8_cast_shape.h"
#include "runtime/ops.h"
#include "tests/runtime/op_test_util.h"

namespace tetra {
namespace {

using test::poisoned;
using test::random_tensor;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// w [rows, cols] in `dt`, with zeros, an all-zero 128×128 block, large values and a NaN-free spread.
Tensor weight(Rng& rng, int64_t rows, int64_t cols, DType dt) {
  Tensor x = random_tensor(rng, {rows, cols}, 2.0);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); i += 53) p[i] = i % 2 ? 0.0f : 300.0f * p[i];
  for (int64_t m = 0; m < std::min<int64_t>(rows, 128); ++m)
    for (int64_t k = 128; k < std::min<int64_t>(cols, 256); ++k) p[m * cols + k] = 0.0f;
  Tensor out = Tensor::empty({rows, cols}, dt);
  ops::copy(out, x);
  return out;
}

// Cut points of [0, n): the ends, and `pieces` − 1 cuts that fall mid-row and mid-block.
std::vector<int64_t> cuts(Rng& rng, int64_t n, int pieces) {
  std::vector<int64_t> c = {0, n};
  for (int i = 1; i < pieces; ++i) c.push_back(static_cast<int64_t>(rng.uniform() * static_cast<double>(n)));
  std::sort(c.begin(), c.end());
  return c;
}

void check_slices(ops::Fp8Scaling scaling, DType dt, int64_t rows, int64_t cols, int pieces, uint64_t seed) {
  Rng rng(seed);
  const Tensor w = weight(rng, rows, cols, dt);
  const Shape scale_shape = fp8_scale_shape(scaling, rows, cols);
  Tensor q_ref = Tensor::empty({rows, cols}, DType::F8E4M3), s_ref = Tensor::empty(scale_shape, DType::F32);
  ops::fp8_quantize(q_ref, s_ref, w, scaling);

  const std::vector<int64_t> c = cuts(rng, rows * cols, pieces);
  const Tensor flat = w.view({rows * cols});
  // Each slice's own amax, then their max (what the all-reduce over the ranks does).
  Tensor amax = Tensor::zeros(scale_shape, DType::I32);
  for (size_t i = 0; i + 1 < c.size(); ++i) {
    Tensor own = Tensor::zeros(scale_shape, DType::I32);
    ops::fp8_slice_amax(own, flat.slice_flat(c[i], {c[i + 1] - c[i]}), c[i], rows, cols, scaling);
    int32_t* a = amax.data<int32_t>();
    for (int64_t g = 0; g < own.numel(); ++g) a[g] = std::max(a[g], own.data<int32_t>()[g]);
  }
  Tensor q = Tensor::empty({rows * cols}, DType::F8E4M3);
  const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " in " + std::to_string(pieces) +
                           " slices, " + dtype_name(dt) + (scaling == ops::Fp8Scaling::Blocks128 ? " 128x128" : " tensorwise");
  for (size_t i = 0; i + 1 < c.size(); ++i) {
    Tensor part = q.slice_flat(c[i], {c[i + 1] - c[i]}), scale = poisoned(scale_shape);
    ops::fp8_slice_quantize(part, scale, flat.slice_flat(c[i], {c[i + 1] - c[i]}), amax, c[i], rows, cols, scaling);
    EXPECT_TRUE(same_bytes(scale, s_ref)) << what << ": slice " << i << "'s scales";
  }
  EXPECT_TRUE(same_bytes(q, q_ref)) << what << ": codes";

  // The transposed copy from the codes, against fp8_quantize's.
  Tensor q2 = Tensor::empty({rows, cols}, DType::F8E4M3), s2 = Tensor::empty(scale_shape, DType::F32);
  Tensor qt_ref = Tensor::empty({cols, rows}, DType::F8E4M3);
  Tensor st_ref = Tensor::empty(fp8_scale_shape(scaling, cols, rows), DType::F32);
  ops::fp8_quantize(q2, s2, w, scaling, &qt_ref, &st_ref);
  Tensor q_t = Tensor::empty({cols, rows}, DType::F8E4M3), s_t = poisoned(st_ref.shape());
  ops::fp8_transpose(q_t, s_t, q_ref, s_ref, scaling);
  EXPECT_TRUE(same_bytes(q_t, qt_ref)) << what << ": transposed codes";
  EXPECT_TRUE(same_bytes(s_t, st_ref)) << what << ": transposed scales";
}

// Shapes: one group; partial blocks on both sides; whole blocks; tall and wide.
TEST(Fp8Slice, SlicesCastAsTheWholeWeightBitForBit) {
  uint64_t seed = 1;
  for (ops::Fp8Scaling s : {ops::Fp8Scaling::Tensorwise, ops::Fp8Scaling::Blocks128})
    for (DType dt : {DType::F32, DType::BF16})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 16}, {144, 272}, {256, 128}, {400, 48}, {32, 400}})
        for (int pieces : {1, 2, 3, 5}) check_slices(s, dt, rows, cols, pieces, seed++);
}

TEST(Fp8Slice, AnEmptySliceWritesTheScales) {
  Rng rng(7);
  const Tensor w = weight(rng, 144, 272, DType::F32);
  const Shape shape = fp8_scale_shape(ops::Fp8Scaling::Blocks128, 144, 272);
  Tensor q_ref = Tensor::empty({144, 272}, DType::F8E4M3), s_ref = Tensor::empty(shape, DType::F32);
  ops::fp8_quantize(q_ref, s_ref, w, ops::Fp8Scaling::Blocks128);
  Tensor amax = Tensor::zeros(shape, DType::I32);
  ops::fp8_slice_amax(amax, w.view({144 * 272}), 0, 144, 272, ops::Fp8Scaling::Blocks128);
  Tensor none = Tensor::empty({0}, DType::F8E4M3), scale = poisoned(shape);
  ops::fp8_slice_quantize(none, scale, w.view({144 * 272}).slice_flat(100, {0}), amax, 100, 144, 272,
                          ops::Fp8Scaling::Blocks128);
  EXPECT_TRUE(same_bytes(scale, s_ref));
}

TEST(Fp8Slice, RefusesWhatItCannotCast) {
  Tensor x = Tensor::zeros({64}, DType::F32), amax = Tensor::zeros({1}, DType::I32);
  // A slice past the weight's end; an amax of the wrong dtype.
  EXPECT_THROW(ops::fp8_slice_amax(amax, x, 1000, 32, 32, ops::Fp8Scaling::Tensorwise), Error);
  Tensor amax_f32 = Tensor::zeros({1}, DType::F32);
  EXPECT_THROW(ops::fp8_slice_amax(amax_f32, x, 0, 32, 32, ops::Fp8Scaling::Tensorwise), Error);
  // 1×128 groups have no transposed copy made of the same groups.
  Tensor q = Tensor::empty({16, 128}, DType::F8E4M3), q_t = Tensor::empty({128, 16}, DType::F8E4M3);
  Tensor s = Tensor::zeros(fp8_scale_shape(ops::Fp8Scaling::Rows1x128, 16, 128), DType::F32);
  Tensor s_t = Tensor::zeros(fp8_scale_shape(ops::Fp8Scaling::Rows1x128, 128, 16), DType::F32);
  EXPECT_THROW(ops::fp8_transpose(q_t, s_t, q, s, ops::Fp8Scaling::Rows1x128), Error);
}

}  // namespace
}  // namespace tetra
