#include "data/data_spec.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "runtime/error.h"

namespace tetra::data {

DataSpec DataSpec::single(const std::string& path, const std::string& key) {
  DataSpec s;
  s.sources.push_back(SourceSpec{{path}, 1.0});
  s.key = key;
  return s;
}

bool is_glob(const std::string& pattern) { return pattern.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> glob_sorted(const std::string& pattern, const std::string& key) {
  glob_t g{};
  // GLOB_ERR: an unreadable directory is an error, not an empty match.
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOSPACE) TETRA_FAIL(Data, key, ": out of memory expanding ", pattern);
  if (rc == GLOB_ABORTED)
    TETRA_FAIL(Data, key, ": cannot read the directory of pattern ", pattern, "; check that it exists and is readable");
  if (out.empty())
    TETRA_FAIL(Data, key, ": no file matches ", pattern, " (working directory ",
               std::filesystem::current_path().string(), "); check the pattern, or make the shards first");
  std::sort(out.begin(), out.end());  // glob sorts by the locale; shard order must not depend on it
  // Directories that match are not shards.
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const std::string& p) { return std::filesystem::is_directory(p); }),
            out.end());
  if (out.empty()) TETRA_FAIL(Data, key, ": pattern ", pattern, " matches only directories, no files");
  return out;
}

namespace {

// The token files of a glob: its matches, where PREFIX.bin is dropped when PREFIX.idx matched too
// (the two files of one Megatron dataset).
std::vector<std::string> glob_files(const std::string& pattern, const std::string& key) {
  std::vector<std::string> out = glob_sorted(pattern, key);
  const std::set<std::string> all(out.begin(), out.end());
  out.erase(std::remove_if(out.begin(), out.end(),
                           [&](const std::string& p) {
                             const std::filesystem::path f(p);
                             if (f.extension() != ".bin") return false;
                             return all.count((f.parent_path() / f.stem()).string() + ".idx") > 0;
                           }),
            out.end());
  return out;
}

// The Megatron dataset a path names, as a canonical key ("PREFIX"); "" when not one. PREFIX.bin
// counts only where PREFIX.idx lies beside it.
std::string megatron_key(const std::string& p) {
  const std::filesystem::path f(p);
  std::error_code ec;
  if (f.extension() == ".idx") return (f.parent_path() / f.stem()).string();
  if (f.extension() == ".bin" && std::filesystem::exists((f.parent_path() / f.stem()).string() + ".idx", ec))
    return (f.parent_path() / f.stem()).string();
  if (!std::filesystem::exists(f, ec) && std::filesystem::exists(p + ".idx", ec)) return p;
  return "";
}

}  // namespace

std::vector<std::string> expand_shards(const SourceSpec& source, const std::string& key) {
  if (source.paths.empty()) TETRA_FAIL(Data, key, ": a dataset needs at least one path");
  std::vector<std::string> files;
  for (const std::string& p : source.paths) {
    if (p.empty()) TETRA_FAIL(Data, key, ": an empty path; give a token file or a glob such as data/train_*.bin");
    if (is_glob(p)) {
      for (std::string& f : glob_files(p, key)) files.push_back(std::move(f));
    } else {
      std::error_code ec;
      if (!std::filesystem::exists(p, ec) && megatron_key(p).empty())
        TETRA_FAIL(Data, key, ": ", p, " does not exist (working directory ", std::filesystem::current_path(ec).string(),
                   "); make it with `tetra data prepare`, or fix the path");
      files.push_back(p);
    }
  }
  std::set<std::string> seen;
  for (const std::string& f : files) {
    std::error_code ec;
    const std::string key_path = megatron_key(f);
    std::string canon = std::filesystem::weakly_canonical(key_path.empty() ? f : key_path, ec).string();
    if (ec) canon = f;
    if (!seen.insert(canon).second)
      TETRA_FAIL(Data, key, ": shard ", f, " is listed twice (directly or through a glob); a shard may appear once "
                 "per dataset — use blend weights to read one more often");
  }
  return files;
}

}  // namespace tetra::data
