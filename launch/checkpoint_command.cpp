// `tetra ckpt consolidate DIR --out FILE`.
#include "launch/commands.h"
#include "runtime/error.h"

namespace tetra::launch {

int consolidate_command(const std::string& checkpoint_dir, const std::string& out_path) {
  TETRA_FAIL(Usage, "tetra ckpt consolidate ", checkpoint_dir, " --out ", out_path,
             ": sharded checkpoints are not written by this version yet");
}

}  // namespace tetra::launch
