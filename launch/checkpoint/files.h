// Where a checkpoint's files live and how they reach the disk (ARCHITECTURE.md §6):
//
//   RUN_DIR/checkpoints/step_N.tmp/   being written: rank files, then meta.json
//   RUN_DIR/checkpoints/step_N/       complete: renamed from step_N.tmp once every rank's file
//                                     and meta.json are on disk (fsync'd)
//        rank_00000.h5 ...            one shard per rank (checkpoint_shard.h)
//        meta.json                    step, config, mesh, sampler, checksums (checkpoint_meta.h)
//
// A directory is a candidate for resuming only under its final name and with meta.json; whether
// its files are intact is for CheckpointReader::verify to say.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace tetra::launch {

// A checkpoint file that exists but cannot be read (permission denied, an I/O error, a directory
// where a file belongs): the checkpoint may be whole, so resume stops rather than set it aside as
// damaged. A Checkpoint error, caught as one by code that does not tell the two apart.
class CheckpointUnreadable : public Error {
 public:
  explicit CheckpointUnreadable(const std::string& message) : Error(ErrorKind::Checkpoint, message) {}
};

inline constexpr const char* kCheckpointsDir = "checkpoints";
inline constexpr const char* kMetaFile = "meta.json";

std::string checkpoints_dir(const std::string& run_dir);        // RUN_DIR/checkpoints
std::string step_dir_name(int64_t step);                        // step_N
std::string rank_file_name(int rank);                           // rank_00003.h5
// N for "step_N" (digits only); nullopt for anything else, step_N.tmp included.
std::optional<int64_t> parse_step_dir(const std::string& name);
// N for "step_N.tmp"; nullopt otherwise.
std::optional<int64_t> parse_tmp_step_dir(const std::string& name);

// Removes every step_N.tmp under `dir` (saves that never committed: a crash, a full disk) and
// prints each; a save calls it before it writes (no save is in flight then), so one failed save's
// files never take the room of the next. Returns how many it removed.
int remove_incomplete_saves(const std::string& dir);

struct CheckpointDir {
  int64_t step = 0;
  std::string path;
  bool has_meta = false;
};
// Every step_N directory under `dir` (RUN_DIR/checkpoints), newest (largest N) first; *.tmp and
// other names are not listed. An absent `dir` gives an empty list.
std::vector<CheckpointDir> list_checkpoint_dirs(const std::string& dir);

// fsync of a file or a directory (to make a rename or a new entry durable). Throws a Checkpoint
// error naming the path.
void fsync_path(const std::string& path);
// Writes `content` to `path` durably: path.part, fsync, rename, fsync of the directory.
void write_file_durably(const std::string& path, const std::string& content);
// The whole file as a string. Throws a Checkpoint error when it does not exist, and
// CheckpointUnreadable when it exists but cannot be opened or read.
std::string read_text_file(const std::string& path);

}  // namespace tetra::launch
