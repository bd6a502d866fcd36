// TensorBoard's event files (RUN_DIR/tensorboard/events.out.tfevents.*), written without TensorFlow:
// each record is TFRecord-framed (uint64 length, masked CRC-32C of the length, the bytes, masked
// CRC-32C of the bytes; all little-endian) and holds one tensorflow.Event protobuf, encoded here by
// hand: the four messages and seven fields it needs (Event, Summary, Summary.Value, SessionLog) are a
// few dozen lines, where libprotobuf would add a library and a code generator to the build for them.
// The writer knows tags and numbers only; which metrics go in is the trainer's choice.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace tetra {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses; not the CRC-32 of the
// checkpoints. `crc` continues an earlier value (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it, named
  // events.out.tfevents.<Unix seconds>.<host>.<pid>.<attempt>, so each attempt of a run appends a
  // file of its own and TensorBoard reads them in order. Its first records: the file version and a
  // SessionLog START at `first_step` — TensorBoard then drops what earlier files logged at steps
  // >= first_step (steps redone after a restart replace the lost ones rather than going back).
  // Fails (ErrorKind::Data) when the folder or the file cannot be made.
  TensorBoardWriter(const std::string& dir, int attempt, int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  static std::string dir_in(const std::string& run_dir);  // RUN_DIR/tensorboard

  // One event at `step` (>= every earlier step of this file) with a simple_value per (tag, value),
  // flushed to the file so TensorBoard sees it while the run goes on. Non-finite values are written
  // as they are (TensorBoard shows NaN). Fails (ErrorKind::Data) when the write fails.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }
  int64_t last_step() const { return last_step_; }  // of the last event (the first step before any)

 private:
  void record(const std::string& event);  // frames one encoded Event and writes it

  std::string path_;
  std::FILE* file_ = nullptr;
  int64_t last_step_ = 0;
};

}  // namespace tetra
