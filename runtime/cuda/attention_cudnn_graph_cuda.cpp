// cuDNN backend-API plumbing for the SDPA graphs: descriptors, nodes, plan selection, execution.
// Attribute sequences follow cuDNN's documented backend descriptors (and its frontend's lowering):
//   tensor:    DATA_TYPE, DIMENSIONS, STRIDES, UNIQUE_ID, BYTE_ALIGNMENT [, IS_VIRTUAL] [, IS_BY_VALUE]
//   pointwise: POINTWISE_DESCRIPTOR(MODE, MATH_PREC [, AXIS]) + XDESC, [BDESC], [TDESC], YDESC, ALPHA1/2
//   reduction: REDUCTION_DESCRIPTOR(COMP_TYPE, OPERATOR) + XDESC, YDESC
//   matmul:    MATMUL_DESCRIPTOR(COMP_TYPE) + ADESC, BDESC, CDESC [, GEMM_{M,N,K}_OVERRIDE_DESC]
//   reshape:   XDESC, YDESC
//   graph:     OPS, HANDLE → heuristics (OPERATION_GRAPH, MODE) → engine configs → plan (HANDLE, ENGINE_CONFIG)
#include "runtime/cuda/attention_cudnn_graph.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "runtime/error.h"

namespace tetra::cuda::cudnn_graph {

namespace {

std::string last_error_message() {
  char buf[1024] = {0};
  cudnnGetLastErrorString(buf, sizeof buf);
  return buf[0] ? std::string(buf) : std::string("(no message)");
}

// "CUDNN_STATUS_NOT_SUPPORTED: <cuDNN's last error message>"
std::string status_text(cudnnStatus_t status) {
  return std::string(cudnnGetErrorString(status)) + ": " + last_error_message();
}

const char* heur_mode_name(cudnnBackendHeurMode_t mode) {
  switch (mode) {
    case CUDNN_HEUR_MODE_A: return "mode A";
    case CUDNN_HEUR_MODE_INSTANT: return "instant mode";
    case CUDNN_HEUR_MODE_B: return "mode B";
    case CUDNN_HEUR_MODE_FALLBACK: return "fallback mode";
    default: return "unknown mode";
  }
}

std::string dims_str(const Dims& d) {
  std::ostringstream os;
  os << "[" << d[0] << ", " << d[1] << ", " << d[2] << ", " << d[3] << "]";
  return os.str();
}

// Global engine index of an engine config, or -1 (only used to describe the chosen plan).
int64_t engine_index(cudnnBackendDescriptor_t config) {
  cudnnBackendDescriptor_t engine = nullptr;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) return -1;
  int64_t n = 0, index = -1;
  if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) !=
          CUDNN_STATUS_SUCCESS ||
      cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index) !=
          CUDNN_STATUS_SUCCESS)
    index = -1;
  cudnnBackendDestroyDescriptor(engine);
  return index;
}

}  // namespace

void check(cudnnStatus_t status, const std::string& what, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  detail::throw_error(ErrorKind::Device, file, line, detail::concat(what, " failed: ", status_text(status)));
}

int64_t runtime_version() { return static_cast<int64_t>(cudnnGetVersion()); }

std::string version_string(int64_t v) {
  return detail::concat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

// ---------- Descriptor ----------

Descriptor::Descriptor(cudnnBackendDescriptorType_t type, std::string label) : label_(std::move(label)) {
  check(cudnnBackendCreateDescriptor(type, &desc_), "cudnnBackendCreateDescriptor for " + label_, __FILE__,
        __LINE__);
}

Descriptor::~Descriptor() {
  if (desc_) cudnnBackendDestroyDescriptor(desc_);
}

void Descriptor::set(cudnnBackendAttributeName_t name, const char* attr, cudnnBackendAttributeType_t type,
                     int64_t count, const void* values) {
  check(cudnnBackendSetAttribute(desc_, name, type, count, values),
        detail::concat("cudnnBackendSetAttribute(", attr, ") on ", label_), __FILE__, __LINE__);
}

void Descriptor::finalize() {
  check(cudnnBackendFinalize(desc_), "cudnnBackendFinalize on " + label_, __FILE__, __LINE__);
}

cudnnStatus_t Descriptor::try_finalize() { return cudnnBackendFinalize(desc_); }

// ---------- GraphBuilder: tensors ----------

GraphBuilder::GraphBuilder(cudnnHandle_t handle, std::string graph_name)
    : handle_(handle), name_(std::move(graph_name)) {}

Descriptor& GraphBuilder::own(cudnnBackendDescriptorType_t type, const std::string& label) {
  owned_.push_back(std::make_shared<Descriptor>(type, name_ + ": " + label));
  return *owned_.back();
}

TensorRef GraphBuilder::make_tensor(const std::string& name, int64_t uid, cudnnDataType_t dtype, Dims dims,
                                    Dims strides, bool is_virtual, bool by_value) {
  Descriptor& t = own(CUDNN_BACKEND_TENSOR_DESCRIPTOR,
                      detail::concat("tensor '", name, "' (uid ", uid, ", dims ", dims_str(dims), ", strides ",
                                     dims_str(strides), ")"));
  const int64_t alignment = 16;  // bytes; tensor-core engines need 16-byte aligned operands
  TETRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype);
  TETRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  TETRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  TETRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  TETRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  if (is_virtual) {
    const bool yes = true;
    TETRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  if (by_value) {
    const bool yes = true;
    TETRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  t.finalize();
  return TensorRef{t.get(), uid, dtype, dims, strides, name};
}

TensorRef GraphBuilder::device_tensor(const std::string& name, int64_t uid, cudnnDataType_t dtype, Dims dims,
                                      Dims strides) {
  TETRA_CHECK(uid > 0 && uid < 1000, "device tensor uids are 1..999 (virtual ones start at 1000), got ", uid);
  return make_tensor(name, uid, dtype, dims, strides, false, false);
}

TensorRef GraphBuilder::scalar(const std::string& name, int64_t uid, cudnnDataType_t dtype) {
  TETRA_CHECK(uid > 0 && uid < 1000, "scalar uids are 1..999 (virtual ones start at 1000), got ", uid);
  return make_tensor(name, uid, dtype, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
}

TensorRef GraphBuilder::virtual_tensor(const std::string& name, cudnnDataType_t dtype, Dims dims, Dims strides) {
  return make_tensor(name, next_virtual_uid_++, dtype, dims, strides, true, false);
}

// ---------- GraphBuilder: operations ----------

void GraphBuilder::add_operation(Descriptor& op) {
  op.finalize();
  ops_.push_back(op.get());
}

Descriptor& GraphBuilder::pointwise_desc(const std::string& name, cudnnPointwiseMode_t mode,
                                         cudnnDataType_t math_prec) {
  Descriptor& pw = own(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor of '" + name + "'");
  TETRA_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  TETRA_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math_prec);
  return pw;
}

void GraphBuilder::pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t math_prec,
                             const TensorRef& x, const TensorRef& y) {
  Descriptor& pw = pointwise_desc(name, mode, math_prec);
  pw.finalize();
  Descriptor& op = own(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op '" + name + "'");
  const cudnnBackendDescriptor_t pwd = pw.get();
  const float one = 1.0f;
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  add_operation(op);
}

void GraphBuilder::pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t math_prec,
                             const TensorRef& x, const TensorRef& b, const TensorRef& y) {
  Descriptor& pw = pointwise_desc(name, mode, math_prec);
  pw.finalize();
  Descriptor& op = own(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op '" + name + "'");
  const cudnnBackendDescriptor_t pwd = pw.get();
  const float one = 1.0f;
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  add_operation(op);
}

void GraphBuilder::pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t math_prec,
                             const TensorRef& x, const TensorRef& b, const TensorRef& t, const TensorRef& y) {
  Descriptor& pw = pointwise_desc(name, mode, math_prec);
  pw.finalize();
  Descriptor& op = own(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op '" + name + "'");
  const cudnnBackendDescriptor_t pwd = pw.get();
  const float one = 1.0f;
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  add_operation(op);
}

void GraphBuilder::gen_index(const std::string& name, int64_t axis, cudnnDataType_t math_prec, const TensorRef& x,
                             const TensorRef& y) {
  Descriptor& pw = pointwise_desc(name, CUDNN_POINTWISE_GEN_INDEX, math_prec);
  TETRA_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  pw.finalize();
  Descriptor& op = own(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op '" + name + "'");
  const cudnnBackendDescriptor_t pwd = pw.get();
  const float one = 1.0f;
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  add_operation(op);
}

void GraphBuilder::reduction(const std::string& name, cudnnReduceTensorOp_t reduce_op, const TensorRef& x,
                             const TensorRef& y) {
  Descriptor& rd = own(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction descriptor of '" + name + "'");
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  TETRA_CUDNN_SET(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  TETRA_CUDNN_SET(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce_op);
  rd.finalize();
  Descriptor& op = own(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op '" + name + "'");
  const cudnnBackendDescriptor_t rdd = rd.get();
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rdd);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc);
  add_operation(op);
}

void GraphBuilder::matmul(const std::string& name, const TensorRef& a, const TensorRef& b, const TensorRef& c,
                          const TensorRef* m_override, const TensorRef* n_override, const TensorRef* k_override) {
  // c[.., M, N] = a[.., M, K] · b[.., K, N]: the shapes must agree before cuDNN sees them. b's second
  // dimension may be a divisor of c's: each of its slices serves c.dims[1] / b.dims[1] consecutive
  // slices of c (grouped-query attention's key/value heads).
  const bool b_heads_fit = b.dims[1] == c.dims[1] || (b.dims[1] > 0 && c.dims[1] % b.dims[1] == 0);
  TETRA_CHECK(a.dims[0] == c.dims[0] && a.dims[1] == c.dims[1] && b.dims[0] == c.dims[0] && b_heads_fit &&
                  a.dims[2] == c.dims[2] && b.dims[3] == c.dims[3] && a.dims[3] == b.dims[2],
              name_, ": matmul '", name, "': ", a.name, " ", dims_str(a.dims), " · ", b.name, " ", dims_str(b.dims),
              " → ", c.name, " ", dims_str(c.dims), " do not fit");
  Descriptor& md = own(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul descriptor of '" + name + "'");
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  TETRA_CUDNN_SET(md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  md.finalize();
  Descriptor& op = own(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op '" + name + "'");
  const cudnnBackendDescriptor_t mdd = md.get();
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mdd);
  if (m_override)
    TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                    &m_override->desc);
  if (n_override)
    TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                    &n_override->desc);
  if (k_override)
    TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                    &k_override->desc);
  add_operation(op);
}

void GraphBuilder::reshape(const std::string& name, const TensorRef& x, const TensorRef& y) {
  Descriptor& op = own(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op '" + name + "'");
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc);
  TETRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc);
  add_operation(op);
}

// ---------- plan selection ----------

std::vector<Plan> GraphBuilder::build_plans(size_t max_plans) {
  Descriptor& graph = own(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  const int64_t n_ops = static_cast<int64_t>(ops_.size());
  TETRA_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops_.data());
  TETRA_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
  graph.finalize();
  const cudnnBackendDescriptor_t graph_desc = graph.get();
  const std::vector<std::shared_ptr<Descriptor>> graph_owned = std::move(owned_);  // shared by every plan
  owned_.clear();
  ops_.clear();

  std::vector<Plan> plans;
  std::vector<int64_t> engines_taken;
  std::ostringstream report;  // what each heuristics mode answered, for the error below
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    if (plans.size() >= max_plans) break;
    const char* mode_name = heur_mode_name(mode);
    auto heur = std::make_shared<Descriptor>(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
                                             name_ + ": engine heuristics (" + mode_name + ")");
    TETRA_CUDNN_SET(*heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph_desc);
    TETRA_CUDNN_SET(*heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (cudnnStatus_t st = heur->try_finalize(); st != CUDNN_STATUS_SUCCESS) {
      report << "\n  heuristics " << mode_name << ": " << status_text(st);
      continue;
    }
    int64_t count = 0;
    TETRA_CUDNN_CHECK(
        cudnnBackendGetAttribute(heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr));
    if (count <= 0) {
      report << "\n  heuristics " << mode_name << ": no engine config";
      continue;
    }
    std::vector<std::shared_ptr<Descriptor>> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      const std::string label = detail::concat(name_, ": engine config ", i, " (", mode_name, ")");
      configs.push_back(std::make_shared<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, label));
      raw.push_back(configs.back()->get());
    }
    int64_t returned = 0;
    TETRA_CUDNN_CHECK(cudnnBackendGetAttribute(heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, raw.data()));
    std::string first_failure;
    int finalized = 0;
    for (int64_t i = 0; i < returned && i < count && plans.size() < max_plans; ++i) {
      const int64_t engine = engine_index(raw[i]);
      if (mode == CUDNN_HEUR_MODE_FALLBACK && engine >= 0 &&
          std::find(engines_taken.begin(), engines_taken.end(), engine) != engines_taken.end())
        continue;
      auto plan = std::make_shared<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                                               detail::concat(name_, ": execution plan of engine config ", i, " (",
                                                              mode_name, ")"));
      TETRA_CUDNN_SET(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
      TETRA_CUDNN_SET(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
      if (cudnnStatus_t st = plan->try_finalize(); st != CUDNN_STATUS_SUCCESS) {
        if (first_failure.empty()) first_failure = status_text(st);
        continue;
      }
      ++finalized;
      if (mode == CUDNN_HEUR_MODE_A) engines_taken.push_back(engine);
      Plan out;
      int64_t n = 0;
      TETRA_CUDNN_CHECK(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &n, &out.workspace_bytes));
      out.plan = plan->get();
      out.how = detail::concat("heuristics ", mode_name, ", engine config ", i, " of ", returned, " (engine ", engine,
                               ")");
      out.keep_alive = graph_owned;
      out.keep_alive.push_back(heur);
      out.keep_alive.push_back(configs[i]);
      out.keep_alive.push_back(std::move(plan));
      plans.push_back(std::move(out));
    }
    if (returned <= 0)
      report << "\n  heuristics " << mode_name << ": no engine config";
    else if (finalized == 0)
      report << "\n  heuristics " << mode_name << ": " << returned << " engine config(s), none finalized (first: "
             << first_failure << ")";
  }
  if (plans.empty())
    TETRA_FAIL(Device, name_, ": cuDNN ", version_string(runtime_version()), " has no engine for this graph:",
               report.str());
  return plans;
}

// ---------- execution ----------

void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace, const char* what) {
  TETRA_CHECK(uids.size() == pointers.size(), what, ": ", uids.size(), " uids for ", pointers.size(), " pointers");
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, std::string(what) + ": variant pack");
  const int64_t n = static_cast<int64_t>(uids.size());
  TETRA_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  TETRA_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers.data());
  TETRA_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data());
  pack.finalize();
  check(cudnnBackendExecute(handle, plan.plan, pack.get()), std::string("cudnnBackendExecute(") + what + ")",
        __FILE__, __LINE__);
}

}  // namespace tetra::cuda::cudnn_graph
