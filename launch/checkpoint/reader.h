// CheckpointReader: reads a complete checkpoint directory (step_N/) written at any mesh. Loading
// is where resharding happens: a rank asks for the ranges its own StatePieces cover, and the
// reader finds them in whichever rank files hold them (meta.json indexes every file's pieces), so
// a checkpoint written at dp = 2 loads at dp = 4, at tp = 1 from tp = 2, at another ZeRO stage, or
// into one process (`tetra ckpt consolidate`). Pieces are flat ranges of boxes of the full tensor
// (parallel/distributed_optimizer.h, StatePiece): a request and a stored piece meet where their boxes
// intersect, run by run (parallel/param_placement.h).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launch/checkpoint/meta.h"
#include "parallel/distributed_optimizer.h"

namespace tetra {
class Hdf5File;
}

namespace tetra::launch {

class CheckpointReader {
 public:
  // Reads and checks meta.json: every rank file listed, every parameter covered exactly once by the
  // pieces (their boxes inside the tensor, no two pieces sharing an element, as many elements as the
  // tensor). Throws a Checkpoint error naming the directory and what is wrong, CheckpointUnreadable
  // when meta.json is there but cannot be read.
  explicit CheckpointReader(const std::string& step_dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& dir() const { return dir_; }
  const CheckpointMeta& meta() const { return meta_; }
  const ParamInfo* param(const std::string& name) const;  // nullptr when the checkpoint has none

  // Checks that rank files i with i % stride == offset exist and have the size and CRC-32 that
  // meta.json records (ranks split the work: offset = rank, stride = world). Returns "" when they
  // do, else what is wrong with the first that does not. Throws CheckpointUnreadable when a file is
  // there but cannot be read (launch/checkpoint/files.h): that says nothing about the checkpoint.
  std::string verify(int offset = 0, int stride = 1) const;

  // Fills piece.master, exp_avg and exp_avg_sq (host or device; fp32, or bf16 moments: the saved
  // fp32 values rounded to nearest even) with elements [begin, end) of its box of its parameter. Throws a Checkpoint error when the checkpoint has no such parameter or
  // its full shape differs (a checkpoint of another model).
  void fill(StatePiece& piece);

  // The full master weights of `name`, a host fp32 tensor shaped full_shape.
  Tensor full_master(const std::string& name, const Shape& full_shape);

 private:
  struct Source {
    int file = 0;  // index into meta_.files
    SavedPiece piece;
  };
  // out[0, end − begin) = elements [begin, end) of `box` (whole: empty) of parameter `name`.
  void read_range(const std::string& name, const TensorBox& box, int64_t begin, int64_t end, const char* dataset,
                  float* out);
  Hdf5File& open(int file);

  std::string dir_;
  CheckpointMeta meta_;
  std::map<std::string, size_t> param_index_;
  std::map<std::string, std::vector<Source>> sources_;  // by parameter, sorted by begin
  std::map<int, std::unique_ptr<Hdf5File>> open_;
};

}  // namespace tetra::launch
