// Causal attention on the GPU against the CPU ops (tetra::cpu::attention_forward/backward, fp32):
// the reference kernels (fp32 and bf16) and cuDNN's fused attention (bf16), forward (out, lse) and
// backward (dqkv), on random inputs (never zeros) with every output poisoned with NaN first.
// bf16 cases hand the CPU the same bf16-rounded inputs. Errors are norm-relative ‖gpu − cpu‖/‖cpu‖:
// at most 1e-5 for fp32, 2e-2 for bf16.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
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
#include "tests/ops/op_test_util.h"

namespace tetra {
namespace {

const Device kGpu = Device::cuda(0);
constexpr double kTolF32 = 1e-5;
constexpr double kTolBF16 = 2e-2;

cudaStream_t gpu_stream() { return static_cast<cudaStream_t>(current_stream(kGpu).handle()); }

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct Dims {
  int64_t B, T, H, D;
  std::string str() const {
    return "[B=" + std::to_string(B) + ", T=" + std::to_string(T) + ", H=" + std::to_string(H) +
           ", D=" + std::to_string(D) + "]";
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

// Random inputs already rounded to what `dtype` holds: qkv[B, T, 3·H·D], dout[B, T, H·D].
struct Inputs {
  Tensor qkv, dout;
};
Inputs make_inputs(const Dims& s, DType dtype, uint64_t seed) {
  Rng rng(seed);
  Tensor qkv = test::random_tensor(rng, {s.B, s.T, 3 * s.H * s.D});
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
  cpu::attention_forward(out, lse, in.qkv, s.H);
  cpu::attention_backward(dqkv, in.dout, in.qkv, out, lse, s.H);
  return {test::to_doubles(out), test::to_doubles(lse), test::to_doubles(dqkv)};
}

using ForwardFn = void (*)(Tensor&, Tensor&, const Tensor&, int64_t);
using BackwardFn = void (*)(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t);

// Forward then backward on the GPU; the backward consumes the GPU forward's out and lse.
Result gpu_attention(const Inputs& in, const Dims& s, DType dtype, ForwardFn forward, BackwardFn backward) {
  Tensor qkv = upload(in.qkv, dtype), dout = upload(in.dout, dtype);
  Tensor out = Tensor::empty({s.B, s.T, s.H * s.D}, dtype, kGpu);
  Tensor lse = Tensor::empty({s.B, s.H, s.T}, DType::F32, kGpu);
  Tensor dqkv = Tensor::empty(qkv.shape(), dtype, kGpu);
  poison(out);
  poison(lse);
  poison(dqkv);
  forward(out, lse, qkv, s.H);
  backward(dqkv, dout, qkv, out, lse, s.H);
  return {download(out), download(lse), download(dqkv)};
}

void expect_close(const Result& gpu, const Result& cpu, double tol, const std::string& what) {
  const double e_out = test::rel_error(gpu.out, cpu.out);
  const double e_lse = test::rel_error(gpu.lse, cpu.lse);
  const double e_dqkv = test::rel_error(gpu.dqkv, cpu.dqkv);
  std::cout << "  " << what << ": rel error out " << e_out << ", lse " << e_lse << ", dqkv " << e_dqkv << "\n";
  EXPECT_LE(e_out, tol) << what << ": out";
  EXPECT_LE(e_lse, tol) << what << ": lse";
  EXPECT_LE(e_dqkv, tol) << what << ": dqkv";
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
  Tensor qkv = Tensor::empty({s.B, s.T, 3 * s.H * s.D}, DType::BF16, kGpu);
  const std::string why = cuda::cudnn_attention_unsupported(qkv, s.H, {});
  ASSERT_EQ(why, "") << "cuDNN fused attention cannot run " << s.str();
  ScopedEnv env("TETRA_ATTENTION", std::nullopt);
  EXPECT_EQ(cuda::attention_impl_for(qkv, s.H, {}), cuda::AttentionImpl::Cudnn);
  std::cout << "  " << s.str() << " forward: " << cuda::cudnn_attention_plan_info(qkv, s.H, false) << "\n"
            << "  " << s.str() << " backward: " << cuda::cudnn_attention_plan_info(qkv, s.H, true) << "\n";
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
    cuda::attention_forward_cudnn(out, lse, qkv, s.H);
    cuda::attention_backward_cudnn(dqkv, dout, qkv, out, lse, s.H);
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
    const std::string info = cuda::cudnn_attention_plan_info(qkv, s.H, backward);
    std::cout << "  " << s.str() << (backward ? " backward: " : " forward: ") << info << "\n";
    EXPECT_EQ(info.find("not yet tuned"), std::string::npos) << info;
  }
  expect_close(gpu_attention(in, s, DType::BF16, cuda::attention_forward_cudnn, cuda::attention_backward_cudnn),
               cpu, kTolBF16, "cuDNN bf16, tuned plan " + s.str());
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
    EXPECT_EQ(cuda::attention_impl_for(qkv, s.H, {}), cuda::AttentionImpl::Reference);
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
    EXPECT_EQ(cuda::attention_impl_for(qkv, s.H, {}), cuda::AttentionImpl::Cudnn);
    EXPECT_EQ(cuda::attention_impl_for(qkv32, s.H, {}), cuda::AttentionImpl::Reference);
  }
  {
    ScopedEnv env("TETRA_ATTENTION", "fastest");
    try {
      cuda::attention_impl_for(qkv, s.H, {});
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
  expect_error([&] { cuda::attention_forward(out, lse_bad, qkv, 2); }, "lse must be [2, 2, 8]");
  expect_error([&] { cuda::attention_forward_cudnn(out, lse_bad, qkv, 2); }, "lse must be [2, 2, 8]");
  expect_error([&] { cuda::attention_forward_reference(out, lse_bad, qkv, 2); }, "lse must be [2, 2, 8]");
  expect_error([&] { cuda::attention_forward(out, lse_bad, qkv, 5); }, "H = 5");
  Tensor qkv32 = Tensor::empty({2, 8, 3 * 2 * 16}, DType::F32, kGpu);
  Tensor out32 = Tensor::empty({2, 8, 2 * 16}, DType::F32, kGpu);
  Tensor lse = Tensor::empty({2, 2, 8}, DType::F32, kGpu);
  expect_error([&] { cuda::attention_forward_cudnn(out32, lse, qkv32, 2); }, "takes bf16 tensors");
  expect_error([&] { cuda::attention_forward(out, lse, qkv32, 2); }, "out must be fp32");
}

}  // namespace
}  // namespace tetra
