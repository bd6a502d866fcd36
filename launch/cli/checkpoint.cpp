// `tetra ckpt consolidate RUN_DIR/checkpoints/step_N --out FULL.h5 [--format hdf5|hf] [--dtype ...]`:
// merges the rank files of a sharded checkpoint (written at any mesh) into the one-file
// consolidated form with the parameter names PyTorch uses (ARCHITECTURE.md §6), or into a Hugging
// Face model folder (config.json, model.safetensors or its shards in fp32 or bf16, the tokenizer
// files and generation_config.json: launch/cli/hf_export.h); model.init_from reads both.
// The model is rebuilt from the config in the checkpoint's meta.json by its family; every rank file
// is checked against its CRC-32 first.
#include <cstdio>
#include <filesystem>

#include "launch/checkpoint/full_model.h"
#include "launch/cli/commands.h"
#include "launch/cli/hf_export.h"
#include "models/consolidated.h"
#include "models/hf_folder.h"
#include "runtime/error.h"

namespace tetra::launch {

namespace fs = std::filesystem;

int consolidate_command(const std::string& checkpoint_dir, const std::string& out_path, const std::string& format,
                        const std::string& dtype, const HfExportOptions& hf) {
  if (format != "hdf5" && format != "hf")
    TETRA_FAIL(Usage, "--format ", format, ": not a format (hdf5: one consolidated HDF5 file; hf: a Hugging Face folder)");
  if (dtype != "fp32" && dtype != "bf16") TETRA_FAIL(Usage, "--dtype ", dtype, ": use fp32 or bf16");
  if (format == "hdf5" && dtype != "fp32")
    TETRA_FAIL(Usage, "--dtype ", dtype, ": the consolidated HDF5 file holds fp32 master weights (bf16 is for --format hf)");
  if (format != "hf" && !hf.tokenizer_dir.empty())
    TETRA_FAIL(Usage, "--tokenizer: only with --format hf (a consolidated HDF5 file holds weights only)");
  if (format != "hf" && !hf.max_shard_size.empty())
    TETRA_FAIL(Usage, "--max-shard-size: only with --format hf (a consolidated HDF5 file is one file)");
  const std::string max_shard = hf.max_shard_size.empty() ? "5GB" : hf.max_shard_size;
  parse_byte_size(max_shard, "--max-shard-size");
  std::error_code ec;
  const fs::path out_parent = fs::absolute(out_path, ec).lexically_normal().parent_path();
  if (!fs::is_directory(out_parent, ec))
    TETRA_FAIL(Usage, "--out ", out_path, ": the directory ", out_parent.string(), " does not exist");
  if (format == "hf" && fs::exists(out_path, ec) && !fs::is_directory(out_path, ec))
    TETRA_FAIL(Usage, "--out ", out_path, ": a file; --format hf writes a folder (config.json, model.safetensors)");
  if (format == "hf" && fs::is_directory(out_path, ec) && !fs::is_empty(out_path, ec))
    TETRA_FAIL(Usage, "--out ", out_path, ": a folder that is not empty; remove it or choose another --out (the ",
               "export never writes over files)");
  if (format == "hdf5" && fs::is_directory(out_path, ec))
    TETRA_FAIL(Usage, "--out ", out_path, ": a directory; --format hdf5 writes one file (or use --format hf)");

  FullModel full = read_full_model(checkpoint_dir);
  const CheckpointMeta& meta = full.meta;
  Model& model = *full.model;
  const std::vector<Tensor>& values = full.values;
  int64_t numel = 0;
  size_t tensors = 0;
  for (Param* p : model.params()) {
    numel += p->numel();
    tensors += stored_tensors(*p).size();
  }
  std::string what;
  std::vector<std::string> notes;
  if (format == "hf") {
    const HfFolderExtras extras = hf_export_extras(full.cfg.model.init_from, hf.tokenizer_dir, max_shard, notes);
    write_hf_folder(out_path, model, values, dtype == "bf16" ? DType::BF16 : DType::F32, extras);
    what = " (Hugging Face folder, " + dtype + ")";
  } else {
    write_consolidated(out_path, model, values);
  }
  std::printf("wrote %s%s: %zu tensors, %lld parameters of %s at step %lld (from %d rank files, dp %d tp %d pp %d, "
              "ZeRO-%d)\n",
              out_path.c_str(), what.c_str(), tensors, static_cast<long long>(numel), model.arch().c_str(),
              static_cast<long long>(meta.step), meta.world_size, meta.dp, meta.tp, meta.pp, meta.zero_stage);
  for (const std::string& note : notes) std::printf("note: %s\n", note.c_str());
  return 0;
}

}  // namespace tetra::launch
