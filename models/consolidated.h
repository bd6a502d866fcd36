// The consolidated checkpoint (ARCHITECTURE.md §6): one HDF5 file, one dataset per stored tensor
// of the model (models/stored_tensors.h: Hugging Face's names and layouts — GPT-2's Conv1D weights
// [in, out], Llama's q/k/v and gate/up projections apart), with `arch` and the model config
// (Model::config_attributes, Hugging Face's names) as root attributes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/stored_tensors.h"
#include "models/weight_source.h"

namespace tetra {

// A consolidated HDF5 file as a WeightSource.
std::unique_ptr<WeightSource> open_consolidated(const std::string& path);

// Loads every parameter of `model` from the consolidated file at `path` (load_weights). Returns
// the names in the file that are neither parameters nor ignorable (the caller warns).
std::vector<std::string> load_consolidated(const std::string& path, Model& model);

// Writes the full parameters: `values[i]` is the full fp32 host tensor of model.params()[i] in
// tetra's layout. Written to path + ".tmp" and renamed, so a crash leaves no half file.
void write_consolidated(const std::string& path, Model& model, const std::vector<Tensor>& values);

}  // namespace tetra
