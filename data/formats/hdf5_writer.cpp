// HDF5 token file writer: the tokens spill to OUT.tokens.tmp as they come; commit() creates
// OUT.tmp with a contiguous, uncompressed /tokens of the final length (so a direct-to-GPU reader
// can address it by file offset), copies the spill into it in bounded slabs, adds /doc_offsets and
// the attributes, and renames it to OUT.
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "data/formats/token_writer.h"
#include "data/hdf5_handle.h"
#include "runtime/error.h"

namespace tetra::data {

namespace {

constexpr int64_t kSlabTokens = int64_t{1} << 22;  // tokens copied from the spill per H5Dwrite

void write_string_attribute(hid_t obj, const char* name, const std::string& value, const std::string& file) {
  H5Handle type = h5_check_id(H5Tcopy(H5T_C_S1), "cannot make a string type", file);
  h5_check(H5Tset_size(type.get(), H5T_VARIABLE), "cannot make a string type", file);
  h5_check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "cannot make a string type", file);
  H5Handle space = h5_check_id(H5Screate(H5S_SCALAR), "cannot make a scalar dataspace", file);
  H5Handle attr = h5_check_id(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                              std::string("cannot create attribute ") + name, file);
  const char* p = value.c_str();
  h5_check(H5Awrite(attr.get(), type.get(), &p), std::string("cannot write attribute ") + name, file);
}

void write_int_attribute(hid_t obj, const char* name, int64_t value, const std::string& file) {
  H5Handle space = h5_check_id(H5Screate(H5S_SCALAR), "cannot make a scalar dataspace", file);
  H5Handle attr = h5_check_id(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                              std::string("cannot create attribute ") + name, file);
  h5_check(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), std::string("cannot write attribute ") + name, file);
}

// A 1-D contiguous dataset `name` of `n` elements of file_type.
H5Handle create_1d(hid_t file, const char* name, hid_t file_type, int64_t n, const std::string& path) {
  const hsize_t dims = static_cast<hsize_t>(n);
  H5Handle space = h5_check_id(H5Screate_simple(1, &dims, nullptr), "cannot make a dataspace", path);
  H5Handle dcpl = h5_check_id(H5Pcreate(H5P_DATASET_CREATE), "cannot make a dataset property list", path);
  h5_check(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), "cannot request a contiguous layout", path);
  return h5_check_id(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                     std::string("cannot create dataset /") + name, path);
}

class Hdf5Writer final : public TokenWriter {
 public:
  Hdf5Writer(const std::string& out, const TokenFileInfo& info)
      : out_(out), info_(info), spill_(out + ".tokens.tmp", info.vocab_size <= 65536 ? 2 : 4) {
    width_ = spill_.width();
  }

  void add_document(const uint32_t* ids, int64_t n) override {
    doc_offsets_.push_back(tokens_);
    spill_.append(ids, n);
    tokens_ += n;
    ++documents_;
  }

  void commit() override {
    if (tokens_ == 0) TETRA_FAIL(Data, "data prepare: the inputs produced no tokens");
    spill_.finish();
    const std::string tmp = out_ + ".tmp";
    try {
      write_file(tmp);
    } catch (...) {
      std::error_code ignore;
      std::filesystem::remove(tmp, ignore);
      throw;
    }
    move_into_place(tmp, out_);
  }

  std::string describe_outputs() const override { return out_; }

 private:
  void copy_tokens(hid_t tokens) const {
    std::FILE* f = std::fopen(spill_.path().c_str(), "rb");
    if (!f) TETRA_FAIL(Data, "cannot reopen ", spill_.path(), ": ", std::strerror(errno));
    std::vector<unsigned char> slab(static_cast<size_t>(kSlabTokens * width_));
    const hid_t mem_type = width_ == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
    H5Handle file_space = h5_check_id(H5Dget_space(tokens), "cannot read the shape of /tokens", out_);
    try {
      for (int64_t at = 0; at < tokens_; at += kSlabTokens) {
        const hsize_t start = static_cast<hsize_t>(at), n = static_cast<hsize_t>(std::min(kSlabTokens, tokens_ - at));
        if (std::fread(slab.data(), static_cast<size_t>(width_), n, f) != n)
          TETRA_FAIL(Data, "cannot read back ", spill_.path(), " at token ", at);
        h5_check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &n, nullptr),
                 "cannot select a slab of /tokens", out_);
        H5Handle mem_space = h5_check_id(H5Screate_simple(1, &n, nullptr), "cannot make a memory dataspace", out_);
        h5_check(H5Dwrite(tokens, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, slab.data()),
                 "cannot write /tokens", out_);
      }
    } catch (...) {
      std::fclose(f);
      throw;
    }
    std::fclose(f);
  }

  void write_file(const std::string& path) const {
    silence_hdf5_errors();
    H5Handle file = h5_check_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                "cannot create the output file", path);
    {
      H5Handle tokens = create_1d(file.get(), "tokens", width_ == 2 ? H5T_STD_U16LE : H5T_STD_U32LE, tokens_, path);
      copy_tokens(tokens.get());
      if (!tokens.close()) h5_check(-1, "cannot close dataset /tokens", path);
    }
    H5Handle docs = create_1d(file.get(), "doc_offsets", H5T_STD_I64LE, documents_, path);
    h5_check(H5Dwrite(docs.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, doc_offsets_.data()),
             "cannot write dataset /doc_offsets", path);
    if (!docs.close()) h5_check(-1, "cannot close dataset /doc_offsets", path);
    write_int_attribute(file.get(), "vocab_size", info_.vocab_size, path);
    write_string_attribute(file.get(), "tokenizer", info_.tokenizer, path);
    if (!info_.tokenizer_sha256.empty())
      write_string_attribute(file.get(), "tokenizer_sha256", info_.tokenizer_sha256, path);
    if (!file.close()) h5_check(-1, "cannot close (flush) the output file", path);
  }

  std::string out_;
  TokenFileInfo info_;
  TokenSpill spill_;
  std::vector<int64_t> doc_offsets_;
};

}  // namespace

std::unique_ptr<TokenWriter> make_hdf5_writer(const std::string& out, const TokenFileInfo& info) {
  return std::make_unique<Hdf5Writer>(out, info);
}

}  // namespace tetra::data
