#include "models/consolidated.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unordered_set>

#include "runtime/hdf5_file.h"
#include "runtime/ops.h"

namespace tetra {

Tensor transpose_host(const Tensor& m) {
  TETRA_CHECK(m.ndim() == 2 && m.dtype() == DType::F32 && m.device().is_cpu(), "transpose_host: ", m.describe());
  const int64_t R = m.dim(0), C = m.dim(1);
  Tensor t = Tensor::empty({C, R}, DType::F32);
  const float* src = m.data<float>();
  float* dst = t.data<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) dst[c * R + r] = src[r * C + c];
  return t;
}

namespace {
Shape checkpoint_shape(const Param& p) {
  if (p.transposed_in_checkpoint) return {p.full_shape[1], p.full_shape[0]};
  return p.full_shape;
}
}  // namespace

std::vector<std::string> load_consolidated(const std::string& path, Model& model) {
  Hdf5File file(path, Hdf5File::Mode::Read);
  std::unordered_set<std::string> known;
  for (Param* p : model.params()) {
    known.insert(p->name);
    TETRA_CHECK(p->local_shape == p->full_shape, "load_consolidated into a split parameter (", p->name, ")");
    if (!file.has(p->name))
      TETRA_FAIL(Checkpoint, path, ": missing tensor '", p->name, "' (a ", model.arch(), " checkpoint needs it)");
    Shape want = checkpoint_shape(*p);
    Shape got = file.shape(p->name);
    if (got != want)
      TETRA_FAIL(Checkpoint, path, ": tensor '", p->name, "' has shape ", shape_str(got), " but the model needs ",
                 shape_str(want), " (check model.vocab_size / d_model / n_layers / seq_len against the checkpoint)");
    Tensor host = file.read(p->name, DType::F32);
    if (p->transposed_in_checkpoint) host = transpose_host(host);
    const float* v = host.data<float>();
    for (int64_t i = 0; i < host.numel(); ++i)
      if (!std::isfinite(v[i])) TETRA_FAIL(Checkpoint, path, ": tensor '", p->name, "' holds a non-finite value");
    ops::copy(p->value, host.view(p->local_shape));
  }
  for (const std::string& n : model.ignorable_checkpoint_names()) known.insert(n);
  std::vector<std::string> unexpected;
  for (const std::string& n : file.dataset_names())
    if (!known.count(n)) unexpected.push_back(n);
  return unexpected;
}

void write_consolidated(const std::string& path, Model& model, const std::vector<Tensor>& values) {
  std::vector<Param*> params = model.params();
  TETRA_CHECK(values.size() == params.size(), "write_consolidated: ", values.size(), " tensors for ", params.size(),
              " parameters");
  const std::string tmp = path + ".tmp";
  {
    Hdf5File file(tmp, Hdf5File::Mode::Create);
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& v = values[i];
      TETRA_CHECK(v.device().is_cpu() && v.dtype() == DType::F32 && v.shape() == params[i]->full_shape,
                  "write_consolidated: ", params[i]->name, " given ", v.describe());
      file.write(params[i]->name, params[i]->transposed_in_checkpoint ? transpose_host(v) : v);
    }
    file.set_attr("arch", model.arch());
    for (auto& [k, val] : model.config_attributes()) file.set_attr(k, val);
    file.flush();
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) TETRA_FAIL(Checkpoint, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

}  // namespace tetra
