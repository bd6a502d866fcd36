// meta.json of a checkpoint (ARCHITECTURE.md §6): what a resumed run needs besides the tensors —
// the step, tokens seen, optimizer step count, the resolved config, the mesh and ZeRO stage it was
// written with, the sampler and LR schedule positions, the random-number state, and for every
// rank file its size, CRC-32 and the pieces of parameters it holds (the index a loader on another
// mesh uses to find the ranges it needs). Written by rank 0 once every rank file is on disk.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/param_placement.h"
#include "runtime/tensor.h"

namespace tetra::launch {

// Version 2 added boxes (tensor-parallel slices); version 1 checkpoints (whole-tensor pieces only)
// read as they are.
inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr int kOldestReadableCheckpointVersion = 1;

// Elements [begin, end) of box `box` of the full parameter `name`, flattened in the box's row-major
// order (an empty box: the whole tensor, flattened).
struct SavedPiece {
  std::string name;
  int64_t begin = 0, end = 0;
  TensorBox box;
};

struct RankFileInfo {
  std::string file;  // rank_00003.h5, relative to the checkpoint directory
  int rank = 0;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
  std::vector<SavedPiece> pieces;
};

struct ParamInfo {
  std::string name;
  Shape full_shape;
};

struct CheckpointMeta {
  int version = kCheckpointFormatVersion;
  int64_t step = 0;             // the state after this many steps: resume runs step + 1 next
  int64_t tokens_seen = 0;
  int64_t optimizer_steps = 0;  // AdamW updates applied (steps less skipped ones): bias correction
  int64_t skipped_steps = 0;    // steps skipped for a non-finite loss or gradient
  int attempt = 0;              // the attempt (goodput ledger) that wrote it
  double time = 0;              // Unix seconds of the commit
  std::string config_yaml;      // the resolved config of the run that wrote it
  int world_size = 1, dp = 1, tp = 1, pp = 1, ep = 1, zero_stage = 0;
  nlohmann::json sampler = nlohmann::json::object();      // position: next step, and its config
  nlohmann::json lr_schedule = nlohmann::json::object();  // position: next step and its lr
  nlohmann::json rng = nlohmann::json::object();          // seed and generator states
  std::vector<ParamInfo> params;                          // model order
  std::vector<RankFileInfo> files;                        // rank order
};

nlohmann::json to_json(const CheckpointMeta& meta);
// Checks every field; `where` (the file) names it in errors (Checkpoint kind).
CheckpointMeta meta_from_json(const nlohmann::json& j, const std::string& where);
// Reads and parses STEP_DIR/meta.json.
CheckpointMeta read_meta(const std::string& step_dir);

}  // namespace tetra::launch
