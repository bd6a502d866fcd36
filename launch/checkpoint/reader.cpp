#include "launch/checkpoint/reader.h"

#include <algorithm>
#include <array>
#include <climits>
#include <filesystem>

#include "launch/checkpoint/checksum.h"
#include "launch/checkpoint/files.h"
#include "launch/checkpoint/shard.h"
#include "runtime/hdf5_file.h"
#include "runtime/ops.h"

namespace tetra::launch {

namespace fs = std::filesystem;

namespace {

// The box a piece covers: its own, or the whole tensor.
TensorBox box_of(const SavedPiece& s, const Shape& full) { return s.box.shape.empty() ? whole_box(full) : s.box; }

// For every run of elements that lies in both (box a, its flat range [a0, a1)) and (box b, [b0, b1)):
// f(index in a's flattening, index in b's flattening, length). Runs go as far as both boxes keep
// the elements contiguous: whole rows of a row-split pair, the whole overlap of equal boxes.
template <class F>
void for_each_common_run(const TensorBox& a, int64_t a0, int64_t a1, const TensorBox& b, int64_t b0, int64_t b1, F&& f) {
  if (a == b) {
    const int64_t lo = std::max(a0, b0), hi = std::min(a1, b1);
    if (lo < hi) f(lo, lo, hi - lo);
    return;
  }
  const TensorBox in = intersect(a, b);
  if (in.numel() == 0) return;
  const size_t nd = in.shape.size();
  size_t d = nd - 1;
  while (d > 0 && in.shape[d] == a.shape[d] && in.shape[d] == b.shape[d]) --d;
  int64_t run = 1;
  for (size_t k = d; k < nd; ++k) run *= in.shape[k];
  std::vector<int64_t> sa(nd, 1), sb(nd, 1);
  for (size_t k = nd - 1; k > 0; --k) {
    sa[k - 1] = sa[k] * a.shape[k];
    sb[k - 1] = sb[k] * b.shape[k];
  }
  std::vector<int64_t> idx(d, 0);
  const int64_t lines = in.numel() / run;
  for (int64_t line = 0; line < lines; ++line) {
    int64_t pa = (in.offset[d] - a.offset[d]) * sa[d], pb = (in.offset[d] - b.offset[d]) * sb[d];
    for (size_t k = 0; k < d; ++k) {
      pa += (in.offset[k] + idx[k] - a.offset[k]) * sa[k];
      pb += (in.offset[k] + idx[k] - b.offset[k]) * sb[k];
    }
    const int64_t lo = std::max({int64_t{0}, a0 - pa, b0 - pb}), hi = std::min({run, a1 - pa, b1 - pb});
    if (lo < hi) f(pa + lo, pb + lo, hi - lo);
    for (size_t k = d; k-- > 0;) {
      if (++idx[k] < in.shape[k]) break;
      idx[k] = 0;
    }
  }
}

bool inside(const TensorBox& box, const Shape& full) {
  if (box.offset.size() != full.size() || box.shape.size() != full.size()) return false;
  for (size_t d = 0; d < full.size(); ++d)
    if (box.offset[d] < 0 || box.shape[d] < 0 || box.offset[d] + box.shape[d] > full[d]) return false;
  return true;
}

}  // namespace

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
      const TensorBox box = box_of(s, p->full_shape);
      if (!inside(box, p->full_shape))
        TETRA_FAIL(Checkpoint, where, ": piece ", box.str(), " of '", s.name, "' in ", meta_.files[f].file,
                   " lies outside its shape ", shape_str(p->full_shape));
      if (s.begin < 0 || s.end <= s.begin || s.end > box.numel())
        TETRA_FAIL(Checkpoint, where, ": piece [", s.begin, ", ", s.end, ") of '", s.name, "' in ",
                   meta_.files[f].file, " lies outside its ", box.numel(), " elements");
      sources_[s.name].push_back({static_cast<int>(f), s});
    }
  }
  // Every parameter covered exactly once: the pieces of one box tile flat ranges of it without
  // overlapping, pieces of different boxes share no element, and all together hold numel elements.
  for (const ParamInfo& p : meta_.params) {
    auto& src = sources_[p.name];
    std::sort(src.begin(), src.end(), [&](const Source& a, const Source& b) {
      const TensorBox ba = box_of(a.piece, p.full_shape), bb = box_of(b.piece, p.full_shape);
      if (ba.offset != bb.offset) return ba.offset < bb.offset;
      if (ba.shape != bb.shape) return ba.shape < bb.shape;
      return a.piece.begin < b.piece.begin;
    });
    auto overlap = [&](const Source& a, const Source& b, int64_t element, const TensorBox& box) {
      TETRA_FAIL(Checkpoint, where, ": the pieces of '", p.name, "' overlap (", meta_.files[a.file].file, " and ",
                 meta_.files[b.file].file, " both hold element ", element, " of box ", box.str(),
                 "): the rank files do not describe one state");
    };
    // The pieces of one box (adjacent after the sort) tile it: each starts where the last ended.
    std::vector<std::pair<size_t, size_t>> groups;  // [first, last) of src per distinct box
    int64_t covered = 0;
    auto gap = [&](int64_t element, const TensorBox& b) {
      TETRA_FAIL(Checkpoint, where, ": the pieces of '", p.name, "' leave a gap at element ", element,
                 is_whole(b, p.full_shape) ? std::string() : " of box " + b.str(),
                 " (the rank files do not hold the whole state)");
    };
    for (size_t i = 0; i < src.size(); ++i) {
      covered += src[i].piece.end - src[i].piece.begin;
      const TensorBox b = box_of(src[i].piece, p.full_shape);
      const bool same = i > 0 && box_of(src[i - 1].piece, p.full_shape) == b;
      if (same) {
        groups.back().second = i + 1;
        if (src[i].piece.begin < src[i - 1].piece.end) overlap(src[i - 1], src[i], src[i].piece.begin, b);
        if (src[i].piece.begin > src[i - 1].piece.end) gap(src[i - 1].piece.end, b);
      } else {
        if (i > 0 && src[i - 1].piece.end < box_of(src[i - 1].piece, p.full_shape).numel())
          gap(src[i - 1].piece.end, box_of(src[i - 1].piece, p.full_shape));
        if (src[i].piece.begin > 0) gap(0, b);
        groups.emplace_back(i, i + 1);
      }
    }
    // Different boxes that intersect (never, for the boxes of one tensor-parallel layout): no element
    // may lie in a piece of each.
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t h = g + 1; h < groups.size(); ++h) {
        const TensorBox bg = box_of(src[groups[g].first].piece, p.full_shape);
        const TensorBox bh = box_of(src[groups[h].first].piece, p.full_shape);
        if (intersect(bg, bh).numel() == 0) continue;
        for (size_t a = groups[g].first; a < groups[g].second; ++a)
          for (size_t b = groups[h].first; b < groups[h].second; ++b)
            for_each_common_run(bg, src[a].piece.begin, src[a].piece.end, bh, src[b].piece.begin, src[b].piece.end,
                                [&](int64_t at, int64_t, int64_t) { overlap(src[a], src[b], at, bg); });
      }
    if (covered != shape_numel(p.full_shape))
      TETRA_FAIL(Checkpoint, where, ": the pieces of '", p.name, "' cover ", covered, " of its ",
                 shape_numel(p.full_shape), " elements (the rank files do not hold the whole state)");
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
    const fs::file_status st = fs::status(path, ec);
    if (st.type() == fs::file_type::not_found) return f.file + " is missing";
    if (ec) throw CheckpointUnreadable(path + ": cannot look at it: " + ec.message());
    if (st.type() != fs::file_type::regular)
      throw CheckpointUnreadable(path + ": not a regular file (a directory or a device?): cannot read it");
    const uint64_t size = fs::file_size(path, ec);
    if (ec) throw CheckpointUnreadable(path + ": cannot read its size: " + ec.message());
    if (size != f.bytes)
      return f.file + " has " + std::to_string(size) + " bytes but meta.json says " + std::to_string(f.bytes) +
             " (cut short or rewritten)";
    FileDigest d;
    try {
      d = digest_file(path);
    } catch (const CheckpointUnreadable&) {
      throw;
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

void CheckpointReader::read_range(const std::string& name, const TensorBox& box, int64_t begin, int64_t end,
                                  const char* dataset, float* out) {
  const Shape& full = param(name)->full_shape;
  const TensorBox want = box.shape.empty() ? whole_box(full) : box;
  std::vector<float> staging;
  for (const Source& s : sources_.at(name)) {
    // The runs this stored piece holds; read the span of the piece they lie in once, then place them.
    std::vector<std::array<int64_t, 3>> runs;  // index in want's flattening, in the piece's box, length
    int64_t lo = INT64_MAX, hi = 0;
    for_each_common_run(want, begin, end, box_of(s.piece, full), s.piece.begin, s.piece.end,
                        [&](int64_t w, int64_t p, int64_t n) {
                          runs.push_back({w, p, n});
                          lo = std::min(lo, p);
                          hi = std::max(hi, p + n);
                        });
    if (runs.empty()) continue;
    Hdf5File& f = open(s.file);
    const std::string ds = piece_group(name, s.piece.box, s.piece.begin, s.piece.end) + "/" + dataset;
    if (runs.size() == 1) {
      f.read_range(ds, lo - s.piece.begin, hi - lo, DType::F32, out + (runs[0][0] - begin));
      continue;
    }
    staging.resize(static_cast<size_t>(hi - lo));
    f.read_range(ds, lo - s.piece.begin, hi - lo, DType::F32, staging.data());
    for (const auto& [w, p, n] : runs)
      std::copy_n(staging.data() + (p - lo), n, out + (w - begin));
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
  const TensorBox box = piece.box.shape.empty() ? whole_box(p->full_shape) : piece.box;
  TETRA_CHECK(inside(box, p->full_shape) && piece.begin >= 0 && n >= 0 && piece.end <= box.numel(), "fill: piece ",
              box.str(), "[", piece.begin, ", ", piece.end, ") of ", piece.name, " out of range");
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
      read_range(piece.name, piece.box, piece.begin, piece.end, t.dataset, t.tensor->data<float>());
    } else {
      if (!staging.defined()) staging = Tensor::empty({n}, DType::F32);
      read_range(piece.name, piece.box, piece.begin, piece.end, t.dataset, staging.data<float>());
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
  read_range(name, TensorBox{}, 0, t.numel(), "master", t.data<float>());
  return t;
}

}  // namespace tetra::launch
