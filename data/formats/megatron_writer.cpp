// Megatron indexed dataset writer: PREFIX.bin.tmp receives the tokens as they come, the sequence
// lengths stay in memory (4 bytes per document), and commit() writes PREFIX.idx.tmp, then renames
// the .bin and last the .idx (a reader opens a dataset through its index).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "data/formats/megatron_dataset.h"
#include "data/formats/token_writer.h"
#include "runtime/error.h"

namespace tetra::data {

namespace {

class MegatronWriter final : public TokenWriter {
 public:
  MegatronWriter(const std::string& prefix, const TokenFileInfo& info)
      : prefix_(prefix), spill_(prefix + ".bin.tmp", info.vocab_size <= 65536 ? 2 : 4) {
    width_ = spill_.width();
  }

  void add_document(const uint32_t* ids, int64_t n) override {
    if (n > std::numeric_limits<int32_t>::max())
      TETRA_FAIL(Data, "document ", documents_, " has ", n, " tokens; a Megatron sequence length is an int32");
    spill_.append(ids, n);
    lengths_.push_back(static_cast<int32_t>(n));
    tokens_ += n;
    ++documents_;
  }

  void commit() override {
    if (tokens_ == 0) TETRA_FAIL(Data, "data prepare: the inputs produced no tokens");
    spill_.finish();
    const std::string idx_tmp = prefix_ + ".idx.tmp";
    try {
      write_index(idx_tmp);
    } catch (...) {
      std::remove(idx_tmp.c_str());
      throw;
    }
    move_into_place(spill_.path(), prefix_ + ".bin");
    spill_.release();
    move_into_place(idx_tmp, prefix_ + ".idx");
  }

  std::string describe_outputs() const override { return prefix_ + ".bin + " + prefix_ + ".idx"; }

 private:
  void write_index(const std::string& path) const {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) TETRA_FAIL(Data, "cannot create ", path, ": ", std::strerror(errno));
    bool ok = true;
    auto put = [&](const void* p, size_t bytes) { ok = ok && std::fwrite(p, 1, bytes, f) == bytes; };
    const uint64_t version = 1, s = lengths_.size(), d = lengths_.size() + 1;
    const uint8_t code = width_ == 2 ? 8 : 4;  // uint16 : int32
    put(MegatronDataset::kMagic, sizeof MegatronDataset::kMagic);
    put(&version, 8);
    put(&code, 1);
    put(&s, 8);
    put(&d, 8);
    put(lengths_.data(), 4 * lengths_.size());
    std::vector<int64_t> v(lengths_.size());
    int64_t at = 0;
    for (size_t i = 0; i < lengths_.size(); ++i) {
      v[i] = at;  // byte offset of sequence i in PREFIX.bin
      at += int64_t{lengths_[i]} * width_;
    }
    put(v.data(), 8 * v.size());
    v.resize(lengths_.size() + 1);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i);  // one sequence per document
    put(v.data(), 8 * v.size());
    const int closed = std::fclose(f);
    if (!ok || closed != 0) TETRA_FAIL(Data, "cannot write ", path, ": ", std::strerror(errno), " (is the disk full?)");
  }

  std::string prefix_;
  TokenSpill spill_;
  std::vector<int32_t> lengths_;
};

}  // namespace

std::unique_ptr<TokenWriter> make_megatron_writer(const std::string& prefix, const TokenFileInfo& info) {
  return std::make_unique<MegatronWriter>(prefix, info);
}

}  // namespace tetra::data
