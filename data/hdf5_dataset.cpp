#include "data/hdf5_dataset.h"

#include <span>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/text_join.h"

namespace tetra::data {

namespace {

// "int32", "uint16", "float64", "string", ... for error messages.
std::string describe_type(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") +
             std::to_string(8 * H5Tget_size(type));
    case H5T_FLOAT: return "float" + std::to_string(8 * H5Tget_size(type));
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length sequence";
    case H5T_ENUM: return "enum";
    default: return "non-numeric type";
  }
}

// Number of elements of a scalar or 1-element simple dataspace; -1 for anything bigger.
int64_t single_value_space(hid_t space) {
  H5S_class_t cls = H5Sget_simple_extent_type(space);
  if (cls == H5S_SCALAR) return 1;
  if (cls != H5S_SIMPLE) return -1;
  hssize_t n = H5Sget_simple_extent_npoints(space);
  return n == 1 ? 1 : -1;
}

// The value of string attribute `name` (one string, fixed or variable length, space padding dropped).
std::string read_string_attribute(hid_t attr, const std::string& name, const std::string& path) {
  H5Handle type = h5_check_id(H5Aget_type(attr), "cannot read the type of attribute " + name, path);
  H5Handle space = h5_check_id(H5Aget_space(attr), "cannot read the shape of attribute " + name, path);
  if (H5Tget_class(type.get()) != H5T_STRING || single_value_space(space.get()) != 1)
    TETRA_FAIL(Data, "attribute ", name, " in HDF5 file ", path, " must be one string, found ", describe_type(type.get()));
  htri_t variable = H5Tis_variable_str(type.get());
  if (variable < 0) h5_check(-1, "cannot read the type of attribute " + name, path);
  H5Handle mem = h5_check_id(H5Tcopy(H5T_C_S1), "cannot make a string type", path);
  h5_check(H5Tset_cset(mem.get(), H5Tget_cset(type.get())), "cannot set a string type's encoding", path);
  std::string value;
  if (variable > 0) {
    h5_check(H5Tset_size(mem.get(), H5T_VARIABLE), "cannot make a string type", path);
    char* s = nullptr;
    h5_check(H5Aread(attr, mem.get(), &s), "cannot read attribute " + name, path);
    value = s ? s : "";
    if (s) H5free_memory(s);
  } else {
    size_t n = H5Tget_size(type.get());
    h5_check(H5Tset_size(mem.get(), n + 1), "cannot make a string type", path);
    h5_check(H5Tset_strpad(mem.get(), H5T_STR_NULLTERM), "cannot make a string type", path);
    std::vector<char> buf(n + 1, '\0');
    h5_check(H5Aread(attr, mem.get(), buf.data()), "cannot read attribute " + name, path);
    value = buf.data();
    while (!value.empty() && value.back() == ' ') value.pop_back();  // space-padded
  }
  return value;
}

}  // namespace

Hdf5Dataset::Hdf5Dataset(const std::string& path) : TokenDataset(path) {
  silence_hdf5_errors();
  file_ = h5_check_id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "cannot open it as a token dataset", path);
  open_tokens();
  read_attributes();
  open_doc_offsets();
  find_contiguous_offset();
  id_limit_ = vocab_size_;
}

void Hdf5Dataset::open_tokens() {
  htri_t exists = H5Lexists(file_.get(), "tokens", H5P_DEFAULT);
  if (exists < 0) h5_check(-1, "cannot look up /tokens", path_);
  if (exists == 0)
    TETRA_FAIL(Data, "HDF5 file ", path_, " has no /tokens dataset; token files are made by `tetra data prepare`");
  hid_t id = H5Dopen2(file_.get(), "tokens", H5P_DEFAULT);
  if (id < 0) {
    H5Eclear2(H5E_DEFAULT);
    TETRA_FAIL(Data, "/tokens in HDF5 file ", path_, " is not a dataset (a group or link?); expected a 1-D uint16 or "
               "uint32 dataset");
  }
  tokens_ = H5Handle(id);

  H5Handle type = h5_check_id(H5Dget_type(tokens_.get()), "cannot read the datatype of /tokens", path_);
  bool is_uint = H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_sign(type.get()) == H5T_SGN_NONE;
  size_t width = H5Tget_size(type.get());
  if (!is_uint || (width != 2 && width != 4))
    TETRA_FAIL(Data, "/tokens in HDF5 file ", path_, " has dtype ", describe_type(type.get()),
               "; expected uint16 (vocab <= 65536) or uint32");
  token_dtype_ = width == 2 ? DType::U16 : DType::U32;
  // uint16 ids are widened exactly to int32 by HDF5; uint32 ids are read as their bit patterns
  // (same width) and range-checked by TokenDataset::read.
  mem_type_ = width == 2 ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32;

  file_space_ = h5_check_id(H5Dget_space(tokens_.get()), "cannot read the shape of /tokens", path_);
  int rank = H5Sget_simple_extent_ndims(file_space_.get());
  if (rank < 0) h5_check(-1, "cannot read the rank of /tokens", path_);
  if (rank != 1) {
    hsize_t dims[H5S_MAX_RANK] = {};
    if (rank > 0) H5Sget_simple_extent_dims(file_space_.get(), dims, nullptr);
    const std::string shape = bracketed_text(std::span(dims, static_cast<size_t>(rank)), ", ");
    TETRA_FAIL(Data, "/tokens in HDF5 file ", path_, " has rank ", rank, " (shape ", rank == 0 ? "scalar" : shape,
               "); expected a 1-D array of token ids");
  }
  hsize_t n = 0;
  h5_check(H5Sget_simple_extent_dims(file_space_.get(), &n, nullptr), "cannot read the length of /tokens", path_);
  if (n == 0) TETRA_FAIL(Data, "/tokens in HDF5 file ", path_, " is empty; the dataset holds no tokens");
  size_ = static_cast<int64_t>(n);
}

void Hdf5Dataset::read_attributes() {
  const hid_t tokens = tokens_.get();
  // Attributes live on the root group (as `tetra data prepare` writes them) or on /tokens.
  auto find = [&](const char* name) -> H5Handle {
    for (hid_t obj : {file_.get(), tokens}) {
      const char* where = obj == tokens ? "tokens" : ".";
      htri_t has = H5Aexists_by_name(file_.get(), where, name, H5P_DEFAULT);
      if (has < 0) h5_check(-1, std::string("cannot look up attribute '") + name + "'", path_);
      if (has > 0)
        return h5_check_id(H5Aopen_by_name(file_.get(), where, name, H5P_DEFAULT, H5P_DEFAULT),
                           std::string("cannot open attribute '") + name + "'", path_);
    }
    return H5Handle();
  };

  if (H5Handle attr = find("vocab_size"); attr.valid()) {
    H5Handle type = h5_check_id(H5Aget_type(attr.get()), "cannot read the type of attribute vocab_size", path_);
    H5Handle space = h5_check_id(H5Aget_space(attr.get()), "cannot read the shape of attribute vocab_size", path_);
    if (H5Tget_class(type.get()) != H5T_INTEGER || single_value_space(space.get()) != 1)
      TETRA_FAIL(Data, "attribute vocab_size in HDF5 file ", path_, " must be one integer, found ",
                 describe_type(type.get()));
    long long v = 0;
    h5_check(H5Aread(attr.get(), H5T_NATIVE_LLONG, &v), "cannot read attribute vocab_size", path_);
    if (v <= 0) TETRA_FAIL(Data, "attribute vocab_size in HDF5 file ", path_, " is ", v, "; it must be positive");
    if (token_dtype_ == DType::U16 && v > 65536)
      TETRA_FAIL(Data, "HDF5 file ", path_, " stores uint16 tokens but says vocab_size ", v,
                 " (> 65536): ids that large cannot be stored; the file is inconsistent");
    vocab_size_ = v;
  }

  if (H5Handle attr = find("tokenizer"); attr.valid()) tokenizer_ = read_string_attribute(attr.get(), "tokenizer", path_);
  if (H5Handle attr = find("tokenizer_sha256"); attr.valid())
    tokenizer_sha256_ = read_string_attribute(attr.get(), "tokenizer_sha256", path_);
}

void Hdf5Dataset::open_doc_offsets() {
  htri_t exists = H5Lexists(file_.get(), "doc_offsets", H5P_DEFAULT);
  if (exists < 0) h5_check(-1, "cannot look up /doc_offsets", path_);
  if (exists == 0) return;
  H5Handle d = h5_check_id(H5Dopen2(file_.get(), "doc_offsets", H5P_DEFAULT), "cannot open /doc_offsets", path_);
  H5Handle type = h5_check_id(H5Dget_type(d.get()), "cannot read the datatype of /doc_offsets", path_);
  H5Handle space = h5_check_id(H5Dget_space(d.get()), "cannot read the shape of /doc_offsets", path_);
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Sget_simple_extent_ndims(space.get()) != 1)
    TETRA_FAIL(Data, "/doc_offsets in HDF5 file ", path_, " must be a 1-D integer dataset, found ",
               describe_type(type.get()), " of rank ", H5Sget_simple_extent_ndims(space.get()));
  hsize_t n = 0;
  h5_check(H5Sget_simple_extent_dims(space.get(), &n, nullptr), "cannot read the length of /doc_offsets", path_);
  num_docs_ = static_cast<int64_t>(n);
}

std::vector<int64_t> Hdf5Dataset::doc_offsets() {
  std::vector<int64_t> offsets(static_cast<size_t>(num_docs_));
  if (num_docs_ == 0) return offsets;
  H5Handle d = h5_check_id(H5Dopen2(file_.get(), "doc_offsets", H5P_DEFAULT), "cannot open /doc_offsets", path_);
  h5_check(H5Dread(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets.data()),
           "cannot read /doc_offsets", path_);
  for (int64_t i = 0; i < num_docs_; ++i) {
    int64_t v = offsets[static_cast<size_t>(i)];
    int64_t prev = i ? offsets[static_cast<size_t>(i - 1)] : 0;
    if ((i == 0 && v != 0) || v < prev || v >= size_)
      TETRA_FAIL(Data, "/doc_offsets in HDF5 file ", path_, " is invalid at entry ", i, " (value ", v,
                 "): offsets must start at 0, ascend, and stay below the token count ", size_);
  }
  return offsets;
}

void Hdf5Dataset::find_contiguous_offset() {
  H5Handle dcpl = h5_check_id(H5Dget_create_plist(tokens_.get()), "cannot read the layout of /tokens", path_);
  H5Handle type = h5_check_id(H5Dget_type(tokens_.get()), "cannot read the datatype of /tokens", path_);
  if (H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl.get()) != 0 ||
      H5Tget_order(type.get()) != H5T_ORDER_LE)
    return;
  haddr_t addr = H5Dget_offset(tokens_.get());
  if (addr == HADDR_UNDEF) {
    H5Eclear2(H5E_DEFAULT);  // storage not allocated: HDF5 returns fill values, there is no raw offset
    return;
  }
  // Addresses are relative to the HDF5 base address, which sits after any user block.
  H5Handle fcpl = h5_check_id(H5Fget_create_plist(file_.get()), "cannot read the file properties", path_);
  hsize_t userblock = 0;
  h5_check(H5Pget_userblock(fcpl.get(), &userblock), "cannot read the user block size", path_);
  contiguous_offset_ = static_cast<int64_t>(addr + userblock);
}

void Hdf5Dataset::read_ids(int64_t offset, int64_t count, int32_t* out) {
  const hsize_t start = static_cast<hsize_t>(offset), n = static_cast<hsize_t>(count);
  h5_check(H5Sselect_hyperslab(file_space_.get(), H5S_SELECT_SET, &start, nullptr, &n, nullptr),
           "cannot select tokens [" + std::to_string(offset) + ", " + std::to_string(offset + count) + ")", path_);
  H5Handle mem_space = h5_check_id(H5Screate_simple(1, &n, nullptr), "cannot make a memory dataspace", path_);
  h5_check(H5Dread(tokens_.get(), mem_type_, mem_space.get(), file_space_.get(), H5P_DEFAULT, out),
           "cannot read tokens [" + std::to_string(offset) + ", " + std::to_string(offset + count) + ")", path_);
}

}  // namespace tetra::data
