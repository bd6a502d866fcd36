// cuBLASLt plumbing (runtime/cuda/cublaslt.h): handles, workspaces, the per-problem plan cache and
// the autotuner. A plan (operation descriptor, three layouts, the heuristic's candidate algorithms,
// the chosen one) is built once per distinct problem and reused; its bias / aux pointers are
// rewritten on every call, under one mutex that also guards the handle and workspace tables (the
// lock is held while enqueuing, and while a problem is being tuned).
#include "runtime/cuda/cublaslt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/cuda/candidate_timing.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_context.h"

#define TETRA_CUBLAS_CHECK(call, what)                                                                  \
  do {                                                                                                  \
    cublasStatus_t tetra_st_ = (call);                                                                  \
    if (tetra_st_ != CUBLAS_STATUS_SUCCESS)                                                             \
      TETRA_FAIL(Device, #call " failed: ", cublasLtGetStatusName(tetra_st_), " (",                    \
                 cublasLtGetStatusString(tetra_st_), ") for ", what);                                   \
  } while (0)

namespace tetra::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kMaxDevices = 64;
// Tuning: how many of the heuristic's algorithms are timed, and how (runtime/cuda/candidate_timing.h:
// 2 warm-up launches each, 3 interleaved rounds of ≈ 0.5 ms, the best round counts).
constexpr int kCandidates = 16;
constexpr CandidateTiming kTiming{/*warmups=*/2, /*rounds=*/3, /*round_target_ms=*/0.5f, /*max_reps=*/50};
// Another algorithm replaces the heuristic's first choice only when it is at least this much faster.
constexpr float kSwitchMargin = 0.99f;

// ---------- tuning mode ----------

GemmTuning mode_from_env() {
  const char* v = std::getenv("TETRA_GEMM_TUNE");
  if (!v || !*v || std::strcmp(v, "1") == 0 || std::strcmp(v, "on") == 0) return GemmTuning::On;
  if (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0) return GemmTuning::Off;
  if (std::strcmp(v, "verbose") == 0) return GemmTuning::Verbose;
  TETRA_FAIL(Config, "TETRA_GEMM_TUNE='", v, "' is not a GEMM tuning mode: use 0 (off), 1 (on, the default) or verbose");
}

TuningMode<GemmTuning> g_mode{&mode_from_env};

// ---------- plans ----------

// Largest power of two (≤ 256) dividing the address: what the heuristic may assume about it.
uint32_t alignment_of(const void* p) {
  if (!p) return 256;
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a >>= 1;
  return a;
}

struct PlanKey {
  int device;
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldd, aux_ld;
  int ab_type, d_type, epilogue, b_type, a_scale_mode, b_scale_mode, bias_type;
  bool has_bias, has_aux, beta_nonzero, c_is_d;
  uint32_t align_a, align_b, align_c, align_d, align_bias, align_aux;
  bool fast_accum;
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
    mix(static_cast<uint64_t>(k.device));
    mix((k.ta ? 1u : 0u) | (k.tb ? 2u : 0u) | (k.has_bias ? 4u : 0u) | (k.has_aux ? 8u : 0u) |
        (k.beta_nonzero ? 16u : 0u) | (k.c_is_d ? 32u : 0u) | (k.fast_accum ? 64u : 0u));
    for (int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldd, k.aux_ld}) mix(static_cast<uint64_t>(v));
    for (int v : {k.ab_type, k.d_type, k.epilogue, k.b_type, k.a_scale_mode, k.b_scale_mode, k.bias_type})
      mix(static_cast<uint64_t>(v));
    for (uint32_t v : {k.align_a, k.align_b, k.align_c, k.align_d, k.align_bias, k.align_aux}) mix(v);
    return static_cast<size_t>(h);
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's candidates, best first
  bool supported = false;
  bool tuned = false;  // `best` holds the measured choice
  int best = 0;
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// Lives as long as the process: handles and workspaces are never destroyed (tearing them down from
// a static destructor, after the CUDA runtime may have unloaded, fails).
struct LtState {
  std::mutex mu;
  cublasLtHandle_t handles[kMaxDevices] = {};
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
  bool warned_capture = false;
};

LtState& lt_state() {
  static LtState* s = new LtState;
  return *s;
}

const char* type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return "fp32";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_8F_E4M3: return "fp8_e4m3";
    case CUDA_R_8F_E5M2: return "fp8_e5m2";
    default: return "?";
  }
}

size_t type_size(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU: return "GELU";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_RELU: return "RELU";
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "RELU_BIAS";
    case CUBLASLT_EPILOGUE_RELU_AUX: return "RELU_AUX";
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return "RELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DRELU: return "DRELU";
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return "DRELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADA: return "BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return "?";
  }
}

// Epilogues whose bias pointer is an output (a bias gradient) and its length.
bool writes_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB || e == CUBLASLT_EPILOGUE_DRELU_BGRAD ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
int64_t bias_length(const LtProblem& p) { return p.epilogue == CUBLASLT_EPILOGUE_BGRADB ? p.n : p.m; }
// Epilogues whose aux buffer is an output (the forward's pre-activation); DGELU/DRELU read theirs.
bool writes_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_RELU_AUX ||
         e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
}

bool c_is_d(const LtProblem& p) { return p.c == nullptr || p.c == p.d; }

std::string describe(const LtProblem& p) {
  std::ostringstream os;
  os << "cuBLASLt matmul (column-major) D[" << p.m << ", " << p.n << "] = op" << (p.trans_a ? "T" : "N") << "(A)·op"
     << (p.trans_b ? "T" : "N") << "(B), k = " << p.k << ", lda/ldb/ldd = " << p.lda << "/" << p.ldb << "/" << p.ldd
     << ", A/B " << type_name(p.ab_type) << "/" << type_name(p.b_type()) << ", D " << type_name(p.d_type) << ", epilogue " << epilogue_name(p.epilogue)
     << ", beta " << p.beta << (p.beta != 0.0f && !c_is_d(p) ? " (C separate from D)" : "")
     << (p.fp8() && p.fast_accum ? ", fast accumulation" : "");
  return os.str();
}

// Sets one attribute of an operation descriptor (the problem is described only if that fails).
template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value, const LtProblem& p) {
  TETRA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), describe(p));
}

// FP8: the scale pointers (set again per call) and, with modes, the scale modes and the
// accumulation: fast where the problem asks for it, else partial sums promoted to fp32 (as the
// block-scaled modes require).
void set_fp8_scales(cublasLtMatmulDesc_t desc, const LtProblem& p, bool modes) {
  set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(p.a_scale), p);
  set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(p.b_scale), p);
  if (!modes) return;
  set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, p.a_scale_mode, p);
  set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, p.b_scale_mode, p);
  set_desc(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(p.fast_accum ? 1 : 0), p);
}

std::unique_ptr<Plan> make_plan(const LtProblem& p, const PlanKey& key, cublasLtHandle_t handle) {
  const std::string what = describe(p);
  auto plan = std::make_unique<Plan>();
  TETRA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
  const cublasOperation_t op_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a, p);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b, p);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue, p);
  if (p.bias) {
    // The heuristic reads the pointer's alignment; the pointer itself is set again per call.
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, p);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(p.bias_lt_type()), p);
  }
  if (p.aux) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, p);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld, p);
  }
  if (p.fp8()) set_fp8_scales(plan->desc, p, /*modes=*/true);
  // Layouts: rows, columns, leading dimension, all column-major. C uses D's layout.
  TETRA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, p.ab_type, static_cast<uint64_t>(p.trans_a ? p.k : p.m),
                                                static_cast<uint64_t>(p.trans_a ? p.m : p.k), p.lda),
                     what);
  TETRA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, p.b_type(), static_cast<uint64_t>(p.trans_b ? p.n : p.k),
                                                static_cast<uint64_t>(p.trans_b ? p.k : p.n), p.ldb),
                     what);
  TETRA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, p.d_type, static_cast<uint64_t>(p.m),
                                                static_cast<uint64_t>(p.n), p.ldd),
                     what);

  cublasLtMatmulPreference_t pref = nullptr;
  TETRA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref), what);
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      pref_guard(pref, &cublasLtMatmulPreferenceDestroy);
  const uint64_t ws = kWorkspaceBytes;
  TETRA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                     what);
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d}};
  for (const auto& [attr, value] : aligns)
    TETRA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value), what);

  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                                           pref, kCandidates, results, &returned);
  if (st == CUBLAS_STATUS_SUCCESS) {
    for (int i = 0; i < returned; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= kWorkspaceBytes)
        plan->algos.push_back(results[i].algo);
  }
  const bool none = st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && plan->algos.empty());
  // A fused epilogue cuBLASLt rejects for any reason is not fatal: the caller has an unfused path.
  // Say so once per problem (plans are cached), since the unfused path costs extra passes.
  if (none || (st != CUBLAS_STATUS_SUCCESS && p.epilogue != CUBLASLT_EPILOGUE_DEFAULT)) {
    if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
      std::fprintf(stderr, "tetra: cuBLASLt has no fused algorithm (%s) for %s; using the unfused path\n",
                   cublasLtGetStatusName(st), what.c_str());
    plan->supported = false;
    return plan;
  }
  TETRA_CUBLAS_CHECK(st, what);
  plan->supported = true;
  return plan;
}

// ---------- tuning ----------

// Device memory from the stream-ordered pool, given back when the scope ends.
class Scratch {
 public:
  Scratch(size_t bytes, Device device) : bytes_(bytes), device_(device) { ptr_ = allocate(bytes, device); }
  ~Scratch() { release(ptr_, bytes_, device_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
  Device device_;
};

// Times every candidate of `plan` on p's A and B with scratch outputs and sets plan.best. The
// caller's D (and C, aux, bias gradient) are never written: D, and C when it is D, become a scratch
// copy of D; a separate C is only read; written aux and bias-gradient buffers get scratch twins.
// Leaves the descriptor's bias / aux pointers at the scratch ones (every call sets its own).
void tune(Plan& plan, const LtProblem& p, cublasLtHandle_t handle, void* workspace, Device device,
          cudaStream_t stream, bool verbose) {
  plan.tuned = true;  // whatever happens below, the problem is not tuned again
  plan.best = 0;
  const int count = static_cast<int>(plan.algos.size());
  if (count < 2) {
    if (verbose)
      std::fprintf(stderr, "tetra: GEMM m=%lld n=%lld k=%lld epilogue %s: one algorithm, nothing to tune\n",
                   static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k),
                   epilogue_name(p.epilogue));
    return;
  }

  const bool in_place = c_is_d(p);
  // D spans ldd·(n - 1) + m elements; the scratch is allocated as ldd·n.
  const size_t d_bytes = static_cast<size_t>(p.ldd) * static_cast<size_t>(p.n) * type_size(p.d_type);
  const size_t d_span = (static_cast<size_t>(p.ldd) * static_cast<size_t>(p.n - 1) + static_cast<size_t>(p.m)) *
                        type_size(p.d_type);
  std::unique_ptr<Scratch> d, aux, bias;
  try {
    d = std::make_unique<Scratch>(d_bytes, device);
    if (p.aux && writes_aux(p.epilogue))
      aux = std::make_unique<Scratch>(static_cast<size_t>(p.aux_ld) * static_cast<size_t>(p.n) * type_size(p.d_type),
                                      device);
    if (p.bias && writes_bias(p.epilogue))
      bias = std::make_unique<Scratch>(static_cast<size_t>(bias_length(p)) * type_size(p.d_type), device);
  } catch (const Error& e) {
    if (verbose)
      std::fprintf(stderr, "tetra: GEMM tuning skipped (no memory for scratch outputs: %s) for %s\n", e.what(),
                   describe(p).c_str());
    return;
  }
  // The pool hands memory out in the order of the device's current stream; run after it.
  const cudaStream_t alloc_stream = stream_of(device);
  if (alloc_stream != stream) TETRA_CUDA_CHECK(cudaStreamSynchronize(alloc_stream));
  // Accumulating in place: the scratch D starts as a copy of D (realistic values; beta·C is read).
  if (p.beta != 0.0f && in_place)
    TETRA_CUDA_CHECK(cudaMemcpyAsync(d->get(), p.d, d_span, cudaMemcpyDeviceToDevice, stream));
  void* out = d->get();
  const void* c = p.beta != 0.0f && !in_place ? p.c : out;
  if (aux) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux->get(), p);
  else if (p.aux) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, p);
  if (bias) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias->get()), p);
  else if (p.bias) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, p);

  auto launch = [&](int i) {
    return cublasLtMatmul(handle, plan.desc, &p.alpha, p.a, plan.a, p.b, plan.b, &p.beta, c, plan.d, out, plan.d,
                          &plan.algos[i], workspace, kWorkspaceBytes, stream) == CUBLAS_STATUS_SUCCESS;
  };
  // An algorithm that fails to launch is never chosen; if none launches, the call reports it.
  const std::vector<float> best_ms = time_candidates(count, stream, kTiming, launch);
  const int best = pick_candidate(best_ms, kSwitchMargin);
  if (best < 0) return;
  plan.best = best;
  if (verbose) {
    const float heuristic = std::isfinite(best_ms[0]) ? best_ms[0] : std::numeric_limits<float>::quiet_NaN();
    std::fprintf(stderr,
                 "tetra: GEMM tuned m=%lld n=%lld k=%lld op%c%c %s->%s epilogue %s beta %g%s: heuristic %.4f ms, "
                 "best %.4f ms (candidate %d of %d, %.2fx)\n",
                 static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k),
                 p.trans_a ? 'T' : 'N', p.trans_b ? 'T' : 'N', type_name(p.ab_type), type_name(p.d_type),
                 epilogue_name(p.epilogue), static_cast<double>(p.beta),
                 p.beta != 0.0f && !in_place ? " (C separate)" : "",
                 static_cast<double>(heuristic), static_cast<double>(best_ms[best]), best + 1, count,
                 static_cast<double>(heuristic / best_ms[best]));
  }
}

}  // namespace

GemmTuning gemm_tuning() { return g_mode.get(); }

void set_gemm_tuning(GemmTuning mode) { g_mode.set(mode); }

bool lt_matmul(const LtProblem& p, Device device, cudaStream_t stream) {
  if (!device.is_cuda() || device.index < 0 || device.index >= kMaxDevices)
    TETRA_FAIL(Device, "lt_matmul: expected a CUDA device, got ", device.str());
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || !p.a || !p.b || !p.d)
    TETRA_FAIL(Internal, "lt_matmul: empty problem or null operand: ", describe(p));
  if (p.aux && (p.aux_ld % 8 != 0 || p.aux_ld < p.m))
    TETRA_FAIL(Internal, "lt_matmul: the GELU aux leading dimension must be a multiple of 8 and ≥ m: ", describe(p));
  const GemmTuning mode = gemm_tuning();

  const bool beta_nonzero = p.beta != 0.0f;
  const bool in_place = !beta_nonzero || c_is_d(p);  // with beta = 0, C is never read: call it D
  const void* c = in_place ? p.d : p.c;
  PlanKey key{device.index, p.trans_a, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb, p.ldd, p.aux ? p.aux_ld : 0,
              static_cast<int>(p.ab_type), static_cast<int>(p.d_type), static_cast<int>(p.epilogue),
              static_cast<int>(p.b_type()), p.fp8() ? p.a_scale_mode : -1, p.fp8() ? p.b_scale_mode : -1,
              p.bias ? static_cast<int>(p.bias_lt_type()) : -1,
              p.bias != nullptr, p.aux != nullptr, beta_nonzero, in_place, alignment_of(p.a), alignment_of(p.b),
              alignment_of(c), alignment_of(p.d), p.bias ? alignment_of(p.bias) : 0u, p.aux ? alignment_of(p.aux) : 0u,
              p.fp8() && p.fast_accum};

  LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mu);
  cublasLtHandle_t& handle = s.handles[device.index];
  if (!handle) TETRA_CUBLAS_CHECK(cublasLtCreate(&handle), "creating the cuBLASLt handle of " + device.str());

  auto it = s.plans.find(key);
  if (it == s.plans.end()) it = s.plans.emplace(key, make_plan(p, key, handle)).first;
  Plan& plan = *it->second;
  if (!plan.supported) return false;

  void*& workspace = s.workspaces[{device.index, stream}];
  if (!workspace) TETRA_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));

  if (p.fp8()) set_fp8_scales(plan.desc, p, /*modes=*/false);
  int choice = 0;
  if (mode != GemmTuning::Off) {
    if (!plan.tuned) {
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      TETRA_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
      if (capture == cudaStreamCaptureStatusNone) {
        tune(plan, p, handle, workspace, device, stream, mode == GemmTuning::Verbose);
      } else if (!s.warned_capture) {
        s.warned_capture = true;
        std::fprintf(stderr,
                     "tetra: a GEMM seen for the first time is being captured into a CUDA graph; it runs the "
                     "heuristic's algorithm untuned. Capture graphs after one warm-up step (or set TETRA_GEMM_TUNE=0).\n");
      }
    }
    if (plan.tuned) choice = plan.best;
  }

  if (p.bias) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, p);
  if (p.aux) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, p);

  const cublasStatus_t st = cublasLtMatmul(handle, plan.desc, &p.alpha, p.a, plan.a, p.b, plan.b, &p.beta, c, plan.d,
                                           p.d, plan.d, &plan.algos[choice], workspace, kWorkspaceBytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    TETRA_FAIL(Device, "cublasLtMatmul failed: ", cublasLtGetStatusName(st), " (", cublasLtGetStatusString(st),
               ") for ", describe(p));
  return true;
}

}  // namespace tetra::cuda
