#include "launch/checkpoint/full_model.h"

#include <filesystem>

#include "launch/checkpoint/files.h"
#include "launch/checkpoint/reader.h"
#include "launch/config/model.h"
#include "runtime/error.h"

namespace tetra::launch {

namespace fs = std::filesystem;

FullModel read_full_model(const std::string& step_dir) {
  std::error_code ec;
  const fs::path dir = fs::path(step_dir).lexically_normal();
  if (!fs::is_directory(dir, ec))
    TETRA_FAIL(Usage, step_dir, ": no such directory (give a checkpoint directory, RUN_DIR/checkpoints/step_N)");
  const std::string leaf = (dir.filename().empty() ? dir.parent_path() : dir).filename().string();
  if (parse_tmp_step_dir(leaf))
    TETRA_FAIL(Usage, step_dir, ": an incomplete checkpoint (its save was interrupted before the commit); "
               "use a step_N directory instead");
  CheckpointReader reader(dir.string());
  const std::string problem = reader.verify();
  if (!problem.empty())
    TETRA_FAIL(Checkpoint, step_dir, ": ", problem, "; this checkpoint cannot be consolidated (use another step_N)");
  FullModel full{parse_config(reader.meta().config_yaml, (dir / kMetaFile).string() + " (config)"), reader.meta(),
                 nullptr, {}};
  full.model = model_family_of(full.cfg).build(model_args(full.cfg));
  std::vector<Param*> params = full.model->params();
  if (params.size() != full.meta.params.size())
    TETRA_FAIL(Checkpoint, step_dir, ": holds ", full.meta.params.size(), " parameters but its config describes a ",
               full.model->arch(), " model of ", params.size(), " (meta.json is inconsistent)");
  for (Param* p : params) full.values.push_back(reader.full_master(p->name, p->full_shape));
  return full;
}

}  // namespace tetra::launch
