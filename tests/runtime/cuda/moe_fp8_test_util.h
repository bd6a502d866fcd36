// What the grouped FP8 expert GEMMs' GPU tests share (moe_fp8_test.cpp: tensorwise on both kernels;
// moe_fp8_blockwise_test.cpp): offsets, magnitudes for the error bound, and the comparison of a GPU
// result with the CPU twin's within a bound derived from the sums' rounding.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cuda/moe_grouped_gemm.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {

inline Tensor offsets_of(const std::vector<int64_t>& rows, int64_t start) {
  Tensor t = Tensor::empty({static_cast<int64_t>(rows.size()) + 1}, DType::I32);
  int32_t* p = t.data<int32_t>();
  p[0] = static_cast<int32_t>(start);
  for (size_t g = 0; g < rows.size(); ++g) p[g + 1] = p[g] + static_cast<int32_t>(rows[g]);
  return t;
}

inline Tensor abs_of(const Tensor& host) {
  Tensor a = Tensor::empty(host.shape(), DType::F32);
  for (int64_t i = 0; i < host.numel(); ++i) a.data<float>()[i] = std::fabs(host.data<float>()[i]);
  return a;
}

// Where an element of a result lies: expert, row and column (row tensors: the row's expert).
struct Layout {
  const Tensor* offsets;  // host; null: a weight-shaped result [G, rows, cols]
  int64_t rows_per_expert, cols;
  std::string where(int64_t i) const {
    const int64_t row = i / cols, col = i % cols;
    int64_t g = row / rows_per_expert, r = row % rows_per_expert;
    if (offsets) {
      const int32_t* o = offsets->data<int32_t>();
      g = -1;
      for (int64_t e = 0; e + 1 < offsets->numel(); ++e)
        if (o[e] <= row && row < o[e + 1]) g = e;
      r = row;
    }
    std::ostringstream os;
    os << "expert " << g << ", row " << r << ", col " << col;
    return os.str();
  }
};

// got against ref element by element over [begin, end). The two sides multiply the same codes and
// scales: each term of the CPU's sum is (qa·sa)·(qb·sb), three fp32 roundings, the GPU's qa·qb exact
// and two roundings after the sum; the sums themselves are fp32 in different orders, each of at
// most K additions off by 2^-24 of the running sum. So |got − ref| ≤ (K + 8)·2^-23 · Σ|terms| (a
// factor 2 to spare), where Σ|terms| is the twin on |x| and |w| (the same scales, the codes' magnitudes),
// plus 2^-8·|ref| for a bf16 output (half an ulp of bf16, doubled). Prints the first miss (expert,
// row, column, both values) and the worst error as a fraction of its bound.
// The tensor cores (tensor_cores): FP8 wgmma sums its products in an accumulator that keeps about 14
// significant bits (DeepSeek-V3 §3.3.2 measured it on Hopper). Taking the worst reading — the 32
// products of a k32 step aligned to the largest and cut to 14 bits, each off by up to 2^-13 of the
// largest, and each of the 4 accumulations per k-tile off by 2^-13 of the partial sum — a k-tile errs
// by at most (32 + 4)·2^-13 < 2^-7.8 of Σ|terms| over its 128 products; the kernel promotes every
// k-tile into fp32, so these add up to at most that fraction of the whole Σ|terms|. The bound adds
// 2^-7·Σ|terms| (a factor 1.8 to spare). A kind the kernel runs with fast accumulation
// (cuda::grouped_gemm_fp8_fast_accumulation: the forward by default) is never promoted: the 32·2^-13
// of the products stays, and each of the K/32 accumulations adds its 2^-13 of the partial sum, so the
// bound adds 1.2·(32 + ⌈K/32⌉)·2^-13·Σ|terms| (2^-6.4 at K = 1536). A misplaced operand or scale is
// off by about |result| ≈ Σ|terms|/√K for these random signs on nearly every element, more than
// either bound on many of them for every K here (≤ 1536: 1/√K ≥ 2^-5.3).
inline double tensor_core_rel(bool tensor_cores, cuda::GroupedGemmKind kind, int64_t K) {
  if (!tensor_cores) return 0.0;
  if (!cuda::grouped_gemm_fp8_fast_accumulation(kind)) return std::ldexp(1.0, -7);
  return 1.2 * (32.0 + std::ceil(static_cast<double>(K) / 32.0)) * std::ldexp(1.0, -13);
}

inline void expect_within(const Tensor& dev, const Tensor& ref, const Tensor& abs_ref, int64_t K, int64_t begin, int64_t end,
                   const Layout& at, const std::string& what, double tc_rel) {
  const std::vector<double> got = download(dev), want = values(ref), mag = values(abs_ref);
  const double rel = (static_cast<double>(K) + 8.0) * std::ldexp(1.0, -23) + tc_rel;
  const double out_rel = dev.dtype() == DType::BF16 ? std::ldexp(1.0, -8) : 0.0;
  double worst = 0.0;
  int64_t misses = 0;
  for (int64_t i = begin; i < end; ++i) {
    const size_t k = static_cast<size_t>(i);
    const double bound = rel * mag[k] + out_rel * std::fabs(want[k]) + 1e-30;
    const double err = std::fabs(got[k] - want[k]);
    const double ratio = std::isfinite(got[k]) ? err / bound : INFINITY;
    worst = std::max(worst, ratio);
    if (!(ratio <= 1.0) && misses++ == 0)
      ADD_FAILURE() << what << ": first mismatch at " << at.where(i) << ": gpu " << got[k] << ", cpu " << want[k]
                    << ", |diff| " << err << " > bound " << bound;
  }
  std::printf("%s: worst error %.3g of its bound, %lld misses\n", what.c_str(), worst, static_cast<long long>(misses));
}

// A case's random operands on the host: experts of `rows` rows after `lead` rows outside them and
// before `tail` more; x [R, I], dy [R, O] and w [G, O, I] representable in `in`, dw0 (an accumulated
// weight gradient) in `out`.
struct GroupedOperands {
  int64_t G = 0, used = 0, R = 0;
  Tensor off, x, dy, w, dw0;
};

inline GroupedOperands random_operands(const std::vector<int64_t>& rows, int64_t lead, int64_t tail, int64_t O,
                                       int64_t I, DType in, DType out, uint64_t seed) {
  Rng rng(seed);
  GroupedOperands g;
  g.G = static_cast<int64_t>(rows.size());
  for (int64_t r : rows) g.used += r;
  g.R = lead + g.used + tail;
  g.off = offsets_of(rows, lead);
  g.x = representable(random_host(rng, {g.R, I}, 1.0), in);
  g.dy = representable(random_host(rng, {g.R, O}, 1e-3), in);
  g.w = representable(random_host(rng, {g.G, O, I}, 0.05), in);
  g.dw0 = representable(random_host(rng, {g.G, O, I}, 1e-2), out);
  return g;
}

// Rows of y [R, O] and dx [R, I] outside the experts' [lead, lead + used) stay as they were
// (poisoned: NaN).
inline void expect_outside_rows_untouched(const Tensor& y, int64_t O, const Tensor& dx, int64_t I, int64_t lead,
                                          int64_t used, const std::string& what) {
  for (const auto& [t, cols] : {std::pair<const Tensor*, int64_t>{&y, O}, {&dx, I}}) {
    const std::vector<double> got = download(*t);
    int64_t written = 0;
    for (int64_t i = 0; i < t->dim(0) * cols; ++i)
      if (i < lead * cols || i >= (lead + used) * cols) written += !std::isnan(got[static_cast<size_t>(i)]);
    EXPECT_EQ(written, 0) << "elements written outside the experts' rows, " << what;
  }
}

}  // namespace tetra::gputest
