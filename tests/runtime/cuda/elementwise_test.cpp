// CUDA elementwise ops (fill, zero, add, scale, copy with fp32 <-> bf16 conversion, copy_columns,
// GELU) against
// the CPU twin: vectorised sizes, odd sizes, misaligned views, every fp32/bf16 mix, aliasing.
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

const DType kFloatTypes[] = {DType::F32, DType::BF16};
// 8·4096 takes the 16-byte path, 1001 the scalar one.
const int64_t kSizes[] = {8 * 4096, 1001};

TEST(GpuElementwise, Fill) {
  TETRA_REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (int64_t n : kSizes) {
      Tensor x = poisoned({n}, dt);
      ops::fill(x, -1.375f);  // exact in bf16
      for (double v : download(x)) ASSERT_EQ(v, -1.375) << name(dt) << " n=" << n;
    }
  }
  Tensor ids = Tensor::empty({77}, DType::I32, gpu());
  ops::fill(ids, 42.0f);
  Tensor h = download_raw(ids);
  for (int64_t i = 0; i < 77; ++i) ASSERT_EQ(h.data<int32_t>()[i], 42);
}

TEST(GpuElementwise, Zero) {
  TETRA_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::I32, DType::U8}) {
    Tensor x = Tensor::empty({1001}, dt, gpu());
    poison(x);
    ops::zero(x);
    Tensor h = download_raw(x);
    const auto* p = static_cast<const unsigned char*>(h.data_ptr());
    for (size_t i = 0; i < h.nbytes(); ++i) ASSERT_EQ(p[i], 0) << dtype_name(dt);
  }
}

TEST(GpuElementwise, AddEveryDtypeMix) {
  TETRA_REQUIRE_GPU();
  Rng rng(1);
  for (int64_t n : kSizes) {
    Tensor a = random_host(rng, {n});
    Tensor b = random_host(rng, a.shape());
    for (DType ta : kFloatTypes) {
      for (DType tb : kFloatTypes) {
        Tensor ra = representable(a, ta), rb = representable(b, tb);
        Tensor ref = Tensor::empty(a.shape(), DType::F32);
        ops::add(ref, ra, rb);
        Tensor da = upload(ra, ta), db = upload(rb, tb);
        for (DType ty : kFloatTypes) {
          Tensor y = poisoned(a.shape(), ty);
          ops::add(y, da, db);
          EXPECT_LE(close_error(y, ref), tol(ty)) << name(ty) << " = " << name(ta) << " + " << name(tb) << ", n=" << n;
        }
      }
    }
    // In place: y aliases a.
    for (DType dt : kFloatTypes) {
      Tensor ra = representable(a, dt), rb = representable(b, dt);
      Tensor ref = Tensor::empty(a.shape(), DType::F32);
      ops::add(ref, ra, rb);
      Tensor da = upload(ra, dt), db = upload(rb, dt);
      ops::add(da, da, db);
      EXPECT_LE(close_error(da, ref), tol(dt)) << "in place, " << name(dt);
    }
  }
}

// copy_columns (one cudaMemcpy2DAsync) against the CPU twin, bit for bit: a block of columns of a
// wide [N, 3·D]-like source into a narrower destination and back, fp32 and bf16, odd widths.
TEST(GpuElementwise, CopyColumnsEqualsTheCpu) {
  TETRA_REQUIRE_GPU();
  Rng rng(9);
  for (DType dt : kFloatTypes) {
    Tensor src = host_as(random_host(rng, {37, 45}), dt), dst = host_as(random_host(rng, {37, 19}), dt);
    Tensor d_src = upload_raw(src), d_dst = upload_raw(dst);
    ops::copy_columns(dst, 3, src, 20, 13);
    ops::copy_columns(d_dst, 3, d_src, 20, 13);
    Tensor got = download_raw(d_dst);
    ASSERT_EQ(std::memcmp(got.data_ptr(), dst.data_ptr(), dst.nbytes()), 0) << name(dt) << " into the narrow";
    ops::copy_columns(src, 31, dst, 2, 14);
    ops::copy_columns(d_src, 31, d_dst, 2, 14);
    got = download_raw(d_src);
    ASSERT_EQ(std::memcmp(got.data_ptr(), src.data_ptr(), src.nbytes()), 0) << name(dt) << " back into the wide";
  }
}

// add_bias against the CPU twin, bit for bit (both add in fp32 and round once), every dtype pair,
// a channel count that is not a multiple of any vector width.
TEST(GpuElementwise, AddBiasEqualsTheCpu) {
  TETRA_REQUIRE_GPU();
  Rng rng(12);
  for (DType ty : kFloatTypes)
    for (DType tb : kFloatTypes) {
      // 75 channels: one element a thread; 88: 16-byte vectors, a row start every 11 of them.
      for (int64_t c : {75, 88}) {
        Tensor y = host_as(random_host(rng, {33, c}), ty), b = host_as(random_host(rng, {c}), tb);
        Tensor d_y = upload_raw(y), d_b = upload_raw(b);
        ops::add_bias(y, b);
        ops::add_bias(d_y, d_b);
        Tensor got = download_raw(d_y);
        EXPECT_EQ(std::memcmp(got.data_ptr(), y.data_ptr(), y.nbytes()), 0) << name(ty) << " += " << name(tb) << ", " << c;
      }
    }
}

TEST(GpuElementwise, AddMisalignedView) {
  TETRA_REQUIRE_GPU();
  Rng rng(2);
  Tensor a = random_host(rng, {4097});
  Tensor b = random_host(rng, {4097});
  Tensor ref = Tensor::empty({4096}, DType::F32);
  ops::add(ref, a.slice_flat(1, {4096}), b.slice_flat(1, {4096}));
  Tensor da = upload(a, DType::F32), db = upload(b, DType::F32);
  Tensor y = poisoned({4097}, DType::F32);
  Tensor yv = y.slice_flat(1, {4096});  // 4-byte aligned only: the scalar path
  ops::add(yv, da.slice_flat(1, {4096}), db.slice_flat(1, {4096}));
  EXPECT_LE(close_error(yv, ref), kTolF32);
}

TEST(GpuElementwise, Scale) {
  TETRA_REQUIRE_GPU();
  Rng rng(3);
  for (int64_t n : kSizes) {
    Tensor x = random_host(rng, {n});
    for (DType dt : kFloatTypes) {
      Tensor rx = representable(x, dt);
      Tensor ref = Tensor::empty({n}, DType::F32);
      ops::copy(ref, rx);
      ops::scale(ref, 0.37f);
      Tensor d = upload(rx, dt);
      ops::scale(d, 0.37f);
      EXPECT_LE(close_error(d, ref), tol(dt)) << name(dt) << " n=" << n;
    }
  }
}

// Conversions round to nearest even exactly as runtime/dtype.h: compared bit for bit.
TEST(GpuCopy, ConversionsMatchHostRounding) {
  TETRA_REQUIRE_GPU();
  Rng rng(4);
  for (int64_t n : kSizes) {
    Tensor x = random_host(rng, {n}, 3.0);
    float* px = x.data<float>();
    px[0] = 1.0f + 0x1.0p-8f;  // a tie: rounds to even (1.0)
    px[1] = 1.0f + 0x1.8p-8f;  // above the tie: rounds up
    Tensor expect_bf16 = host_as(x, DType::BF16);

    Tensor g32 = Tensor::empty({n}, DType::F32, gpu());
    ops::copy(g32, x);  // H2D, same dtype
    Tensor g16 = poisoned({n}, DType::BF16);
    ops::copy(g16, g32);  // D2D fp32 -> bf16
    Tensor h16 = download_raw(g16);
    EXPECT_EQ(std::memcmp(h16.data_ptr(), expect_bf16.data_ptr(), h16.nbytes()), 0) << "device fp32->bf16, n=" << n;

    Tensor g16b = poisoned({n}, DType::BF16);
    ops::copy(g16b, x);  // H2D fp32 -> bf16
    Tensor h16b = download_raw(g16b);
    EXPECT_EQ(std::memcmp(h16b.data_ptr(), expect_bf16.data_ptr(), h16b.nbytes()), 0) << "host fp32 -> device bf16";

    Tensor back = Tensor::empty({n}, DType::BF16);
    ops::copy(back, g32);  // D2H fp32 -> bf16
    EXPECT_EQ(std::memcmp(back.data_ptr(), expect_bf16.data_ptr(), back.nbytes()), 0) << "device fp32 -> host bf16";

    Tensor wide = poisoned({n}, DType::F32);
    ops::copy(wide, g16);  // D2D bf16 -> fp32 (exact)
    EXPECT_EQ(close_error(download(wide), values(representable(x, DType::BF16))), 0.0);

    Tensor host_wide = Tensor::empty({n}, DType::F32);
    ops::copy(host_wide, g16);  // D2H bf16 -> fp32
    EXPECT_EQ(close_error(values(host_wide), values(representable(x, DType::BF16))), 0.0);

    Tensor from_host16 = poisoned({n}, DType::F32);
    ops::copy(from_host16, expect_bf16);  // H2D bf16 -> fp32
    EXPECT_EQ(close_error(download(from_host16), values(representable(x, DType::BF16))), 0.0);
  }
}

TEST(GpuCopy, IntegersAndSameDtype) {
  TETRA_REQUIRE_GPU();
  Rng rng(5);
  Tensor ids = random_ids(rng, {3, 1001}, -5, 50000);
  Tensor d = Tensor::empty({3, 1001}, DType::I32, gpu());
  ops::copy(d, ids);
  Tensor d2 = Tensor::empty({3003}, DType::I32, gpu());
  ops::copy(d2, d);  // D2D, different shape, same count
  Tensor back = Tensor::empty({3003}, DType::I32);
  ops::copy(back, d2);
  EXPECT_EQ(std::memcmp(back.data_ptr(), ids.data_ptr(), ids.nbytes()), 0);
  Tensor f = Tensor::empty({3003}, DType::F32, gpu());
  EXPECT_THROW(ops::copy(f, d), Error);  // int -> float is not a conversion tetra does
}

TEST(GpuGelu, ForwardBackwardAgainstCpu) {
  TETRA_REQUIRE_GPU();
  Rng rng(6);
  for (int64_t n : kSizes) {
    Tensor x = random_host(rng, {n}, 2.0);
    Tensor dy = random_host(rng, {n});
    for (DType dt : kFloatTypes) {
      Tensor rx = representable(x, dt), rdy = representable(dy, dt);
      Tensor y_ref = Tensor::empty({n}, DType::F32), dx_ref = Tensor::empty({n}, DType::F32);
      ops::gelu_forward(y_ref, rx);
      ops::gelu_backward(dx_ref, rdy, rx);

      Tensor gx = upload(rx, dt), gdy = upload(rdy, dt);
      Tensor y = poisoned({n}, dt), dx = poisoned({n}, dt);
      ops::gelu_forward(y, gx);
      ops::gelu_backward(dx, gdy, gx);
      EXPECT_LE(close_error(y, y_ref), tol(dt)) << "forward " << name(dt) << " n=" << n;
      EXPECT_LE(close_error(dx, dx_ref), tol(dt)) << "backward " << name(dt) << " n=" << n;

      ops::gelu_backward(gdy, gdy, gx);  // dx aliases dy
      EXPECT_LE(close_error(gdy, dx_ref), tol(dt)) << "backward in place " << name(dt);
      Tensor y32 = poisoned({n}, DType::F32);
      ops::gelu_forward(y32, gx);  // mixed: bf16 in, fp32 out
      EXPECT_LE(close_error(y32, y_ref), kTolF32) << "forward into fp32 from " << name(dt);
    }
  }
}

}  // namespace
}  // namespace tetra::gputest
