// CUDA casts of a weight's flat slices and the FP8 transpose (runtime/cuda/fp8_slice.cu) against the
// CPU twins (runtime/cpu/fp8_slice.cpp), bit for bit: each slice's amax (as fp32 bits), the slices'
// codes and scales, and the transposed codes and scales; Tensorwise and Blocks128, fp32 and bf16
// weights, cut into slices mid-row and mid-block, with zeros, an all-zero block, saturating values,
// ±inf and NaN; sizes from one group to 1024 × 2048 (many warps per group, the grid striding).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/fp8_cast_shape.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

bool same_bytes(const Tensor& dev, const Tensor& host) {
  Tensor got = download_raw(dev);
  return got.nbytes() == host.nbytes() && std::memcmp(got.data_ptr(), host.data_ptr(), host.nbytes()) == 0;
}

Tensor weight_values(Rng& rng, int64_t rows, int64_t cols) {
  Tensor x = random_host(rng, {rows, cols}, 2.0);
  float* p = x.data<float>();
  const float specials[] = {0.0f, -0.0f, 1e-30f, 1e6f, -1e6f, INFINITY, -INFINITY, NAN};
  for (int64_t i = 0; i < x.numel(); i += 997) p[i] = specials[(i / 997) % 8];
  for (int64_t m = 0; m < std::min<int64_t>(rows, 128); ++m)  // an all-zero block (0, 1)
    for (int64_t k = 128; k < std::min<int64_t>(cols, 256); ++k) p[m * cols + k] = 0.0f;
  return x;
}

void check(ops::Fp8Scaling scaling, DType dt, int64_t rows, int64_t cols, int pieces, uint64_t seed) {
  Rng rng(seed);
  const Tensor hw = host_as(weight_values(rng, rows, cols), dt).view({rows * cols});
  const Tensor dw = upload_raw(hw);
  std::vector<int64_t> c = {0, rows * cols};
  for (int i = 1; i < pieces; ++i) c.push_back(static_cast<int64_t>(rng.uniform() * static_cast<double>(rows * cols)));
  std::sort(c.begin(), c.end());
  const Shape shape = fp8_scale_shape(scaling, rows, cols);
  const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " " + dtype_name(dt) +
                           (scaling == ops::Fp8Scaling::Blocks128 ? " 128x128" : " tensorwise");
  Tensor h_amax = Tensor::zeros(shape, DType::I32), d_amax = upload_raw(h_amax);
  for (size_t i = 0; i + 1 < c.size(); ++i) {
    const int64_t n = c[i + 1] - c[i];
    Tensor h_own = Tensor::zeros(shape, DType::I32), d_own = upload_raw(h_own);
    ops::fp8_slice_amax(h_own, hw.slice_flat(c[i], {n}), c[i], rows, cols, scaling);
    ops::fp8_slice_amax(d_own, dw.slice_flat(c[i], {n}), c[i], rows, cols, scaling);
    EXPECT_TRUE(same_amax_bits(d_own, h_own)) << what << ": slice " << i << "'s amax";
    ops::fp8_slice_amax(h_amax, hw.slice_flat(c[i], {n}), c[i], rows, cols, scaling);  // raised slice by slice
    ops::fp8_slice_amax(d_amax, dw.slice_flat(c[i], {n}), c[i], rows, cols, scaling);
  }
  EXPECT_TRUE(same_amax_bits(d_amax, h_amax)) << what << ": the weight's amax";
  Tensor h_q = Tensor::empty({rows * cols}, DType::F8E4M3), d_q = poisoned({rows * cols}, DType::F8E4M3);
  Tensor h_s = Tensor::empty(shape, DType::F32);
  for (size_t i = 0; i + 1 < c.size(); ++i) {
    const int64_t n = c[i + 1] - c[i];
    Tensor hq = h_q.slice_flat(c[i], {n}), dq = d_q.slice_flat(c[i], {n}), d_s = poisoned(shape, DType::F32);
    ops::fp8_slice_quantize(hq, h_s, hw.slice_flat(c[i], {n}), h_amax, c[i], rows, cols, scaling);
    ops::fp8_slice_quantize(dq, d_s, dw.slice_flat(c[i], {n}), d_amax, c[i], rows, cols, scaling);
    EXPECT_TRUE(same_bytes(d_s, h_s)) << what << ": slice " << i << "'s scales";
  }
  EXPECT_TRUE(same_bytes(d_q, h_q)) << what << ": codes";
  const Shape shape_t = fp8_scale_shape(scaling, cols, rows);
  Tensor h_qt = Tensor::empty({cols, rows}, DType::F8E4M3), h_st = Tensor::empty(shape_t, DType::F32);
  Tensor d_qt = poisoned({cols, rows}, DType::F8E4M3), d_st = poisoned(shape_t, DType::F32);
  Tensor d_s = upload_raw(h_s);
  ops::fp8_transpose(h_qt, h_st, h_q.view({rows, cols}), h_s, scaling);
  ops::fp8_transpose(d_qt, d_st, d_q.view({rows, cols}), d_s, scaling);
  EXPECT_TRUE(same_bytes(d_qt, h_qt)) << what << ": transposed codes";
  EXPECT_TRUE(same_bytes(d_st, h_st)) << what << ": transposed scales";
}

TEST(GpuFp8Slice, MatchesTheCpuTwinBitForBit) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 1;
  for (ops::Fp8Scaling s : {ops::Fp8Scaling::Tensorwise, ops::Fp8Scaling::Blocks128})
    for (DType dt : {DType::BF16, DType::F32})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 16}, {144, 272}, {400, 48}, {1024, 2048}})
        for (int pieces : {1, 2, 5}) check(s, dt, rows, cols, pieces, seed++);
}

}  // namespace
}  // namespace tetra::gputest
