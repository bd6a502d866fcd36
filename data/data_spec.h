// What a run reads: `data.train` / `data.val` as data. A dataset is one or more token files
// (shards, given as paths or globs, concatenated in the order listed, each glob's matches sorted
// by name); a training blend is several datasets, each drawn with its weight (docs/data.md):
//   data.train: data/tiny/train.h5                                   one file
//   data.train: "data/fineweb_train_*.bin"                           the shards a glob matches
//   data.train: [a.bin, b.bin]                                       shards of one dataset
//   data.train: [{path: a.h5, weight: 0.7}, {path: "b_*.bin", weight: 0.3}]    a blend
// The config layer parses the YAML into this struct; the data layer only expands and opens it.
#pragma once
#include <string>
#include <vector>

namespace tetra::data {

// One dataset: its shards, as paths or globs, in order; and its share of a blend.
struct SourceSpec {
  std::vector<std::string> paths;
  double weight = 1.0;  // > 0; only the ratios between sources matter
};

struct DataSpec {
  std::vector<SourceSpec> sources;  // empty: not set
  bool blend = false;               // written with weights (a list of {path, weight} entries)
  std::string key = "data.train";   // the config key it came from, for messages

  bool empty() const { return sources.empty(); }
  // A one-source spec of `path` (a file or a glob).
  static DataSpec single(const std::string& path, const std::string& key = "data.train");
};

// True when `pattern` holds glob characters (*, ?, [).
bool is_glob(const std::string& pattern);

// The files `pattern` matches, sorted by name (not by locale), directories left out; a Data error
// naming `key` when it matches no file or its directory cannot be read.
std::vector<std::string> glob_sorted(const std::string& pattern, const std::string& key);

// The files of one source, in order: each path as is (it must exist, or be the prefix of a Megatron
// dataset), each glob's matches sorted by name (it must match at least one file; where it matches
// both PREFIX.bin and PREFIX.idx of a Megatron dataset, the pair counts once, as PREFIX.idx).
// Duplicates are an error (a shard would be read twice as
// often as the others). Throws a Data error naming the key and the path or pattern.
std::vector<std::string> expand_shards(const SourceSpec& source, const std::string& key);

}  // namespace tetra::data
