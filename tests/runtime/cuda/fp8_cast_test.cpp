// CUDA FP8 casts against the CPU twin (runtime/cpu/fp8_cast.cpp), bit for bit: codes, scales and
// the transposed copy with its scales, for each scaling and format, fp32 and bf16 inputs, shapes
// with partial tiles and groups at every edge, on and off the vector paths (row lengths and
// pointers), the benchmarks' 16384×2048 and tall ones; inputs with zeros, an all-zero row,
// subnormals, saturating values, ±inf and NaN. Then the dequantisation, also bit for bit.
// The FP8 GEMM (cuBLASLt) against the CPU's fp32 GEMM on the dequantised operands, for the pairs the
// recipes use: both tolerances are fp32 accumulation-order floors (a wrong scale layout or mode
// misses by orders of magnitude: each 128-group's scale differs from its neighbours').
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "runtime/fp8_cast_shape.h"
#include "runtime/fp8_format.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

struct Case {
  ops::Fp8Scaling scaling;
  Fp8Format format;
  DType x_dtype;
};

Shape scale_shape(ops::Fp8Scaling s, int64_t M, int64_t K) { return fp8_scale_shape(s, M, K); }

Tensor special_values(Rng& rng, int64_t M, int64_t K) {
  Tensor x = random_host(rng, {M, K}, 4.0);
  float* p = x.data<float>();
  const float specials[] = {0.0f, -0.0f, 1e-30f, 3e-3f, 1e6f, -1e6f, INFINITY, -INFINITY, NAN};
  for (int64_t i = 0; i < x.numel(); i += 97) p[i] = specials[(i / 97) % 9];
  for (int64_t k = 0; k < K && M > 3; ++k) p[3 * K + k] = 0.0f;  // an all-zero row (Rows1x128: amax 0)
  for (int64_t m = 0; m < M && K > 5; ++m) p[m * K + 5] = 0.0f;  // an all-zero column (q_t's 128×1 runs)
  for (int64_t m = 128; m < std::min<int64_t>(M, 256); ++m)      // an all-zero 128×128 block (1, 1)
    for (int64_t k = 128; k < std::min<int64_t>(K, 256); ++k) p[m * K + k] = 0.0f;
  return x;
}

bool same_bytes(const Tensor& dev, const Tensor& host) {
  Tensor got = download_raw(dev);
  return got.nbytes() == host.nbytes() && std::memcmp(got.data_ptr(), host.data_ptr(), host.nbytes()) == 0;
}

// Dequantised values, element for element: equal bits, or NaN on both sides (a NaN's payload and
// sign are not part of the contract: the CPU writes the canonical NaN, the GPU the NaN its conversion
// made).
bool same_values(const Tensor& dev, const Tensor& host) {
  const std::vector<double> got = download(dev);
  Tensor host_f32 = Tensor::empty(host.shape(), DType::F32);
  ops::copy(host_f32, host);
  const std::vector<double> want = values(host_f32);
  for (size_t i = 0; i < want.size(); ++i)
    if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))) return false;
  return got.size() == want.size();
}

// Device tensors of `shape` whose data start `offset` elements into a poisoned buffer: offset 0 is
// the aligned case; an odd offset moves x, q and q_t off the 16- and 8-byte boundaries the vector
// paths need, so the kernels must fall back to element access.
Tensor placed(const Shape& shape, DType dt, int64_t offset) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Tensor buffer = poisoned({n + offset}, dt);
  return buffer.slice_flat(offset, shape);
}

struct Outputs {
  Tensor q, scale, q_t, scale_t;
};

// The cast of x with q_t (and scale_t, which Tensorwise may leave out) on x's device.
Outputs cast_with_transpose(const Case& c, const Tensor& x, bool with_scale_t, int64_t offset) {
  const int64_t M = x.dim(0), K = x.dim(1);
  const DType qd = dtype_of(c.format);
  const bool host = x.device().is_cpu();
  auto make = [&](const Shape& shape, DType dt, int64_t off) {
    return host ? Tensor::empty(shape, dt) : placed(shape, dt, off);
  };
  Outputs o{make({M, K}, qd, offset), make(scale_shape(c.scaling, M, K), DType::F32, 0), make({K, M}, qd, 3 * offset),
            with_scale_t ? make(scale_shape(c.scaling, K, M), DType::F32, 0) : Tensor()};
  ops::fp8_quantize(o.q, o.scale, x, c.scaling, &o.q_t, with_scale_t ? &o.scale_t : nullptr);
  return o;
}

std::string describe(const Case& c, int64_t M, int64_t K) {
  static const char* const scalings[] = {"tensorwise", "1x128", "128x128"};
  return std::string(fp8_format_name(c.format)) + " " + dtype_name(c.x_dtype) + " [" + std::to_string(M) + ", " +
         std::to_string(K) + "] " + scalings[static_cast<int>(c.scaling)];
}

// offset: elements by which x, q and q_t (3 · offset) start off their allocation (see placed()).
void check_cast(const Case& c, int64_t M, int64_t K, uint64_t seed, int64_t offset = 0) {
  Rng rng(seed);
  const Tensor x = representable(special_values(rng, M, K), c.x_dtype);
  const Tensor hx = host_as(x, c.x_dtype);
  // Tensorwise's scale_t is optional: leave it out on every other seed.
  const bool with_scale_t = c.scaling != ops::Fp8Scaling::Tensorwise || seed % 2 == 0;
  const Outputs h = cast_with_transpose(c, hx, with_scale_t, 0);

  Tensor dx = placed({M, K}, c.x_dtype, offset);
  cuda::copy_bytes(dx.data_ptr(), gpu(), hx.data_ptr(), Device::cpu(), hx.nbytes(), /*blocking=*/true);
  const Outputs d = cast_with_transpose(c, dx, with_scale_t, offset);
  const std::string what = describe(c, M, K) + (offset ? " (unaligned)" : "");
  EXPECT_TRUE(same_bytes(d.q, h.q)) << what << ": codes";
  EXPECT_TRUE(same_bytes(d.scale, h.scale)) << what << ": scales";
  EXPECT_TRUE(same_bytes(d.q_t, h.q_t)) << what << ": transposed codes";
  if (with_scale_t) {
    EXPECT_TRUE(same_bytes(d.scale_t, h.scale_t)) << what << ": transposed scales";
  }
  // Without q_t the codes and scales are the same.
  Tensor dq = poisoned({M, K}, d.q.dtype()), ds = poisoned(h.scale.shape(), DType::F32);
  ops::fp8_quantize(dq, ds, dx, c.scaling);
  EXPECT_TRUE(same_bytes(dq, h.q)) << what << ": codes without q_t";
  EXPECT_TRUE(same_bytes(ds, h.scale)) << what << ": scales without q_t";

  for (DType yd : {DType::F32, DType::BF16}) {
    Tensor hy = Tensor::empty({M, K}, yd), dy = poisoned({M, K}, yd);
    ops::fp8_dequantize(hy, h.q, h.scale, c.scaling);
    ops::fp8_dequantize(dy, d.q, d.scale, c.scaling);
    EXPECT_TRUE(same_values(dy, hy)) << what << ": dequantised to " << dtype_name(yd);
  }
}

std::vector<Case> every_case() {
  std::vector<Case> cases;
  for (ops::Fp8Scaling s : {ops::Fp8Scaling::Tensorwise, ops::Fp8Scaling::Rows1x128, ops::Fp8Scaling::Blocks128})
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
      for (DType dt : {DType::BF16, DType::F32}) cases.push_back({s, f, dt});
  return cases;
}

// Shapes: single elements; rows and columns not multiples of 8 or 16 (element access throughout:
// 33×31, 200×300, 260×300); K a multiple of 8 with M not one of 16 (vector loads and q stores, q_t
// stored by element: 200×304); both multiples with partial tiles (272×392) and whole tiles (256×2048).
TEST(GpuFp8Cast, MatchesTheCpuTwinBitForBit) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const Case& c : every_case())
    for (auto [M, K] : {std::pair<int64_t, int64_t>{1, 1}, {33, 31}, {200, 300}, {260, 300}, {200, 304}, {272, 392},
                        {256, 2048}})
      check_cast(c, M, K, seed++);
}

// Tensorwise with q_t takes the grouped casts' transposing kernel on the vector paths (the tests
// above); TETRA_FP8_DENSE_CAST=tile keeps the 128 × 128 tile kernel, which must match the CPU twin
// too. A setting that is neither is refused.
TEST(GpuFp8Cast, TensorwiseOnTheTileKernelMatchesTheCpuTwin) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 300;
  setenv("TETRA_FP8_DENSE_CAST", "tile", 1);
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (DType dt : {DType::BF16, DType::F32})
      for (auto [M, K] : {std::pair<int64_t, int64_t>{200, 304}, {272, 392}, {256, 2048}})
        check_cast({ops::Fp8Scaling::Tensorwise, f, dt}, M, K, seed++);
  setenv("TETRA_FP8_DENSE_CAST", "tiles", 1);
  Tensor x = poisoned({64, 64}, DType::BF16), q = poisoned({64, 64}, DType::F8E4M3), s = poisoned({1}, DType::F32);
  Tensor q_t = poisoned({64, 64}, DType::F8E4M3);
  EXPECT_THROW(ops::fp8_quantize(q, s, x, ops::Fp8Scaling::Tensorwise, &q_t), Error);
  unsetenv("TETRA_FP8_DENSE_CAST");
}

// x, q and q_t off the vector paths' alignment with shapes that would otherwise take them.
TEST(GpuFp8Cast, UnalignedOperandsMatchTheCpuTwin) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 500;
  for (const Case& c : every_case()) check_cast(c, 256, 264, seed++, /*offset=*/1);
}

// fp8_amax and the Tensorwise cast with a given amax (a tensor-parallel part cast with the whole's
// scale) against the CPU twin, bit for bit: the amax bits of specials (NaN wins), aligned and not,
// bf16 and fp32; then every part's cast with the largest part amax, its transposed copy too.
TEST(GpuFp8Cast, AmaxAndTheCastWithAGivenAmaxMatchTheCpuTwin) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 700;
  for (DType dt : {DType::BF16, DType::F32})
    for (auto [M, K, offset] : {std::tuple<int64_t, int64_t, int64_t>{96, 40, 0}, {33, 31, 1}, {256, 264, 0}}) {
      Rng rng(seed++);
      Tensor x32 = random_host(rng, {M, K}, 4.0);
      if (seed % 2 == 0) x32 = special_values(rng, M, K);
      const Tensor hx = host_as(representable(x32, dt), dt);
      Tensor dx = placed({M, K}, dt, offset);
      cuda::copy_bytes(dx.data_ptr(), gpu(), hx.data_ptr(), Device::cpu(), hx.nbytes(), /*blocking=*/true);
      Tensor h_amax = Tensor::empty({1}, DType::U32), d_amax = poisoned({1}, DType::U32);
      ops::fp8_amax(h_amax, hx);
      ops::fp8_amax(d_amax, dx);
      const std::string what = std::string(dtype_name(dt)) + " [" + std::to_string(M) + ", " + std::to_string(K) + "]";
      EXPECT_TRUE(same_amax_bits(d_amax, h_amax)) << what << ": amax";
      // A larger amax than x's own (the whole's, of which x is a part): x's bits + 1000 ulps.
      *static_cast<uint32_t*>(h_amax.data_ptr()) += 1000;
      Tensor d_given = upload_raw(h_amax);
      for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        const DType qd = dtype_of(f);
        Tensor hq = Tensor::empty({M, K}, qd), hs = Tensor::empty({1}, DType::F32);
        Tensor hqt = Tensor::empty({K, M}, qd), hst = Tensor::empty({1}, DType::F32);
        ops::fp8_quantize(hq, hs, hx, ops::Fp8Scaling::Tensorwise, &hqt, &hst, &h_amax);
        Tensor dq = poisoned({M, K}, qd), ds = poisoned({1}, DType::F32);
        Tensor dqt = poisoned({K, M}, qd), dst = poisoned({1}, DType::F32);
        ops::fp8_quantize(dq, ds, dx, ops::Fp8Scaling::Tensorwise, &dqt, &dst, &d_given);
        EXPECT_TRUE(same_bytes(dq, hq)) << what << " " << fp8_format_name(f) << ": codes with a given amax";
        EXPECT_TRUE(same_bytes(ds, hs)) << what << " " << fp8_format_name(f) << ": scale with a given amax";
        EXPECT_TRUE(same_bytes(dqt, hqt)) << what << " " << fp8_format_name(f) << ": transposed codes";
        EXPECT_TRUE(same_bytes(dst, hst)) << what << " " << fp8_format_name(f) << ": transposed scale";
      }
    }
}

// The benchmarks' shape (16384×2048 bf16, 2^25 elements: 2048 tiles of 128×128, more than the grid's
// blocks, so blocks take several) and tall, narrow ones (16,385 and 1,025 tiles in one column of
// tiles, the last one partial; the fp32 one with rows of 40 takes the element path).
TEST(GpuFp8Cast, LargeShapesMatchTheCpuTwin) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 900;
  for (ops::Fp8Scaling s : {ops::Fp8Scaling::Tensorwise, ops::Fp8Scaling::Rows1x128, ops::Fp8Scaling::Blocks128})
    check_cast({s, Fp8Format::E4M3, DType::BF16}, 16384, 2048, seed++);
  check_cast({ops::Fp8Scaling::Rows1x128, Fp8Format::E5M2, DType::BF16}, 65536 * 32 + 40, 64, seed++);
  check_cast({ops::Fp8Scaling::Blocks128, Fp8Format::E4M3, DType::F32}, 65536 * 2 + 8, 40, seed++);
}

// A device tensor of all-ones bytes too large for poisoned()'s host buffer: 1 MiB poisoned, then
// doubled on the device.
Tensor poisoned_large(const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt, gpu());
  const size_t n = t.nbytes(), first = std::min<size_t>(n, size_t{1} << 20);
  std::vector<unsigned char> ones(first, 0xff);
  char* p = static_cast<char*>(t.data_ptr());
  cuda::copy_bytes(p, gpu(), ones.data(), Device::cpu(), first, /*blocking=*/true);
  for (size_t done = first; done < n; done *= 2)
    cuda::copy_bytes(p + done, gpu(), p, gpu(), std::min(done, n - done), /*blocking=*/true);
  return t;
}

// The columns of a cast's scale tensor that hold groups (the rest is fp8_scale_shape's padding):
// Rows1x128 one per row of x [rows, cols], Blocks128 one per 128 columns, Tensorwise its one.
int64_t scale_columns_used(ops::Fp8Scaling scaling, int64_t rows, int64_t cols) {
  switch (scaling) {
    case ops::Fp8Scaling::Rows1x128: return rows;
    case ops::Fp8Scaling::Blocks128: return (cols + ops::kFp8Block - 1) / ops::kFp8Block;
    case ops::Fp8Scaling::Tensorwise: break;
  }
  return 1;
}

// dev [R, C] (a scale [1] counts as [1, 1]) against host [r, c] repeated down and across:
// dev[i, j] == host[i % r, j % c], byte for byte. With used columns given (scales: the padding of
// each row differs between the two shapes), only the first dev_used columns of dev repeat the first
// host_used of host, and dev's columns past them are zero.
bool repeats(const Tensor& dev, const Tensor& host, int64_t dev_used = -1, int64_t host_used = -1) {
  const Tensor got = download_raw(dev);
  const int64_t R = got.ndim() == 2 ? got.dim(0) : 1, C = got.dim(-1);
  const int64_t r = host.ndim() == 2 ? host.dim(0) : 1, c = host.dim(-1);
  if (dev_used < 0) dev_used = C;
  if (host_used < 0) host_used = c;
  const size_t e = dtype_size(got.dtype());
  const auto* g = static_cast<const unsigned char*>(got.data_ptr());
  const auto* h = static_cast<const unsigned char*>(host.data_ptr());
  const std::vector<unsigned char> zero(e, 0);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      const unsigned char* want = j < dev_used ? h + ((i % r) * c + j % host_used) * e : zero.data();
      if (std::memcmp(g + (i * C + j) * e, want, e) != 0) return false;
    }
  return true;
}

// Past 2^31 elements (int64 indexing in every kernel): x [16512, 131072] bf16 (2.16 G elements)
// is one 128-row block repeated, so the CPU cast of that block gives every group: q's first and last
// 128 rows, q_t's last 128 rows (column m holds the block's column m % 128: the same 128-row runs
// and blocks), all the scales; Tensorwise's amax is the block's. 9 GB of device memory.
TEST(GpuFp8Cast, PastTwoToThe31ElementsMatchesTheCpuTwin) {
  TETRA_REQUIRE_GPU();
  const int64_t B = 128, K = 131072, M = 129 * B;
  Rng rng(77);
  const Tensor hx = host_as(representable(random_host(rng, {B, K}, 4.0), DType::BF16), DType::BF16);
  Tensor dx = Tensor::empty({M, K}, DType::BF16, gpu());
  for (int64_t r = 0; r < M; r += B)
    cuda::copy_bytes(static_cast<char*>(dx.data_ptr()) + r * K * 2, gpu(), hx.data_ptr(), Device::cpu(), hx.nbytes(),
                     /*blocking=*/true);
  for (ops::Fp8Scaling scaling :
       {ops::Fp8Scaling::Tensorwise, ops::Fp8Scaling::Rows1x128, ops::Fp8Scaling::Blocks128}) {
    const Case c{scaling, Fp8Format::E4M3, DType::BF16};
    const Outputs h = cast_with_transpose(c, hx, /*with_scale_t=*/true, 0);
    const DType qd = dtype_of(c.format);
    Outputs d{poisoned_large({M, K}, qd), poisoned(scale_shape(scaling, M, K), DType::F32), poisoned_large({K, M}, qd),
              poisoned(scale_shape(scaling, K, M), DType::F32)};
    ops::fp8_quantize(d.q, d.scale, dx, scaling, &d.q_t, &d.scale_t);
    const std::string what = describe(c, M, K);
    EXPECT_TRUE(same_bytes(d.q.slice_flat(0, {B, K}), h.q)) << what << ": first rows' codes";
    EXPECT_TRUE(same_bytes(d.q.slice_flat((M - B) * K, {B, K}), h.q)) << what << ": last rows' codes";
    EXPECT_TRUE(repeats(d.q_t.slice_flat((K - B) * M, {B, M}), h.q_t.slice_flat((K - B) * B, {B, B})))
        << what << ": last rows' transposed codes";
    EXPECT_TRUE(repeats(d.scale, h.scale, scale_columns_used(scaling, M, K), scale_columns_used(scaling, B, K)))
        << what << ": scales";
    EXPECT_TRUE(repeats(d.scale_t, h.scale_t, scale_columns_used(scaling, K, M), scale_columns_used(scaling, K, B)))
        << what << ": transposed scales";
  }
}

// The GEMM's floor against the CPU's fp32 sum of the same products: Hopper's FP8 tensor cores keep
// fewer accumulator bits than fp32 between promotions (DeepSeek-V3 §3.3.2), which cuBLASLt bounds; on
// one H200 the mixed E5M2·E4M3 GEMM measured 2.0e-4 norm-wise and 1.4e-3 at its worst element (E4M3·E4M3
// tensorwise below 1e-5). Bounds of 1e-3 / 1e-2 hold that with room; a wrong scale, scale layout or
// mode is off by O(1) (measured 0.98–1.3 norm-wise with a transposed scale layout). bf16 outputs add
// bf16's rounding: its usual bounds.
//
// Fast accumulation keeps the tensor cores' own accumulator over the whole K loop: DeepSeek-V3
// (§3.3.2) measured a worst relative error near 2% at K = 4096 on H800 without promotion. Bounds of
// 1e-2 norm-wise and 5e-2 at the worst element hold that; a wrong scale is still O(1) off.
void check_fp8_gemm(const Tensor& y, const Tensor& ref, DType dt, const std::string& what, bool fast_accum = false) {
  const std::vector<double> got = download(y), want = values(ref);
  const double norm = rel_error(got, want), worst = worst_element_error(got, want);
  double norm_bound = dt == DType::BF16 ? tol(dt) : 1e-3, worst_bound = dt == DType::BF16 ? worst_tol(dt) : 1e-2;
  if (fast_accum) {
    norm_bound = std::max(norm_bound, 1e-2);
    worst_bound = std::max(worst_bound, 5e-2);
    std::printf("%s, fast accumulation: norm-wise %.3g, worst element %.3g\n", what.c_str(), norm, worst);
  }
  EXPECT_LE(norm, norm_bound) << what << ": norm-wise relative error";
  EXPECT_LE(worst, worst_bound) << what << ": worst element";
}

struct GemmCase {
  ops::Fp8Scaling a_scaling, b_scaling;
  Fp8Format a_format, b_format;
  DType y_dtype;
};

// a [M, K] and b [N, K] quantised on the host, with rows of very different magnitudes so that every
// group's scale differs.
void check_gemm(const GemmCase& c, int64_t M, int64_t N, int64_t K, uint64_t seed, bool fast_accum = false) {
  Rng rng(seed);
  auto operand = [&](int64_t rows, ops::Fp8Scaling scaling, Fp8Format format, Tensor& q, Tensor& sc) {
    Tensor x = random_host(rng, {rows, K});
    float* p = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] *= std::ldexp(1.0f, static_cast<int>((i / 96) % 7) - 3);
    q = Tensor::empty({rows, K}, dtype_of(format));
    sc = Tensor::empty(scale_shape(scaling, rows, K), DType::F32);
    ops::fp8_quantize(q, sc, x, scaling);
  };
  Tensor qa, sa, qb, sb;
  operand(M, c.a_scaling, c.a_format, qa, sa);
  operand(N, c.b_scaling, c.b_format, qb, sb);
  Tensor ref = Tensor::empty({M, N}, DType::F32);
  ops::fp8_gemm(ref, qa, sa, c.a_scaling, qb, sb, c.b_scaling);
  Tensor y = poisoned({M, N}, c.y_dtype);
  Tensor dqa = upload_raw(qa), dsa = upload_raw(sa), dqb = upload_raw(qb), dsb = upload_raw(sb);
  ops::fp8_gemm(y, dqa, dsa, c.a_scaling, dqb, dsb, c.b_scaling, /*accumulate=*/false, fast_accum);
  const std::string what = std::string(fp8_format_name(c.a_format)) + "·" + fp8_format_name(c.b_format) +
                           " scalings " + std::to_string(static_cast<int>(c.a_scaling)) + "/" +
                           std::to_string(static_cast<int>(c.b_scaling)) + " y " + dtype_name(c.y_dtype) + " [" +
                           std::to_string(M) + ", " + std::to_string(N) + ", " + std::to_string(K) + "]";
  check_fp8_gemm(y, ref, c.y_dtype, what, fast_accum);
  // Accumulating adds the same product again: 2·ref (a bf16 y holds the first product rounded, so
  // the sum is within bf16's bound too).
  ops::fp8_gemm(y, dqa, dsa, c.a_scaling, dqb, dsb, c.b_scaling, /*accumulate=*/true, fast_accum);
  ops::scale(ref, 2.0f);
  check_fp8_gemm(y, ref, c.y_dtype, what + " accumulated", fast_accum);
}

TEST(GpuFp8Gemm, MatchesTheCpuEmulation) {
  TETRA_REQUIRE_GPU();
  using S = ops::Fp8Scaling;
  const GemmCase cases[] = {
      {S::Tensorwise, S::Tensorwise, Fp8Format::E4M3, Fp8Format::E4M3, DType::BF16},  // forward
      {S::Tensorwise, S::Tensorwise, Fp8Format::E5M2, Fp8Format::E4M3, DType::F32},   // input gradient
      {S::Rows1x128, S::Blocks128, Fp8Format::E4M3, Fp8Format::E4M3, DType::BF16},    // blockwise forward
      {S::Rows1x128, S::Blocks128, Fp8Format::E4M3, Fp8Format::E4M3, DType::F32},
      {S::Rows1x128, S::Rows1x128, Fp8Format::E4M3, Fp8Format::E4M3, DType::F32},     // blockwise weight gradient
  };
  uint64_t seed = 100;
  for (const GemmCase& c : cases) {
    check_gemm(c, 256, 384, 512, seed++);
    check_gemm(c, 272, 160, 400, seed++);  // partial 128-groups in every dimension
    // 3 and 2 blocks of 128 along K: block scales whose inner dimension is padded to 4
    // (fp8_scale_shape); without the padding cuBLASLt read them at the wrong pitch (errors of 5 to
    // 1e32 on one H200).
    check_gemm(c, 256, 160, 384, seed++);
    check_gemm(c, 160, 384, 160, seed++);
  }
}

// The tensorwise forward's fast accumulation (models/fp8_linear.h), at the K of the projections it
// runs in (2048 to 8192).
TEST(GpuFp8Gemm, FastAccumulationStaysNearTheCpuEmulation) {
  TETRA_REQUIRE_GPU();
  using S = ops::Fp8Scaling;
  const GemmCase forward{S::Tensorwise, S::Tensorwise, Fp8Format::E4M3, Fp8Format::E4M3, DType::F32};
  check_gemm(forward, 256, 384, 512, 300, /*fast_accum=*/true);
  check_gemm(forward, 256, 256, 8192, 301, /*fast_accum=*/true);
  check_gemm({S::Tensorwise, S::Tensorwise, Fp8Format::E4M3, Fp8Format::E4M3, DType::BF16}, 272, 160, 4096, 302,
             /*fast_accum=*/true);
}

}  // namespace
}  // namespace tetra::gputest
