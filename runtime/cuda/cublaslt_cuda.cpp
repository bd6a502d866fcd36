// cuBLASLt plumbing (runtime/cuda/cublaslt.h): handles, workspaces, and the per-problem plan cache.
// A plan (operation descriptor, three layouts, the heuristic's best algorithm) is built once per
// distinct problem and reused; its bias / aux pointers are rewritten on every call, under one mutex
// that also guards the handle and workspace tables (the lock is held only while enqueuing).
#include "runtime/cuda/cublaslt.h"

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "runtime/cuda/cuda_check.h"

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
  int ab_type, d_type, epilogue;
  bool has_bias, has_aux;
  uint32_t align_a, align_b, align_d, align_bias, align_aux;
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
    mix(static_cast<uint64_t>(k.device));
    mix((k.ta ? 1u : 0u) | (k.tb ? 2u : 0u) | (k.has_bias ? 4u : 0u) | (k.has_aux ? 8u : 0u));
    for (int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldd, k.aux_ld}) mix(static_cast<uint64_t>(v));
    for (int v : {k.ab_type, k.d_type, k.epilogue}) mix(static_cast<uint64_t>(v));
    for (uint32_t v : {k.align_a, k.align_b, k.align_d, k.align_bias, k.align_aux}) mix(v);
    return static_cast<size_t>(h);
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;
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
};

LtState& lt_state() {
  static LtState* s = new LtState;
  return *s;
}

const char* type_name(cudaDataType_t t) {
  return t == CUDA_R_32F ? "fp32" : (t == CUDA_R_16BF ? "bf16" : "?");
}

std::string describe(const LtProblem& p) {
  std::ostringstream os;
  os << "cuBLASLt matmul (column-major) D[" << p.m << ", " << p.n << "] = op" << (p.trans_a ? "T" : "N") << "(A)·op"
     << (p.trans_b ? "T" : "N") << "(B), k = " << p.k << ", lda/ldb/ldd = " << p.lda << "/" << p.ldb << "/" << p.ldd
     << ", A/B " << type_name(p.ab_type) << ", D " << type_name(p.d_type) << ", epilogue " << static_cast<int>(p.epilogue)
     << ", beta " << p.beta;
  return os.str();
}

// Sets one attribute of an operation descriptor (the problem is described only if that fails).
template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value, const LtProblem& p) {
  TETRA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), describe(p));
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
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(p.d_type), p);
  }
  if (p.aux) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, p);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld, p);
  }
  // Layouts: rows, columns, leading dimension, all column-major.
  TETRA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, p.ab_type, static_cast<uint64_t>(p.trans_a ? p.k : p.m),
                                                static_cast<uint64_t>(p.trans_a ? p.m : p.k), p.lda),
                     what);
  TETRA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, p.ab_type, static_cast<uint64_t>(p.trans_b ? p.n : p.k),
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
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d}};
  for (const auto& [attr, value] : aligns)
    TETRA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value), what);

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->d, plan->d, pref, 1, &result, &returned);
  const bool none = st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && returned == 0);
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
  plan->algo = result.algo;
  plan->supported = true;
  return plan;
}

}  // namespace

bool lt_matmul(const LtProblem& p, Device device, cudaStream_t stream) {
  if (!device.is_cuda() || device.index < 0 || device.index >= kMaxDevices)
    TETRA_FAIL(Device, "lt_matmul: expected a CUDA device, got ", device.str());
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || !p.a || !p.b || !p.d)
    TETRA_FAIL(Internal, "lt_matmul: empty problem or null operand: ", describe(p));
  if (p.aux && (p.aux_ld % 8 != 0 || p.aux_ld < p.m))
    TETRA_FAIL(Internal, "lt_matmul: the GELU aux leading dimension must be a multiple of 8 and ≥ m: ", describe(p));

  PlanKey key{device.index, p.trans_a, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb, p.ldd, p.aux ? p.aux_ld : 0,
              static_cast<int>(p.ab_type), static_cast<int>(p.d_type), static_cast<int>(p.epilogue),
              p.bias != nullptr, p.aux != nullptr, alignment_of(p.a), alignment_of(p.b), alignment_of(p.d),
              p.bias ? alignment_of(p.bias) : 0u, p.aux ? alignment_of(p.aux) : 0u};

  LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mu);
  cublasLtHandle_t& handle = s.handles[device.index];
  if (!handle) TETRA_CUBLAS_CHECK(cublasLtCreate(&handle), "creating the cuBLASLt handle of " + device.str());

  auto it = s.plans.find(key);
  if (it == s.plans.end()) it = s.plans.emplace(key, make_plan(p, key, handle)).first;
  Plan& plan = *it->second;
  if (!plan.supported) return false;

  if (p.bias) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, p);
  if (p.aux) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, p);

  void*& workspace = s.workspaces[{device.index, stream}];
  if (!workspace) TETRA_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));

  const cublasStatus_t st = cublasLtMatmul(handle, plan.desc, &p.alpha, p.a, plan.a, p.b, plan.b, &p.beta, p.d, plan.d,
                                           p.d, plan.d, &plan.algo, workspace, kWorkspaceBytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    TETRA_FAIL(Device, "cublasLtMatmul failed: ", cublasLtGetStatusName(st), " (", cublasLtGetStatusString(st),
               ") for ", describe(p));
  return true;
}

}  // namespace tetra::cuda
