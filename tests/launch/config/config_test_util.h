// Helpers for the config tests: a per-test temporary directory, a small valid config with known
// line numbers, and line edits on it.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tetra::launch::testing {

// A valid config for 2 ranks. Line numbers are part of the tests: keep them.
inline const char* kBase =
    "model:\n"                  // 1
    "  vocab_size: 256\n"       // 2
    "  seq_len: 64\n"           // 3
    "  d_model: 64\n"           // 4
    "  n_layers: 4\n"           // 5
    "  n_heads: 4\n"            // 6
    "parallel:\n"               // 7
    "  dp: 2\n"                 // 8
    "  tp: 1\n"                 // 9
    "  pp: 1\n"                 // 10
    "train:\n"                  // 11
    "  steps: 100\n"            // 12
    "  global_batch: 8\n"       // 13
    "  micro_batch: 2\n"        // 14
    "optimizer:\n"              // 15
    "  lr: 1.0e-3\n"            // 16
    "  warmup_steps: 10\n"      // 17
    "data:\n"                   // 18
    "  train: data/x.h5\n";     // 19

// kBase with the line `from` replaced by `to` (which may hold several lines, or none).
inline std::string edit(const std::string& from, const std::string& to, std::string text = kBase) {
  size_t pos = text.find(from + "\n");
  if (pos == std::string::npos || (pos > 0 && text[pos - 1] != '\n'))
    throw std::runtime_error("test bug: line '" + from + "' not in the config");
  text.replace(pos, from.size() + 1, to.empty() ? "" : to + "\n");
  return text;
}

// A fresh directory per test under the gtest temp dir, removed at the end.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    path_ = std::filesystem::path(::testing::TempDir()) / ("tetra_config_" + std::to_string(getpid()) + "_" + name);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  // Writes `text` to NAME in the directory and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tetra::launch::testing
