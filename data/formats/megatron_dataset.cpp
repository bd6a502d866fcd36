#include "data/formats/megatron_dataset.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"

namespace tetra::data {

static_assert(std::endian::native == std::endian::little, "Megatron datasets are read on little-endian hosts only");

namespace {

namespace fs = std::filesystem;

constexpr int64_t kChunk = int64_t{1} << 20;  // index entries validated per read (8 MiB of int64)

struct DtypeInfo {
  const char* name;
  int bytes;
};

// The dtypes of Megatron's DType enum, by code; {nullptr, 0} for an unknown code.
DtypeInfo dtype_of(int code) {
  switch (code) {
    case 1: return {"uint8", 1};
    case 2: return {"int8", 1};
    case 3: return {"int16", 2};
    case 4: return {"int32", 4};
    case 5: return {"int64", 8};
    case 6: return {"float64", 8};
    case 7: return {"float32", 4};
    case 8: return {"uint16", 2};
    default: return {nullptr, 0};
  }
}

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The token id stored as `code` at p, or -1 when the value is not one (negative, fractional, >= 2^32).
int64_t id_at(int code, const unsigned char* p) {
  switch (code) {
    case 1: return *p;
    case 2: return static_cast<int8_t>(*p);
    case 3: return load<int16_t>(p);
    case 4: return load<int32_t>(p);
    case 5: return load<int64_t>(p);
    case 8: return load<uint16_t>(p);
    default: {
      const double v = code == 6 ? load<double>(p) : static_cast<double>(load<float>(p));
      if (!(v >= 0 && v < 4294967296.0) || std::floor(v) != v) return -1;
      return static_cast<int64_t>(v);
    }
  }
}

bool is_file(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

std::string MegatronDataset::prefix_of(const std::string& path) {
  const fs::path p(path);
  if (p.extension() == ".idx") return (p.parent_path() / p.stem()).string();
  if (p.extension() == ".bin") {
    const std::string prefix = (p.parent_path() / p.stem()).string();
    return is_file(prefix + ".idx") ? prefix : "";
  }
  std::error_code ec;
  if (!fs::exists(p, ec) && is_file(path + ".idx")) return path;
  return "";
}

MegatronDataset::MegatronDataset(const std::string& prefix)
    : TokenDataset(prefix), idx_(prefix + ".idx", "Megatron index"), bin_(prefix + ".bin", "Megatron data file") {
  read_header();
  check_documents();
  check_sequences();
  id_limit_ = 0;  // no vocabulary in the format: check_vocab sets the model's
}

std::string MegatronDataset::format() const {
  return std::string("megatron indexed (") + dtype_of(code_).name + ")";
}

void MegatronDataset::read_header() {
  const std::string& path = idx_.path();
  if (idx_.size() < kHeaderBytes)
    TETRA_FAIL(Data, "Megatron index ", path, " is truncated: ", idx_.size(), " bytes, shorter than its ", kHeaderBytes,
               "-byte header");
  unsigned char h[kHeaderBytes];
  idx_.read_exact(h, kHeaderBytes, 0, "header");
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0)
    TETRA_FAIL(Data, "Megatron index ", path, " has wrong magic bytes (expected \"MMIDIDX\\0\\0\"); it is not an index "
               "written by Megatron-LM's indexed_dataset");
  const uint64_t version = load<uint64_t>(h + 9);
  if (version != 1)
    TETRA_FAIL(Data, "Megatron index ", path, " has version ", version, "; tetra reads version 1");
  code_ = h[17];
  const DtypeInfo dt = dtype_of(code_);
  if (!dt.name)
    TETRA_FAIL(Data, "Megatron index ", path, " has unknown dtype code ", code_,
               " (Megatron writes 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)");
  item_bytes_ = dt.bytes;
  const uint64_t s = load<uint64_t>(h + 18), d = load<uint64_t>(h + 26);
  // Sizes in 64 bits without overflow: a count beyond the file's bytes is already a truncated index.
  const uint64_t room = static_cast<uint64_t>(idx_.size() - kHeaderBytes);
  const bool fits = s <= room / 12 && d <= room / 8 && 12 * s + 8 * d <= room;
  const int64_t need = fits ? kHeaderBytes + static_cast<int64_t>(12 * s + 8 * d) : -1;
  if (!fits)
    TETRA_FAIL(Data, "Megatron index ", path, " is truncated: its header declares ", s, " sequences and ", d,
               " document entries, more than its ", idx_.size(), " bytes hold; re-create or re-download it");
  sequences_ = static_cast<int64_t>(s);
  doc_entries_ = static_cast<int64_t>(d);
  // Multimodal indices append one mode byte per sequence.
  if (idx_.size() != need && idx_.size() != need + sequences_)
    TETRA_FAIL(Data, "Megatron index ", path, " has ", idx_.size(), " bytes but its header (", s, " sequences, ", d,
               " document entries) needs ", need, " (or ", need + sequences_,
               " with sequence modes); the index is corrupt or does not belong to this version");
  if (sequences_ == 0) TETRA_FAIL(Data, "Megatron dataset ", path_, " holds no sequences");
  token_dtype_ = code_ == 8 ? DType::U16 : DType::U32;
  contiguous_offset_ = code_ == 8 || code_ == 4 ? 0 : -1;
}

void MegatronDataset::check_sequences() {
  const int64_t len_at = kHeaderBytes, ptr_at = kHeaderBytes + 4 * sequences_;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  int64_t bytes = 0;  // where the next sequence must start
  for (int64_t first = 0; first < sequences_; first += kChunk) {
    const int64_t n = std::min(kChunk, sequences_ - first);
    lengths.resize(static_cast<size_t>(n));
    pointers.resize(static_cast<size_t>(n));
    idx_.read_exact(lengths.data(), 4 * n, len_at + 4 * first, "sequence lengths");
    idx_.read_exact(pointers.data(), 8 * n, ptr_at + 8 * first, "sequence pointers");
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = first + j, len = lengths[static_cast<size_t>(j)], ptr = pointers[static_cast<size_t>(j)];
      if (len < 0) TETRA_FAIL(Data, "Megatron index ", idx_.path(), ": sequence ", i, " has length ", len);
      if (ptr < 0 || ptr > bin_.size() || len > (bin_.size() - ptr) / item_bytes_)
        TETRA_FAIL(Data, "Megatron index ", idx_.path(), ": sequence ", i, " (", len, " tokens at byte ", ptr,
                   ") runs past the end of ", bin_.path(), " (", bin_.size(), " bytes); the data file is truncated "
                   "or belongs to another index");
      if (ptr != bytes)
        TETRA_FAIL(Data, "Megatron index ", idx_.path(), ": sequence ", i, " starts at byte ", ptr, " but the ",
                   "sequences before it end at byte ", bytes, "; tetra reads datasets whose sequences follow each "
                   "other, as Megatron's builder writes them");
      bytes += len * item_bytes_;
    }
  }
  if (bytes != bin_.size())
    TETRA_FAIL(Data, "Megatron data file ", bin_.path(), " has ", bin_.size(), " bytes but its index ", idx_.path(),
               " describes ", bytes, "; the pair does not match");
  size_ = bytes / item_bytes_;
  if (size_ == 0) TETRA_FAIL(Data, "Megatron dataset ", path_, " holds no tokens (every sequence is empty)");
}

void MegatronDataset::check_documents() {
  if (doc_entries_ < 1)
    TETRA_FAIL(Data, "Megatron index ", idx_.path(), " has no document indices (expected 0, then the end of each "
               "document)");
  const int64_t at = kHeaderBytes + 12 * sequences_;
  std::vector<int64_t> docs;
  int64_t prev = 0;
  for (int64_t first = 0; first < doc_entries_; first += kChunk) {
    const int64_t n = std::min(kChunk, doc_entries_ - first);
    docs.resize(static_cast<size_t>(n));
    idx_.read_exact(docs.data(), 8 * n, at + 8 * first, "document indices");
    for (int64_t j = 0; j < n; ++j) {
      const int64_t v = docs[static_cast<size_t>(j)];
      if ((first + j == 0 && v != 0) || v < prev || v > sequences_)
        TETRA_FAIL(Data, "Megatron index ", idx_.path(), ": document index ", first + j, " is ", v,
                   "; document indices must start at 0, ascend, and stay within the ", sequences_, " sequences");
      prev = v;
    }
  }
  if (prev != sequences_)
    TETRA_FAIL(Data, "Megatron index ", idx_.path(), ": the last document ends at sequence ", prev, " of ",
               sequences_, "; the document indices do not cover the dataset");
  num_docs_ = doc_entries_ - 1;
}

std::vector<int64_t> MegatronDataset::doc_offsets() {
  // Token offset of each sequence start, then of each document's first sequence.
  std::vector<int64_t> seq_start(static_cast<size_t>(sequences_) + 1, 0);
  std::vector<int32_t> lengths(static_cast<size_t>(sequences_));
  idx_.read_exact(lengths.data(), 4 * sequences_, kHeaderBytes, "sequence lengths");
  for (int64_t i = 0; i < sequences_; ++i)
    seq_start[static_cast<size_t>(i) + 1] = seq_start[static_cast<size_t>(i)] + lengths[static_cast<size_t>(i)];
  std::vector<int64_t> docs(static_cast<size_t>(doc_entries_));
  idx_.read_exact(docs.data(), 8 * doc_entries_, kHeaderBytes + 12 * sequences_, "document indices");
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_docs_));
  for (int64_t i = 0; i < num_docs_; ++i) out.push_back(seq_start[static_cast<size_t>(docs[static_cast<size_t>(i)])]);
  return out;
}

void MegatronDataset::read_ids(int64_t offset, int64_t count, int32_t* out) {
  if (code_ == 4) {  // int32: the bit patterns are the ids (TokenDataset::read rejects negatives)
    bin_.read_exact(out, 4 * count, 4 * offset, "tokens");
    return;
  }
  const size_t bytes = static_cast<size_t>(count) * static_cast<size_t>(item_bytes_);
  if (staging_.size() < bytes) staging_.resize(bytes);
  bin_.read_exact(staging_.data(), static_cast<int64_t>(bytes), offset * item_bytes_, "tokens");
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = id_at(code_, staging_.data() + i * item_bytes_);
    if (id < 0 || id > 0xffffffffLL)
      TETRA_FAIL(Data, "Megatron dataset ", path_, ": the ", dtype_of(code_).name, " value at token offset ",
                 offset + i, " is not a token id (negative, fractional or >= 2^32); the file is corrupt");
    out[i] = static_cast<int32_t>(static_cast<uint32_t>(id));
  }
}

}  // namespace tetra::data
