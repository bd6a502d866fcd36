// Causal attention on the GPU against the CPU ops (tetra::cpu::attention_forward/backward, fp32):
// the reference kernels (fp32 and bf16) and cuDNN's fused attention (bf16), forward (out, lse) and
// backward (dqkv), multi-head and grouped-query (H / Hkv = 1, 4, 32), on random inputs (never zeros)
// with every output poisoned with NaN first. bf16 cases hand the CPU the same bf16-rounded inputs.
// Errors: norm-relative ‖gpu − cpu‖/‖cpu‖ at most 1e-5 for fp32, 2e-2 for bf16; and the worst element
// max |gpu − cpu| / (|cpu| + rms(cpu)) at most 1e-4 for fp32, 8e-2 for bf16.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cuda/attention.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/ops.h"
#include "runtime/stream.h"
#include "tests/runtime/op_test_util.h"

namespace tetra {
namespace {

const Device kGpu = Device::cuda(0);
constexpr double kTolF32 = 1e-5;
constexpr double kTolBF16 = 2e-2;
constexpr double kWorstF32 = 1e-4;
constexpr double kWorstBF16 = 8e-2;
// The worst element of a bf16 dqkv from a flash-style backward: P and dS are rounded to bf16 before
// the dQ/dK/dV GEMMs and each gradient sums T terms (dK, dV also over a query-head group), so over
// millions of elements the tail reaches several bf16 units of the element's scale. Measured with
// cuDNN 9.14 on an H200 (2026-12-01): 0.094 at [B 4, T 1024, H 12, D 64], 0.169 at [B 1, T 4096,
// H 32, Hkv 8, D 64], with norm-wise errors of 2.4e-3 and 2.8e-3 (the norm bound stays 2e-2).
constexpr double kWorstBF16Dqkv = 0.25;

cudaStream_t gpu_stream() { return static_cast<cudaStream_t>(current_stream(kGpu).handle()); }

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Hkv = 0 stands for Hkv = H (multi-head).
struct Dims {
  int64_t B, T, H, D, Hkv = 0;
  int64_t kv() const { return Hkv > 0 ? Hkv : H; }
  int64_t width() const { return (H + 2 * kv()) * D; }  // qkv's last dimension
  std::string str() const {
    return "[B=" + std::to_string(B) + ", T=" + std::to_string(T) + ", H=" + std::to_string(H) +
           (kv() != H ? ", Hkv=" + std::to_string(kv()) : std::string()) + ", D=" + std::to_string(D) + "]";
  }
};

// A host fp32 copy of `host` holding what a `dtype` tensor can hold (bf16-rounded for bf16).
Tensor rounded(const Tensor& host, DType dtype) {
  Tensor t = Tensor::empty(host.shape(), DType::F32);
  const float* src = host.data<float>();
  float* dst = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = dtype == DType::BF16 ? bf16_to_float(float_to_bf16(src[i])) : src[i];
  return t;
}

// A device tensor of `dtype` holding the host fp32 values (exactly representable: see rounded()).
Tensor upload(const Tensor& host, DType dtype) {
  Tensor t = Tensor::empty(host.shape(), dtype, kGpu);
  const float* src = host.data<float>();
  if (dtype == DType::F32) {
    cuda_ok(cudaMemcpyAsync(t.data_ptr(), src, t.nbytes(), cudaMemcpyHostToDevice, gpu_stream()), "upload");
  } else {
    std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_bf16(src[i]);
    cuda_ok(cudaMemcpyAsync(t.data_ptr(), bits.data(), t.nbytes(), cudaMemcpyHostToDevice, gpu_stream()), "upload");
    cuda_ok(cudaStreamSynchronize(gpu_stream()), "upload");  // `bits` goes away
  }
  cuda_ok(cudaStreamSynchronize(gpu_stream()), "upload");
  return t;
}

std::vector<double> download(const Tensor& t) {
  cuda_ok(cudaStreamSynchronize(gpu_stream()), "sync before download");
  std::vector<double> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::F32) {
    std::vector<float> host(out.size());
    cuda_ok(cudaMemcpy(host.data(), t.data_ptr(), t.nbytes(), cudaMemcpyDeviceToHost), "download");
    for (size_t i = 0; i < out.size(); ++i) out[i] = host[i];
  } else {
    std::vector<uint16_t> host(out.size());
    cuda_ok(cudaMemcpy(host.data(), t.data_ptr(), t.nbytes(), cudaMemcpyDeviceToHost), "download");
    for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(host[i]);
  }
  return out;
}

// All-ones bytes: NaN in fp32 and in bf16. On the compute stream, so it is ordered before the op.
void poison(Tensor& t) { cuda_ok(cudaMemsetAsync(t.data_ptr(), 0xff, t.nbytes(), gpu_stream()), "poison"); }

// Random inputs already rounded to what `dtype` holds: qkv[B, T, (H + 2·Hkv)·D], dout[B, T, H·D].
struct Inputs {
  Tensor qkv, dout;
};
Inputs make_inputs(const Dims& s, DType dtype, uint64_t seed) {
  Rng rng(seed);
  Tensor qkv = test::random_tensor(rng, {s.B, s.T, s.width()});
  Tensor dout = test::random_tensor(rng, {s.B, s.T, s.H * s.D});
  return {rounded(qkv, dtype), rounded(dout, dtype)};
}

struct Result {
  std::vector<double> out, lse, dqkv;
};

Result cpu_attention(const Inputs& in, const Dims& s) {
  Tensor out = Tensor::empty({s.B, s.T, s.H * s.D}, DType::F32);
  Tensor lse = Tensor::empty({s.B, s.H, s.T}, DType::F32);
  Tensor dqkv = Tensor::empty(in.qkv.shape(), DType::F32);
  cpu::attention_forward(out, lse, in.qkv, s.H, s.kv());
  cpu::attention_backward(dqkv, in.dout, in.qkv, out, lse, s.H, s.kv());
  return {test::to_doubles(out), test::to_doubles(lse), test::to_doubles(dqkv)};
}

using ForwardFn = void (*)(Tensor&, Tensor&, const Tensor&, int64_t, int64_t);
using BackwardFn = void (*)(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t);

// Forward then backward on the GPU; the backward consumes the GPU forward's out and lse.
Result gpu_attention(const Inputs& in, const Dims& s, DType dtype, ForwardFn forward, BackwardFn backward) {
  Tensor qkv = upload(in.qkv, dtype), dout = upload(in.dout, dtype);
  Tensor out = Tensor::empty({s.B, s.T, s.H * s.D}, dtype, kGpu);
  Tensor lse = Tensor::empty({s.B, s.H, s.T}, DType::F32, kGpu);
  Tensor dqkv = Tensor::empty(qkv.shape(), dtype, kGpu);
  poison(out);
  poison(lse);
  poison(dqkv);
  forward(out, lse, qkv, s.H, s.kv());
  backward(dqkv, dout, qkv, out, lse, s.H, s.kv());
  return {download(out), download(lse), download(dqkv)};
}

// max_i |out_i − ref_i| / (|ref_i| + rms(ref)): relative for large elements, on the reference's
// scale near zero; +inf for a non-finite element or unequal sizes.
double worst_element(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double ss = 0.0;
  for (double r : ref) ss += r * r;
  const double rms = ref.empty() ? 0.0 : std::sqrt(ss / static_cast<double>(ref.size()));
  double worst = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    const double den = std::fabs(ref[i]) + rms;
    worst = std::max(worst, den > 0.0 ? std::fabs(out[i] - ref[i]) / den : std::fabs(out[i] - ref[i]));
  }
  return worst;
}

void expect_close(const Result& gpu, const Result& cpu, double tol, const std::string& what) {
  const double worst_tol = tol == kTolF32 ? kWorstF32 : kWorstBF16;
  const double e_out = test::rel_error(gpu.out, cpu.out);
  const double e_lse = test::rel_error(gpu.lse, cpu.lse);
  const double e_dqkv = test::rel_error(gpu.dqkv, cpu.dqkv);
  const double w_out = worst_element(gpu.out, cpu.out);
  const double w_lse = worst_element(gpu.lse, cpu.lse);
  const double w_dqkv = worst_element(gpu.dqkv, cpu.dqkv);
  std::cout << "  " << what << ": rel error out " << e_out << ", lse " << e_lse << ", dqkv " << e_dqkv
            << "; worst element out " << w_out << ", lse " << w_lse << ", dqkv " << w_dqkv << "\n";
  EXPECT_LE(e_out, tol) << what << ": out";
  EXPECT_LE(e_lse, tol) << what << ": lse";
  EXPECT_LE(e_dqkv, tol) << what << ": dqkv";
  EXPECT_LE(w_out, worst_tol) << what << ": worst element of out";
  EXPECT_LE(w_lse, worst_tol) << what << ": worst element of lse";
  const double worst_tol_dqkv = tol == kTolF32 ? kWorstF32 : kWorstBF16Dqkv;
  EXPECT_LE(w_dqkv, worst_tol_dqkv) << what << ": worst element of dqkv";
}

// Sets (or with nullopt unsets) an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// cuDNN must take bf16 tensors of this shape on the test GPU (checked on real device tensors).
void expect_cudnn_supported(const Dims& s) {
  Tensor qkv = Tensor::empty({s.B, s.T, s.width()}, DType::BF16, kGpu);
  const std::string why = cuda::cudnn_attention_unsupported(qkv, s.H, s.kv(), {});
  ASSERT_EQ(why, "") << "cuDNN fused attention cannot run " << s.str();
  ScopedEnv env("TETRA_ATTENTION", std::nullopt);
  EXPECT_EQ(cuda::attention_impl_for(qkv, s.H, s.kv(), {}), cuda::AttentionImpl::Cudnn);
  std::cout << "  " << s.str() << " forward: " << cuda::cudnn_attention_plan_info(qkv, s.H, s.kv(), false) << "\n"
            << "  " << s.str() << " backward: " << cuda::cudnn_attention_plan_info(qkv, s.H, s.kv(), true)
            << "\n";
}

void run_cudnn_case(const Dims& s, uint64_t seed) {
  expect_cudnn_supported(s);
  const Inputs in = make_inputs(s, DType::BF16, seed);
  const Result cpu = cpu_attention(in, s);
  expect_close(gpu_attention(in, s, DType::BF16, cuda::attention_forward_cudnn, cuda::attention_backward_cudnn),
               cpu, kTolBF16, "cuDNN bf16 " + s.str());
  // The same through the op API's dispatch, which must pick cuDNN for bf16.
  ScopedEnv env("TETRA_ATTENTION", std::nullopt);
  expect_close(gpu_attention(in, s, DType::BF16, ops::attention_forward, ops::attention_backward), cpu, kTolBF16,
               "ops:: bf16 " + s.str());
}

// ---------- reference kernels ----------

TEST(AttentionGpu, Fp32MatchesCpu) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  const Dims s{2, 64, 4, 32};
  const Inputs in = make_inputs(s, DType::F32, 1);
  ScopedEnv env("TETRA_ATTENTION", "cudnn");  // fp32 runs the reference kernels under any setting
  expect_close(gpu_attention(in, s, DType::F32, ops::attention_forward, ops::attention_backward),
               cpu_attention(in, s), kTolF32, "ops:: fp32 " + s.str());
}

TEST(AttentionGpu, Fp32OddShapesMatchCpu) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  // Sequence lengths off the 16/32-row tiles; head dims in every bucket (≤32, ≤64, ≤128, ≤256),
  // below the bucket's width too.
  for (const Dims& s : {Dims{3, 33, 2, 8}, Dims{1, 100, 3, 48}, Dims{2, 77, 2, 128}, Dims{1, 40, 1, 256},
                        Dims{1, 1, 2, 16}}) {
    const Inputs in = make_inputs(s, DType::F32, 2);
    expect_close(gpu_attention(in, s, DType::F32, cuda::attention_forward_reference,
                               cuda::attention_backward_reference),
                 cpu_attention(in, s), kTolF32, "reference fp32 " + s.str());
  }
}

TEST(AttentionGpu, Bf16ReferenceMatchesCpu) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  for (const Dims& s : {Dims{2, 100, 4, 64}, Dims{1, 130, 2, 128}}) {
    const Inputs in = make_inputs(s, DType::BF16, 3);
    expect_close(gpu_attention(in, s, DType::BF16, cuda::attention_forward_reference,
                               cuda::attention_backward_reference),
                 cpu_attention(in, s), kTolBF16, "reference bf16 " + s.str());
  }
}

// ---------- cuDNN fused attention ----------

TEST(AttentionGpu, CudnnGpt2SmallShape) {  // GPT-2 124M: 12 heads of 64, T = 1024
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  run_cudnn_case({4, 1024, 12, 64}, 4);
}

TEST(AttentionGpu, CudnnHeadDim128) {  // the 1.3B model: 16 heads of 128, T = 2048
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  run_cudnn_case({1, 2048, 16, 128}, 5);
}

TEST(AttentionGpu, CudnnSequenceNotMultipleOf64) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  run_cudnn_case({2, 100, 4, 64}, 6);
}

TEST(AttentionGpu, CudnnReusesPlanAndWorkspace) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  const Dims s{2, 256, 4, 64};
  const Inputs in = make_inputs(s, DType::BF16, 7);
  Tensor qkv = upload(in.qkv, DType::BF16), dout = upload(in.dout, DType::BF16);
  Tensor out = Tensor::empty({s.B, s.T, s.H * s.D}, DType::BF16, kGpu);
  Tensor lse = Tensor::empty({s.B, s.H, s.T}, DType::F32, kGpu);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::BF16, kGpu);
  auto step = [&] {
    cuda::attention_forward_cudnn(out, lse, qkv, s.H, s.H);
    cuda::attention_backward_cudnn(dqkv, dout, qkv, out, lse, s.H, s.H);
    cuda_ok(cudaStreamSynchronize(gpu_stream()), "step");
  };
  step();  // builds both plans and the workspace
  const size_t after_first = cuda::allocated_bytes(kGpu);
  for (int i = 0; i < 3; ++i) step();
  EXPECT_EQ(cuda::allocated_bytes(kGpu), after_first) << "the cached plans allocate nothing per call";
}

// With engine tuning on, the first call of a shape times every engine config cuDNN offers on that
// call's tensors; the call's outputs and every later call's are the chosen plan's, still within bf16
// tolerance of the CPU.
TEST(AttentionGpu, CudnnEngineTuningKeepsResults) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  struct TuningScope {
    cuda::AttentionTuning saved = cuda::attention_tuning();
    TuningScope() { cuda::set_attention_tuning(cuda::AttentionTuning::On); }
    ~TuningScope() { cuda::set_attention_tuning(saved); }
  } tuning;
  const Dims s{2, 512, 6, 64};  // a shape no other test builds a plan for
  const Inputs in = make_inputs(s, DType::BF16, 9);
  const Result cpu = cpu_attention(in, s);
  expect_close(gpu_attention(in, s, DType::BF16, cuda::attention_forward_cudnn, cuda::attention_backward_cudnn),
               cpu, kTolBF16, "cuDNN bf16, tuning call " + s.str());
  Tensor qkv = upload(in.qkv, DType::BF16);
  for (bool backward : {false, true}) {
    const std::string info = cuda::cudnn_attention_plan_info(qkv, s.H, s.H, backward);
    std::cout << "  " << s.str() << (backward ? " backward: " : " forward: ") << info << "\n";
    EXPECT_EQ(info.find("not yet tuned"), std::string::npos) << info;
  }
  expect_close(gpu_attention(in, s, DType::BF16, cuda::attention_forward_cudnn, cuda::attention_backward_cudnn),
               cpu, kTolBF16, "cuDNN bf16, tuned plan " + s.str());
}

// ---------- grouped-query attention (Llama: H / Hkv = 4; multi-query: Hkv = 1) ----------

TEST(AttentionGpu, GroupedQueryReferenceFp32MatchesCpu) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  // Group sizes 4, 32 (one key/value head), 3 and 2; sequence lengths off the tiles; head dims in
  // several buckets.
  for (const Dims& s : {Dims{2, 100, 8, 64, 2}, Dims{1, 77, 32, 16, 1}, Dims{2, 33, 6, 8, 2},
                        Dims{1, 130, 4, 128, 2}, Dims{1, 1, 4, 16, 1}}) {
    const Inputs in = make_inputs(s, DType::F32, 11);
    expect_close(gpu_attention(in, s, DType::F32, cuda::attention_forward_reference,
                               cuda::attention_backward_reference),
                 cpu_attention(in, s), kTolF32, "reference fp32 " + s.str());
  }
}

TEST(AttentionGpu, GroupedQueryReferenceBf16MatchesCpu) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  for (const Dims& s : {Dims{2, 100, 8, 64, 2}, Dims{1, 64, 32, 64, 1}}) {
    const Inputs in = make_inputs(s, DType::BF16, 12);
    expect_close(gpu_attention(in, s, DType::BF16, cuda::attention_forward_reference,
                               cuda::attention_backward_reference),
                 cpu_attention(in, s), kTolBF16, "reference bf16 " + s.str());
  }
}

// cuDNN with Hkv < H: group sizes 1 (the multi-head plan), 4 and 32 at 32 heads of 64.
TEST(AttentionGpu, CudnnGroupedQueryRatios) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  run_cudnn_case({2, 256, 32, 64, 32}, 13);
  run_cudnn_case({2, 256, 32, 64, 8}, 14);
  run_cudnn_case({2, 256, 32, 64, 1}, 15);
  run_cudnn_case({2, 100, 8, 64, 2}, 16);  // T off the 64/128 tiles
}

// Llama 3.2 1B's attention at its training length: 32 query heads, 8 key/value heads of 64, T = 4096
// (one sequence: the CPU twin takes a few seconds).
TEST(AttentionGpu, CudnnLlama1bShape) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  run_cudnn_case({1, 4096, 32, 64, 8}, 17);
}

// GQA equals multi-head attention over K/V heads repeated to H, on the GPU as on the CPU: cuDNN's
// grouped plan against its own multi-head plan on the repeated tensor (dK, dV summed over groups).
TEST(AttentionGpu, CudnnGroupedEqualsRepeatedHeads) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  const Dims g{2, 512, 16, 64, 4}, m{2, 512, 16, 64};
  const int64_t G = g.H / g.kv();
  const Inputs in = make_inputs(g, DType::BF16, 18);
  Inputs wide{Tensor::empty({g.B, g.T, m.width()}, DType::F32), in.dout};
  const float* src = in.qkv.data<float>();
  float* dst = wide.qkv.data<float>();
  for (int64_t bt = 0; bt < g.B * g.T; ++bt)
    for (int64_t h = 0; h < g.H; ++h)
      for (int64_t e = 0; e < g.D; ++e) {
        const float* s = src + bt * g.width();
        float* d = dst + bt * m.width();
        d[h * g.D + e] = s[h * g.D + e];
        d[(g.H + h) * g.D + e] = s[(g.H + h / G) * g.D + e];
        d[(2 * g.H + h) * g.D + e] = s[(g.H + g.kv() + h / G) * g.D + e];
      }
  const Result grouped =
      gpu_attention(in, g, DType::BF16, cuda::attention_forward_cudnn, cuda::attention_backward_cudnn);
  const Result repeated =
      gpu_attention(wide, m, DType::BF16, cuda::attention_forward_cudnn, cuda::attention_backward_cudnn);
  EXPECT_LE(test::rel_error(grouped.out, repeated.out), 1e-2);
  EXPECT_LE(test::rel_error(grouped.lse, repeated.lse), 1e-3);
  std::vector<double> summed(grouped.dqkv.size(), 0.0);
  for (int64_t bt = 0; bt < g.B * g.T; ++bt)
    for (int64_t h = 0; h < g.H; ++h)
      for (int64_t e = 0; e < g.D; ++e) {
        const double* w = repeated.dqkv.data() + bt * m.width();
        double* o = summed.data() + bt * g.width();
        o[h * g.D + e] = w[h * g.D + e];
        o[(g.H + h / G) * g.D + e] += w[(g.H + h) * g.D + e];
        o[(g.H + g.kv() + h / G) * g.D + e] += w[(2 * g.H + h) * g.D + e];
      }
  EXPECT_LE(test::rel_error(grouped.dqkv, summed), 2e-2);
}

// ---------- dispatch and errors ----------

TEST(AttentionGpu, EnvironmentSelectsImplementation) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  const Dims s{1, 64, 2, 64};
  const Inputs in = make_inputs(s, DType::BF16, 8);
  Tensor qkv = upload(in.qkv, DType::BF16);
  Tensor qkv32 = upload(in.qkv, DType::F32);
  {
    ScopedEnv env("TETRA_ATTENTION", "reference");
    EXPECT_EQ(cuda::attention_impl_for(qkv, s.H, s.H, {}), cuda::AttentionImpl::Reference);
    // Forced to the reference, the op API gives the reference kernels' results bit for bit.
    const Result via_ops = gpu_attention(in, s, DType::BF16, ops::attention_forward, ops::attention_backward);
    const Result direct = gpu_attention(in, s, DType::BF16, cuda::attention_forward_reference,
                                        cuda::attention_backward_reference);
    EXPECT_EQ(via_ops.out, direct.out);
    EXPECT_EQ(via_ops.lse, direct.lse);
    EXPECT_EQ(via_ops.dqkv, direct.dqkv);
  }
  {
    ScopedEnv env("TETRA_ATTENTION", "cudnn");
    EXPECT_EQ(cuda::attention_impl_for(qkv, s.H, s.H, {}), cuda::AttentionImpl::Cudnn);
    EXPECT_EQ(cuda::attention_impl_for(qkv32, s.H, s.H, {}), cuda::AttentionImpl::Reference);
  }
  {
    ScopedEnv env("TETRA_ATTENTION", "fastest");
    try {
      cuda::attention_impl_for(qkv, s.H, s.H, {});
      ADD_FAILURE() << "TETRA_ATTENTION=fastest was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("TETRA_ATTENTION=fastest"), std::string::npos) << e.what();
    }
  }
}

TEST(AttentionGpu, RejectsBadArguments) {
  if (!tetra::cuda_available()) GTEST_SKIP() << "no GPU";
  auto expect_error = [](auto&& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Tensor qkv = Tensor::empty({2, 8, 3 * 2 * 16}, DType::BF16, kGpu);
  Tensor out = Tensor::empty({2, 8, 2 * 16}, DType::BF16, kGpu);
  Tensor lse_bad = Tensor::empty({2, 8, 2}, DType::F32, kGpu);
  expect_error([&] { cuda::attention_forward(out, lse_bad, qkv, 2, 2); }, "lse must be [2, 2, 8]");
  expect_error([&] { cuda::attention_forward_cudnn(out, lse_bad, qkv, 2, 2); }, "lse must be [2, 2, 8]");
  expect_error([&] { cuda::attention_forward_reference(out, lse_bad, qkv, 2, 2); }, "lse must be [2, 2, 8]");
  expect_error([&] { cuda::attention_forward(out, lse_bad, qkv, 5, 5); }, "H = 5");
  expect_error([&] { cuda::attention_forward(out, lse_bad, qkv, 2, 3); }, "must divide n_heads = 2");
  Tensor qkv32 = Tensor::empty({2, 8, 3 * 2 * 16}, DType::F32, kGpu);
  Tensor out32 = Tensor::empty({2, 8, 2 * 16}, DType::F32, kGpu);
  Tensor lse = Tensor::empty({2, 2, 8}, DType::F32, kGpu);
  expect_error([&] { cuda::attention_forward_cudnn(out32, lse, qkv32, 2, 2); }, "takes bf16 tensors");
  expect_error([&] { cuda::attention_forward(out, lse, qkv32, 2, 2); }, "out must be fp32");
}

}  // namespace
}  // namespace tetra
