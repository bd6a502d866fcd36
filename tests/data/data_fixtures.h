// Test fixtures for the data layer: a scratch directory, writers for HDF5 and llm.c .bin token
// files (well-formed and deliberately broken), and helpers to assert on errors and run programs.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tetra::data::testing {

// A fresh directory under the system temp dir, removed with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
};

// llm.c shard: header (magic, version, count) + tokens. `count` defaults to tokens.size();
// `extra_bytes` are appended after the tokens; `header_bytes` < 1024 writes a cut header only.
struct BinSpec {
  std::vector<uint16_t> tokens{};
  int32_t magic = 20240520;
  int32_t version = 1;
  std::optional<int32_t> count{};
  int extra_bytes = 0;
  int header_bytes = 1024;
};
void write_bin(const std::string& path, const BinSpec& spec);

// HDF5 token file. Tokens are given as uint64 and stored as `file_type` (H5T_STD_U16LE, ...).
struct H5Spec {
  std::vector<uint64_t> tokens{};
  hid_t file_type = H5T_STD_U16LE;
  std::vector<hsize_t> dims{};  // default: {tokens.size()}; e.g. {4, 5} for a rank-2 /tokens
  bool chunked_gzip = false;  // chunked + deflate instead of contiguous
  std::optional<int64_t> vocab_size{};
  std::optional<std::string> tokenizer{};
  bool tokenizer_fixed_length = true;
  std::optional<std::vector<int64_t>> doc_offsets{};
  bool tokens_as_group = false;  // /tokens is a group (and no dataset)
  bool omit_tokens = false;
};
void write_h5(const std::string& path, const H5Spec& spec);

// Writes `bytes` to `path` as is.
void write_raw(const std::string& path, const std::string& bytes);
std::string read_raw(const std::string& path);

// The message of the tetra::Error that f throws; fails the test (and returns "") if none.
std::string error_of(const std::function<void()>& f);

// Runs a shell command; returns its exit status and combined stdout+stderr.
struct CommandResult {
  int status = -1;
  std::string output;
};
CommandResult run_command(const std::string& command);

// Runs `code` with the Python interpreter that has h5py/numpy (TETRA_PYTHON), argv[1..] = args.
CommandResult run_python(const ScratchDir& dir, const std::string& code, const std::vector<std::string>& args);

std::string shell_quote(const std::string& s);

}  // namespace tetra::data::testing
