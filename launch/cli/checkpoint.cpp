// `tetra ckpt consolidate RUN_DIR/checkpoints/step_N --out FULL.h5 [--format hdf5|hf] [--dtype ...]`:
// merges the rank files of a sharded checkpoint (written at any mesh) into the one-file
// consolidated form with the parameter names PyTorch uses (ARCHITECTURE.md §6), or into a Hugging
// Face model folder (config.json + model.safetensors in fp32 or bf16); model.init_from reads both.
// The model is rebuilt from the config in the checkpoint's meta.json by its family; every rank file
// is checked against its CRC-32 first.
#include <cstdio>
#include <filesystem>

#include "launch/checkpoint/files.h"
#include "launch/checkpoint/reader.h"
#include "launch/cli/commands.h"
#include "launch/config/config.h"
#include "launch/config/model.h"
#include "models/consolidated.h"
#include "models/hf_folder.h"
#include "runtime/error.h"

namespace tetra::launch {

namespace fs = std::filesystem;

int consolidate_command(const std::string& checkpoint_dir, const std::string& out_path, const std::string& format,
                        const std::string& dtype) {
  if (format != "hdf5" && format != "hf")
    TETRA_FAIL(Usage, "--format ", format, ": not a format (hdf5: one consolidated HDF5 file; hf: a Hugging Face folder)");
  if (dtype != "fp32" && dtype != "bf16") TETRA_FAIL(Usage, "--dtype ", dtype, ": use fp32 or bf16");
  if (format == "hdf5" && dtype != "fp32")
    TETRA_FAIL(Usage, "--dtype ", dtype, ": the consolidated HDF5 file holds fp32 master weights (bf16 is for --format hf)");
  std::error_code ec;
  const fs::path dir = fs::path(checkpoint_dir).lexically_normal();
  if (!fs::is_directory(dir, ec))
    TETRA_FAIL(Usage, checkpoint_dir, ": no such directory (give a checkpoint directory, RUN_DIR/checkpoints/step_N)");
  const std::string leaf = (dir.filename().empty() ? dir.parent_path() : dir).filename().string();
  if (parse_tmp_step_dir(leaf))
    TETRA_FAIL(Usage, checkpoint_dir, ": an incomplete checkpoint (its save was interrupted before the commit); "
               "consolidate a step_N directory instead");
  const fs::path out_parent = fs::absolute(out_path, ec).lexically_normal().parent_path();
  if (!fs::is_directory(out_parent, ec))
    TETRA_FAIL(Usage, "--out ", out_path, ": the directory ", out_parent.string(), " does not exist");
  if (format == "hf" && fs::exists(out_path, ec) && !fs::is_directory(out_path, ec))
    TETRA_FAIL(Usage, "--out ", out_path, ": a file; --format hf writes a folder (config.json, model.safetensors)");
  if (format == "hdf5" && fs::is_directory(out_path, ec))
    TETRA_FAIL(Usage, "--out ", out_path, ": a directory; --format hdf5 writes one file (or use --format hf)");

  CheckpointReader reader(dir.string());
  const std::string problem = reader.verify();
  if (!problem.empty())
    TETRA_FAIL(Checkpoint, checkpoint_dir, ": ", problem, "; this checkpoint cannot be consolidated (use another step_N)");
  const CheckpointMeta& meta = reader.meta();
  Config cfg = parse_config(meta.config_yaml, (dir / kMetaFile).string() + " (config)");
  std::unique_ptr<Model> built = model_family_of(cfg).build(model_args(cfg));
  Model& model = *built;

  std::vector<Param*> params = model.params();
  if (params.size() != meta.params.size())
    TETRA_FAIL(Checkpoint, checkpoint_dir, ": holds ", meta.params.size(), " parameters but its config describes a ",
               model.arch(), " model of ", params.size(), " (meta.json is inconsistent)");
  std::vector<Tensor> values;
  int64_t numel = 0;
  size_t tensors = 0;
  for (Param* p : params) {
    values.push_back(reader.full_master(p->name, p->full_shape));
    numel += p->numel();
    tensors += stored_tensors(*p).size();
  }
  std::string what;
  if (format == "hf") {
    write_hf_folder(out_path, model, values, dtype == "bf16" ? DType::BF16 : DType::F32);
    what = " (Hugging Face folder, " + dtype + ")";
  } else {
    write_consolidated(out_path, model, values);
  }
  std::printf("wrote %s%s: %zu tensors, %lld parameters of %s at step %lld (from %d rank files, dp %d tp %d pp %d, "
              "ZeRO-%d)\n",
              out_path.c_str(), what.c_str(), tensors, static_cast<long long>(numel), model.arch().c_str(),
              static_cast<long long>(meta.step), meta.world_size, meta.dp, meta.tp, meta.pp, meta.zero_stage);
  return 0;
}

}  // namespace tetra::launch
