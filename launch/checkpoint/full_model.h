// The model a sharded checkpoint holds, whole: rebuilt by its family from the config in meta.json,
// with the full fp32 master weight of every parameter merged from the rank files (checked against
// their CRC-32 first). `tetra ckpt consolidate` writes it out; `tetra generate` runs it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "launch/checkpoint/meta.h"
#include "launch/config/config.h"
#include "models/model.h"

namespace tetra::launch {

struct FullModel {
  Config cfg;                    // the run's config (meta.json)
  CheckpointMeta meta;
  std::unique_ptr<Model> model;  // parameters not bound to any memory
  std::vector<Tensor> values;    // host fp32 [full_shape] per model->params(), tetra's layout
};

// `step_dir`: RUN_DIR/checkpoints/step_N. Throws a Usage error for a directory that is missing or
// an interrupted save (step_N.tmp), a Checkpoint error for a checkpoint that fails its checks.
FullModel read_full_model(const std::string& step_dir);

}  // namespace tetra::launch
