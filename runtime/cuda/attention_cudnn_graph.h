// A thin layer over cuDNN's backend (graph) API for the SDPA graphs of attention_cudnn_cuda.cpp:
// owned descriptors, attribute setters that check every cudnnStatus_t and name what failed, one
// builder call per node kind (tensor, pointwise, reduction, matmul, reshape), and plan selection
// (the engine configs of heuristics mode A, then of the fallback mode, that finalize).
// The layer knows nothing about attention; it mirrors how cuDNN's own frontend lowers its graphs.
#pragma once
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tetra::cuda::cudnn_graph {

// Throws a Device error: what was called, on what, cuDNN's status name and its last error message.
void check(cudnnStatus_t status, const std::string& what, const char* file, int line);
#define TETRA_CUDNN_CHECK(call) ::tetra::cuda::cudnn_graph::check((call), #call, __FILE__, __LINE__)

// cuDNN's version at run time as major·10000 + minor·100 + patch (9.14.0 → 91400).
int64_t runtime_version();
std::string version_string(int64_t v);

// One backend descriptor; destroyed with its owner. `label` names it in error messages.
class Descriptor {
 public:
  Descriptor(cudnnBackendDescriptorType_t type, std::string label);
  ~Descriptor();
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  const std::string& label() const { return label_; }
  // cudnnBackendSetAttribute; `attr` is the attribute's name for the error message.
  void set(cudnnBackendAttributeName_t name, const char* attr, cudnnBackendAttributeType_t type, int64_t count,
           const void* values);
  void finalize();
  // cudnnBackendFinalize without throwing (engine configs that do not fit a graph are expected).
  cudnnStatus_t try_finalize();

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
  std::string label_;
};
// TETRA_CUDNN_SET(desc, CUDNN_ATTR_X, CUDNN_TYPE_Y, count, values): names the attribute on failure.
#define TETRA_CUDNN_SET(desc, name, type, count, values) (desc).set((name), #name, (type), (count), (values))

using Dims = std::array<int64_t, 4>;

// A tensor of the graph: its descriptor plus what later nodes need to know about it.
struct TensorRef {
  cudnnBackendDescriptor_t desc = nullptr;
  int64_t uid = 0;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  Dims dims{}, strides{};
  std::string name;
};

// A finalized execution plan and every descriptor it was built from (kept alive with it; the plans
// of one graph share the graph's descriptors).
struct Plan {
  std::vector<std::shared_ptr<Descriptor>> keep_alive;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace_bytes = 0;
  std::string how;  // which heuristics mode and config index produced it, for reports
};

// Builds one operation graph node by node, then its execution plan. Intermediate (virtual) tensors
// take UIDs from 1000 up; device and by-value tensors carry the caller's fixed UIDs.
class GraphBuilder {
 public:
  GraphBuilder(cudnnHandle_t handle, std::string graph_name);

  // A tensor in device memory, bound through the variant pack by `uid`.
  TensorRef device_tensor(const std::string& name, int64_t uid, cudnnDataType_t dtype, Dims dims, Dims strides);
  // An fp32 scalar passed by value (host pointer in the variant pack), shaped [1, 1, 1, 1].
  TensorRef scalar(const std::string& name, int64_t uid, cudnnDataType_t dtype = CUDNN_DATA_FLOAT);
  // An intermediate tensor cuDNN never materialises.
  TensorRef virtual_tensor(const std::string& name, cudnnDataType_t dtype, Dims dims, Dims strides);

  // Pointwise y = mode(x[, b[, t]]) computed in `math_prec`; y must already exist.
  void pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t math_prec, const TensorRef& x,
                 const TensorRef& y);
  void pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t math_prec, const TensorRef& x,
                 const TensorRef& b, const TensorRef& y);
  void pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t math_prec, const TensorRef& x,
                 const TensorRef& b, const TensorRef& t, const TensorRef& y);
  // y = index of each element of x along `axis` (CUDNN_POINTWISE_GEN_INDEX).
  void gen_index(const std::string& name, int64_t axis, cudnnDataType_t math_prec, const TensorRef& x,
                 const TensorRef& y);
  // y = reduce(x) over the dimensions where y has extent 1, or, where y's extent divides x's, over
  // groups of consecutive slices (grouped-query attention's dK, dV); fp32 accumulation.
  void reduction(const std::string& name, cudnnReduceTensorOp_t op, const TensorRef& x, const TensorRef& y);
  // c[.., M, N] = a[.., M, K] · b[.., K, N] (fp32 accumulation); b's second dimension may divide c's
  // (broadcast over groups, as grouped-query attention's K and V); optional per-batch M/N/K overrides
  // (int32 device tensors) bound the rows/columns that take part.
  void matmul(const std::string& name, const TensorRef& a, const TensorRef& b, const TensorRef& c,
              const TensorRef* m_override = nullptr, const TensorRef* n_override = nullptr,
              const TensorRef* k_override = nullptr);
  // y = x seen through y's dims and strides (cuDNN's transpose-by-view).
  void reshape(const std::string& name, const TensorRef& x, const TensorRef& y);

  // Finalizes the operation graph and returns up to `max_plans` execution plans, in the order cuDNN
  // ranks them: the engine configs of heuristics mode A that finalize, then those of the fallback
  // mode (an engine already taken from mode A is not repeated). Throws, listing what each mode
  // answered, when none finalizes. The builder is spent afterwards.
  std::vector<Plan> build_plans(size_t max_plans);

 private:
  Descriptor& own(cudnnBackendDescriptorType_t type, const std::string& label);
  TensorRef make_tensor(const std::string& name, int64_t uid, cudnnDataType_t dtype, Dims dims, Dims strides,
                        bool is_virtual, bool by_value);
  Descriptor& pointwise_desc(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t math_prec);
  void add_operation(Descriptor& op);

  cudnnHandle_t handle_;
  std::string name_;
  int64_t next_virtual_uid_ = 1000;
  std::vector<std::shared_ptr<Descriptor>> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
};

// Runs `plan` on the handle's stream: each uid bound to its pointer (device memory, or a host
// scalar for by-value tensors), with `workspace` of at least plan.workspace_bytes.
void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace, const char* what);

}  // namespace tetra::cuda::cudnn_graph
