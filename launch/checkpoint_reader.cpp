#include "launch/checkpoint_reader.h"

#include <algorithm>
#include <filesystem>

#include "launch/checkpoint_checksum.h"
#include "launch/checkpoint_files.h"
#include "launch/checkpoint_shard.h"
#include "runtime/hdf5_file.h"
#include "runtime/ops.h"

namespace tetra::launch {

namespace fs = std::filesystem;

CheckpointReader::CheckpointReader(const std::string& step_dir) : dir_(step_dir), meta_(read_meta(step_dir)) {
  const std::string where = (fs::path(dir_) / kMetaFile).string();
  // A step_N directory holds the state after step N: one copied or renamed by hand would resume
  // at the wrong position.
  fs::path dir_path = fs::path(dir_).lexically_normal();
  if (dir_path.filename().empty()) dir_path = dir_path.parent_path();  // "step_4/"
  const std::optional<int64_t> named = parse_step_dir(dir_path.filename().string());
  if (named && *named != meta_.step)
    TETRA_FAIL(Checkpoint, where, ": holds the state after step ", meta_.step, ", but its directory is named ",
               step_dir_name(*named), " (copied or renamed by hand?)");
  for (size_t i = 0; i < meta_.params.size(); ++i) param_index_[meta_.params[i].name] = i;
  for (size_t f = 0; f < meta_.files.size(); ++f) {
    for (const SavedPiece& s : meta_.files[f].pieces) {
      const ParamInfo* p = param(s.name);
      if (!p) TETRA_FAIL(Checkpoint, where, ": ", meta_.files[f].file, " holds a piece of '", s.name,
                         "', which is not among the checkpoint's parameters");
      if (s.begin < 0 || s.end <= s.begin || s.end > shape_numel(p->full_shape))
        TETRA_FAIL(Checkpoint, where, ": piece [", s.begin, ", ", s.end, ") of '", s.name, "' in ",
                   meta_.files[f].file, " lies outside its ", shape_numel(p->full_shape), " elements");
      sources_[s.name].push_back({static_cast<int>(f), s});
    }
  }
  // Every parameter covered exactly once: sorted pieces must tile [0, numel).
  for (const ParamInfo& p : meta_.params) {
    auto& src = sources_[p.name];
    std::sort(src.begin(), src.end(), [](const Source& a, const Source& b) { return a.piece.begin < b.piece.begin; });
    int64_t next = 0;
    for (const Source& s : src) {
      if (s.piece.begin != next)
        TETRA_FAIL(Checkpoint, where, ": the pieces of '", p.name, "' ",
                   s.piece.begin > next ? "leave a gap" : "overlap", " at element ", std::min(next, s.piece.begin),
                   " (the rank files do not hold the whole state)");
      next = s.piece.end;
    }
    if (next != shape_numel(p.full_shape))
      TETRA_FAIL(Checkpoint, where, ": the pieces of '", p.name, "' cover ", next, " of its ",
                 shape_numel(p.full_shape), " elements");
  }
}

CheckpointReader::~CheckpointReader() = default;

const ParamInfo* CheckpointReader::param(const std::string& name) const {
  auto it = param_index_.find(name);
  return it == param_index_.end() ? nullptr : &meta_.params[it->second];
}

std::string CheckpointReader::verify(int offset, int stride) const {
  for (size_t i = static_cast<size_t>(offset); i < meta_.files.size(); i += static_cast<size_t>(stride)) {
    const RankFileInfo& f = meta_.files[i];
    const std::string path = (fs::path(dir_) / f.file).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) return f.file + " is missing";
    const uint64_t size = fs::file_size(path, ec);
    if (ec) return f.file + ": cannot read its size: " + ec.message();
    if (size != f.bytes)
      return f.file + " has " + std::to_string(size) + " bytes but meta.json says " + std::to_string(f.bytes) +
             " (cut short or rewritten)";
    FileDigest d;
    try {
      d = digest_file(path);
    } catch (const Error& e) {
      return e.what();
    }
    if (d.crc32 != f.crc32)
      return f.file + ": CRC-32 " + crc32_hex(d.crc32) + " but meta.json says " + crc32_hex(f.crc32) +
             " (the file was damaged or changed after the checkpoint was written)";
  }
  return "";
}

Hdf5File& CheckpointReader::open(int file) {
  auto it = open_.find(file);
  if (it != open_.end()) return *it->second;
  auto f = std::make_unique<Hdf5File>((fs::path(dir_) / meta_.files[static_cast<size_t>(file)].file).string(),
                                      Hdf5File::Mode::Read);
  return *open_.emplace(file, std::move(f)).first->second;
}

void CheckpointReader::read_range(const std::string& name, int64_t begin, int64_t end, const char* dataset,
                                  float* out) {
  for (const Source& s : sources_.at(name)) {
    const int64_t lo = std::max(begin, s.piece.begin), hi = std::min(end, s.piece.end);
    if (lo >= hi) continue;
    Hdf5File& f = open(s.file);
    const std::string ds = piece_group(name, s.piece.begin, s.piece.end) + "/" + dataset;
    f.read_range(ds, lo - s.piece.begin, hi - lo, DType::F32, out + (lo - begin));
  }
}

void CheckpointReader::fill(StatePiece& piece) {
  const ParamInfo* p = param(piece.name);
  if (!p)
    TETRA_FAIL(Checkpoint, dir_, ": has no parameter '", piece.name,
               "' (a checkpoint of another model? compare the model section of its meta.json with the config)");
  if (p->full_shape != piece.full_shape)
    TETRA_FAIL(Checkpoint, dir_, ": parameter '", piece.name, "' has shape ", shape_str(p->full_shape),
               " but the model needs ", shape_str(piece.full_shape),
               " (a checkpoint of another model size? check model.* against its meta.json)");
  const int64_t n = piece.end - piece.begin;
  TETRA_CHECK(piece.begin >= 0 && n >= 0 && piece.end <= shape_numel(p->full_shape), "fill: piece [", piece.begin,
              ", ", piece.end, ") of ", piece.name, " out of range");
  struct Target {
    Tensor* tensor;
    const char* dataset;
  };
  Tensor staging;
  for (Target t : {Target{&piece.master, "master"}, Target{&piece.exp_avg, "exp_avg"},
                   Target{&piece.exp_avg_sq, "exp_avg_sq"}}) {
    TETRA_CHECK(t.tensor->defined() && t.tensor->numel() == n, "fill: ", piece.name, " ", t.dataset, " is ",
                t.tensor->defined() ? t.tensor->describe() : std::string("undefined"), ", needs ", n, " elements");
    if (t.tensor->device().is_cpu() && t.tensor->dtype() == DType::F32) {
      read_range(piece.name, piece.begin, piece.end, t.dataset, t.tensor->data<float>());
    } else {
      if (!staging.defined()) staging = Tensor::empty({n}, DType::F32);
      read_range(piece.name, piece.begin, piece.end, t.dataset, staging.data<float>());
      Tensor dst = t.tensor->view({n});
      ops::copy(dst, staging);
    }
  }
}

Tensor CheckpointReader::full_master(const std::string& name, const Shape& full_shape) {
  const ParamInfo* p = param(name);
  if (!p) TETRA_FAIL(Checkpoint, dir_, ": has no parameter '", name, "'");
  if (p->full_shape != full_shape)
    TETRA_FAIL(Checkpoint, dir_, ": parameter '", name, "' has shape ", shape_str(p->full_shape), " but ",
               shape_str(full_shape), " was expected");
  Tensor t = Tensor::empty(full_shape, DType::F32);
  read_range(name, 0, t.numel(), "master", t.data<float>());
  return t;
}

}  // namespace tetra::launch
