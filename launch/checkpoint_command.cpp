// `tetra ckpt consolidate RUN_DIR/checkpoints/step_N --out FULL.h5`: merges the rank files of a
// sharded checkpoint (written at any mesh) into the one-file consolidated form with the parameter
// names PyTorch uses (ARCHITECTURE.md §6), which model.init_from reads. The model is rebuilt from
// the config in the checkpoint's meta.json; every rank file is checked against its CRC-32 first.
#include <cstdio>
#include <filesystem>

#include "launch/checkpoint_files.h"
#include "launch/checkpoint_reader.h"
#include "launch/commands.h"
#include "launch/config.h"
#include "launch/trainer.h"
#include "models/consolidated.h"
#include "models/gpt_model.h"
#include "runtime/error.h"

namespace tetra::launch {

namespace fs = std::filesystem;

int consolidate_command(const std::string& checkpoint_dir, const std::string& out_path) {
  std::error_code ec;
  const fs::path dir = fs::path(checkpoint_dir).lexically_normal();
  if (!fs::is_directory(dir, ec))
    TETRA_FAIL(Usage, checkpoint_dir, ": no such directory (give a checkpoint directory, RUN_DIR/checkpoints/step_N)");
  const std::string leaf = (dir.filename().empty() ? dir.parent_path() : dir).filename().string();
  if (parse_tmp_step_dir(leaf))
    TETRA_FAIL(Usage, checkpoint_dir, ": an incomplete checkpoint (its save was interrupted before the commit); "
               "consolidate a step_N directory instead");
  const fs::path out_parent = fs::absolute(out_path, ec).parent_path();
  if (!fs::is_directory(out_parent, ec))
    TETRA_FAIL(Usage, "--out ", out_path, ": the directory ", out_parent.string(), " does not exist");

  CheckpointReader reader(dir.string());
  const std::string problem = reader.verify();
  if (!problem.empty())
    TETRA_FAIL(Checkpoint, checkpoint_dir, ": ", problem, "; this checkpoint cannot be consolidated (use another step_N)");
  const CheckpointMeta& meta = reader.meta();
  Config cfg = parse_config(meta.config_yaml, (dir / kMetaFile).string() + " (config)");
  GptModel model(gpt_config_of(cfg));

  std::vector<Param*> params = model.params();
  if (params.size() != meta.params.size())
    TETRA_FAIL(Checkpoint, checkpoint_dir, ": holds ", meta.params.size(), " parameters but its config describes a ",
               model.arch(), " model of ", params.size(), " (meta.json is inconsistent)");
  std::vector<Tensor> values;
  int64_t numel = 0;
  for (Param* p : params) {
    values.push_back(reader.full_master(p->name, p->full_shape));
    numel += p->numel();
  }
  write_consolidated(out_path, model, values);
  std::printf("wrote %s: %zu tensors, %lld parameters of %s at step %lld (from %d rank files, dp %d tp %d pp %d, "
              "ZeRO-%d)\n",
              out_path.c_str(), values.size(), static_cast<long long>(numel), model.arch().c_str(),
              static_cast<long long>(meta.step), meta.world_size, meta.dp, meta.tp, meta.pp, meta.zero_stage);
  return 0;
}

}  // namespace tetra::launch
