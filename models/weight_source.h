// Loading a model's weights from a file it did not write itself: a consolidated HDF5 checkpoint
// (models/consolidated.h) or a Hugging Face model folder (models/hf_folder.h), behind one small
// reader interface. Every name and shape is checked against the model, and the file's config
// (HDF5 attributes, config.json) against the model's config attributes; errors name the file, the
// tensor or field, both values, and the config key that would match.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/model.h"

namespace tetra {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::string path() const = 0;
  virtual std::vector<std::string> names() const = 0;  // every tensor in the source
  virtual bool has(const std::string& name) const = 0;
  virtual Shape shape(const std::string& name) const = 0;
  virtual Tensor read_f32(const std::string& name) const = 0;  // host fp32, the file's layout
  // A config field by its Hugging Face name (numbers and booleans as double); nullopt when absent.
  virtual std::optional<double> attribute(const std::string& name) const = 0;
  // The family the file says it holds (HDF5: the `arch` attribute; Hugging Face: model_type).
  virtual std::optional<std::string> arch() const = 0;
  // A config field as written (Hugging Face config.json); nullopt when absent or not a config.json.
  virtual std::optional<nlohmann::json> config_field(const std::string& name) const { return std::nullopt; }
};

// A Hugging Face folder for a directory, a consolidated HDF5 file otherwise.
std::unique_ptr<WeightSource> open_weights(const std::string& path);

struct LoadReport {
  std::vector<std::string> unexpected;  // tensors in the file that are neither parameters nor ignorable
  // Config fields that differ without changing any shape, and fields the model does not apply
  // (set in config.json where the model's own config.json has null). A different rope scaling is
  // an error, not a note.
  std::vector<std::string> notes;
};

// Loads every parameter of `model` from `source` (which holds full tensors): each parameter's local
// piece (its tensor-parallel slice, or all of it), converted to the value's dtype and device. Throws a Checkpoint error for a different family, a config field that changes
// the model's shape or wiring, a missing tensor, a wrong shape or a non-finite value.
LoadReport load_weights(const WeightSource& source, Model& model);

}  // namespace tetra
