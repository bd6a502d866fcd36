// Helpers of the loader tests: token files whose every token is known (written through the data
// fixtures), an independent direct read of a window from the file, the expected order of windows
// written out from the documented rules, and batches copied to host vectors (from any device).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "data/blend_schedule.h"
#include "data/data_loader.h"
#include "data/sampler.h"
#include "data/token_dataset.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "tests/data/data_fixtures.h"

namespace tetra::data::loadertest {

using testing::ScratchDir;

// Token i of file `salt`: distinct per file and position, below 1000.
inline uint32_t token_of(int salt, int64_t i) { return static_cast<uint32_t>((i * 131 + salt * 17 + 7) % 997); }

enum class Kind { Bin, H5U16, H5U32, H5Chunked };

struct TokenFile {
  std::string path;
  Kind kind;
  int64_t tokens;
};

inline TokenFile make_file(const ScratchDir& dir, const std::string& name, Kind kind, int64_t n, int salt) {
  const std::string path = dir.file(name);
  if (kind == Kind::Bin) {
    testing::BinSpec spec;
    for (int64_t i = 0; i < n; ++i) spec.tokens.push_back(static_cast<uint16_t>(token_of(salt, i)));
    testing::write_bin(path, spec);
  } else {
    testing::H5Spec spec;
    for (int64_t i = 0; i < n; ++i) spec.tokens.push_back(token_of(salt, i));
    spec.file_type = kind == Kind::H5U32 ? H5T_STD_U32LE : H5T_STD_U16LE;
    spec.chunked_gzip = kind == Kind::H5Chunked;
    spec.vocab_size = 1000;
    spec.tokenizer = "test";
    testing::write_h5(path, spec);
  }
  return {path, kind, n};
}

// Tokens [offset, offset + count) read straight from the file: the bytes after the 1024-byte
// header of a .bin, or HDF5's own read of /tokens (which decodes any layout).
inline std::vector<int32_t> direct_read(const std::string& path, int64_t offset, int64_t count) {
  std::vector<int32_t> out(static_cast<size_t>(count));
  if (path.size() > 4 && path.substr(path.size() - 4) == ".bin") {
    std::ifstream f(path, std::ios::binary);
    f.seekg(1024 + 2 * offset);
    std::vector<uint16_t> raw(static_cast<size_t>(count));
    f.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(2 * count));
    EXPECT_TRUE(f.good()) << path;
    for (int64_t i = 0; i < count; ++i) out[static_cast<size_t>(i)] = raw[static_cast<size_t>(i)];
  } else {
    TokenDataset::open(path)->read(offset, count, out.data());
  }
  return out;
}

// A window as the documented rules place it: shard `file`, token offset.
struct Window {
  int file;
  int64_t offset;
};

// The windows of a dataset made of `files` (in order): each file's (n − 1) / T windows at stride T.
inline std::vector<Window> dataset_windows(const std::vector<TokenFile>& files, int first_file, int64_t T) {
  std::vector<Window> w;
  for (size_t f = 0; f < files.size(); ++f)
    for (int64_t j = 0; j < (files[f].tokens - 1) / T; ++j) w.push_back({first_file + static_cast<int>(f), j * T});
  return w;
}

// The window of global slot `slot` for datasets `sets` with `weights` (empty: one dataset), by the
// documented rules: blend → (dataset d, sample k) → window k mod W_d of epoch k / W_d, permuted by
// epoch_permutation(W_d, source_seed(seed, d), epoch) when shuffling.
inline Window expected_window(const std::vector<std::vector<Window>>& sets, const std::vector<double>& weights,
                              bool shuffle, uint64_t seed, int64_t slot) {
  BlendSchedule blend(weights.empty() ? std::vector<double>{1.0} : weights);
  const BlendSlot b = blend.at(slot);
  const auto& set = sets[static_cast<size_t>(b.source)];
  const int64_t W = static_cast<int64_t>(set.size());
  int64_t w = b.index % W;
  if (shuffle)
    w = epoch_permutation(static_cast<uint32_t>(W), source_seed(seed, b.source), b.index / W)[static_cast<size_t>(w)];
  return set[static_cast<size_t>(w)];
}

// A batch's tensors as host vectors (copied from the device if needed).
struct HostRows {
  std::vector<int32_t> inputs, targets;
};
inline HostRows to_host(const LoadedBatch& b) {
  HostRows h;
  for (auto [t, out] : {std::pair{&b.inputs, &h.inputs}, std::pair{&b.targets, &h.targets}}) {
    Tensor host = t->device().is_cpu() ? *t : Tensor::empty(t->shape(), t->dtype());
    if (!t->device().is_cpu()) ops::copy(host, *t);
    out->assign(host.data<int32_t>(), host.data<int32_t>() + host.numel());
  }
  return h;
}

// Checks that row r of a batch is the window `w` of `files`, read directly from the file.
inline void expect_row(const HostRows& h, int64_t r, int64_t T, const std::vector<TokenFile>& files, const Window& w,
                       const std::string& what) {
  const std::vector<int32_t> want = direct_read(files[static_cast<size_t>(w.file)].path, w.offset, T + 1);
  for (int64_t t = 0; t < T; ++t) {
    ASSERT_EQ(h.inputs[static_cast<size_t>(r * T + t)], want[static_cast<size_t>(t)])
        << what << " row " << r << " t " << t << " (file " << files[static_cast<size_t>(w.file)].path << " offset "
        << w.offset << ")";
    ASSERT_EQ(h.targets[static_cast<size_t>(r * T + t)], want[static_cast<size_t>(t + 1)])
        << what << " row " << r << " target t " << t;
  }
}

inline DataSpec spec_of(const std::vector<TokenFile>& files) {
  DataSpec s;
  SourceSpec src;
  for (const TokenFile& f : files) src.paths.push_back(f.path);
  s.sources.push_back(src);
  return s;
}

}  // namespace tetra::data::loadertest
