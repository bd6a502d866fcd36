// The consolidated checkpoint (ARCHITECTURE.md §6): one HDF5 file, one dataset per full parameter,
// named and shaped as PyTorch names them for the architecture (GPT-2: Hugging Face's
// GPT2LMHeadModel, Conv1D weights stored [in, out]), with the model config as root attributes.
#pragma once
#include <string>
#include <vector>

#include "models/model.h"

namespace tetra {

// Loads every parameter of `model` from `path` into its value (converted to the value's dtype and
// device). Errors name the file and the tensor: missing tensor, wrong shape, unreadable file.
// Returns the names in the file that are neither parameters nor ignorable (the caller warns).
std::vector<std::string> load_consolidated(const std::string& path, Model& model);

// Writes the full parameters: `values[i]` is the full fp32 host tensor of model.params()[i] in
// tetra's layout. Written to path + ".tmp" and renamed, so a crash leaves no half file.
void write_consolidated(const std::string& path, Model& model, const std::vector<Tensor>& values);

// [rows, cols] → [cols, rows] on the host (fp32).
Tensor transpose_host(const Tensor& m);

}  // namespace tetra
