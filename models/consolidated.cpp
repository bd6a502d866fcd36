#include "models/consolidated.h"

#include <filesystem>

#include "runtime/hdf5_file.h"

namespace tetra {

namespace {

class Hdf5Source : public WeightSource {
 public:
  explicit Hdf5Source(const std::string& path) : file_(path, Hdf5File::Mode::Read) {}
  std::string path() const override { return file_.path(); }
  std::vector<std::string> names() const override { return file_.dataset_names(); }
  bool has(const std::string& name) const override { return file_.has(name); }
  Shape shape(const std::string& name) const override { return file_.shape(name); }
  Tensor read_f32(const std::string& name) const override { return file_.read(name, DType::F32); }
  std::optional<double> attribute(const std::string& name) const override {
    if (!file_.has_attr(name)) return std::nullopt;
    return file_.attr_double(name);
  }
  std::optional<std::string> arch() const override {
    if (!file_.has_attr("arch")) return std::nullopt;
    return file_.attr_string("arch");
  }

 private:
  Hdf5File file_;
};

}  // namespace

std::unique_ptr<WeightSource> open_consolidated(const std::string& path) { return std::make_unique<Hdf5Source>(path); }

std::vector<std::string> load_consolidated(const std::string& path, Model& model) {
  Hdf5Source src(path);
  return load_weights(src, model).unexpected;
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
      for (const StoredTensor& t : stored_tensors(*params[i])) file.write(t.name, to_stored(t, v));
    }
    file.set_attr("arch", model.arch());
    for (const ModelAttribute& a : model.config_attributes()) {
      if (a.kind == ModelAttribute::Kind::Float)
        file.set_attr(a.name, a.value);
      else
        file.set_attr(a.name, static_cast<int64_t>(a.value));
    }
    file.flush();
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) TETRA_FAIL(Checkpoint, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

}  // namespace tetra
