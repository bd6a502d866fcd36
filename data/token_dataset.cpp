#include "data/token_dataset.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "data/formats/megatron_dataset.h"
#include "data/hdf5_dataset.h"
#include "data/llmc_bin_dataset.h"
#include "runtime/error.h"

namespace tetra::data {

namespace {

constexpr unsigned char kHdf5Signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

bool has_bin_suffix(const std::string& path) {
  return std::filesystem::path(path).extension() == ".bin";
}

}  // namespace

std::unique_ptr<TokenDataset> TokenDataset::open(const std::string& path) {
  // A Megatron dataset is named by its prefix or either file; an llm.c shard with an index beside it
  // is still read as llm.c (its magic decides below).
  if (const std::string prefix = MegatronDataset::prefix_of(path); !prefix.empty()) {
    if (std::filesystem::path(path).extension() != ".bin" || !LlmcBinDataset::has_magic(path))
      return std::make_unique<MegatronDataset>(prefix);
  }
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    TETRA_FAIL(Data, "dataset ", path, " does not exist; check the data path in the config");
  if (std::filesystem::is_directory(status))
    TETRA_FAIL(Data, "dataset ", path, " is a directory, not a token file (HDF5 or llm.c .bin)");

  // The first 8 bytes decide: the HDF5 signature, or the .bin magic in the first int32 word.
  unsigned char head[8] = {};
  size_t got = 0;
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) TETRA_FAIL(Data, "cannot open dataset ", path, ": ", std::strerror(errno));
    got = std::fread(head, 1, sizeof head, f);
    bool failed = std::ferror(f);
    std::fclose(f);
    if (failed) TETRA_FAIL(Data, "cannot read dataset ", path, ": I/O error on its first bytes");
  }

  if (got == sizeof head && std::memcmp(head, kHdf5Signature, sizeof head) == 0)
    return std::make_unique<Hdf5Dataset>(path);
  int32_t first_word = 0;
  if (got >= 4) std::memcpy(&first_word, head, 4);
  if (got >= 4 && (first_word == LlmcBinDataset::kMagic || first_word == LlmcBinDataset::kMagicV7))
    return std::make_unique<LlmcBinDataset>(path);

  // HDF5 files with a user block carry the signature at 512, 1024, ... : let HDF5 look.
  silence_hdf5_errors();
  if (H5Fis_hdf5(path.c_str()) > 0) return std::make_unique<Hdf5Dataset>(path);
  H5Eclear2(H5E_DEFAULT);

  if (has_bin_suffix(path)) {
    if (got < 4)
      TETRA_FAIL(Data, "llm.c shard ", path, " is truncated: ", got, " bytes, shorter than its 1024-byte header");
    TETRA_FAIL(Data, "llm.c shard ", path, " has wrong magic number ", first_word, " (expected ",
               LlmcBinDataset::kMagic, " or ", LlmcBinDataset::kMagicV7, "), and no Megatron index ",
               (std::filesystem::path(path).parent_path() / std::filesystem::path(path).stem()).string(),
               ".idx lies beside it; it is not a token file (model .bin files are not datasets)");
  }
  TETRA_FAIL(Data, "dataset ", path, " is neither an HDF5 file, an llm.c .bin token shard nor a Megatron dataset (",
             got == 0 ? "the file is empty" : "unrecognised first bytes",
             "); make one with `tetra data prepare`");
}

void TokenDataset::check_vocab(int64_t model_vocab) {
  TETRA_CHECK(model_vocab > 0, "check_vocab needs a positive model vocabulary size, got ", model_vocab);
  if (vocab_size_ > model_vocab)
    TETRA_FAIL(Data, "dataset ", path_, " was tokenized with vocab_size ", vocab_size_,
               " (tokenizer '", tokenizer_, "') but the model's vocab_size is ", model_vocab,
               "; use a model with vocab_size >= ", vocab_size_, " or re-tokenize the data");
  if (vocab_size_ > 0) {
    id_limit_ = vocab_size_;
    limit_from_model_ = false;
  } else {
    id_limit_ = model_vocab;
    limit_from_model_ = true;
  }
}

void TokenDataset::read(int64_t offset, int64_t count, int32_t* out) {
  if (offset < 0 || count < 0 || offset > size_ || count > size_ - offset)
    TETRA_FAIL(Data, "read of tokens [", offset, ", ", offset + count, ") is past the end of dataset ", path_,
               " (", size_, " tokens)");
  if (count == 0) return;
  TETRA_CHECK(out != nullptr, "TokenDataset::read into a null buffer");
  read_ids(offset, count, out);

  // Ids arrive as uint32 bit patterns: compare unsigned so that ids >= 2^31 fail as well.
  const uint64_t limit = id_limit_ > 0 ? static_cast<uint64_t>(id_limit_) : (uint64_t{1} << 31);
  for (int64_t i = 0; i < count; ++i) {
    uint32_t id = static_cast<uint32_t>(out[i]);
    if (id >= limit) fail_bad_token(path_, id, offset + i, id_limit_, limit_from_model_);
  }
}

void fail_bad_token(const std::string& path, uint32_t id, int64_t offset, int64_t limit, bool limit_from_model) {
  if (limit == 0)
    TETRA_FAIL(Data, "dataset ", path, ": token id ", id, " at token offset ", offset,
               " does not fit in int32; the file is corrupt");
  TETRA_FAIL(Data, "dataset ", path, ": token id ", id, " at token offset ", offset,
             " is outside the vocabulary (", limit_from_model ? "model" : "dataset", " vocab_size ", limit,
             "); the file is corrupt or was made with another tokenizer");
}

}  // namespace tetra::data
