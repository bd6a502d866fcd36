// `tetra data prepare` (text files -> HDF5 token dataset) and `tetra data inspect`.
// prepare tokenizes everything in memory (4 bytes per token), then writes `/tokens` as one
// contiguous, uncompressed dataset so that a direct-to-GPU reader can address it by file offset.
#include "data/data_tools.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/hdf5_handle.h"
#include "data/token_dataset.h"
#include "data/tokenizers/tokenizer.h"
#include "runtime/error.h"

namespace tetra::data {

namespace fs = std::filesystem;

namespace {

// The whole content of `path`, or a Data error naming it (missing, unreadable, directory, empty).
std::string read_input(const std::string& path) {
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) TETRA_FAIL(Data, "input file ", path, " does not exist");
  if (fs::is_directory(status)) TETRA_FAIL(Data, "input ", path, " is a directory; pass the text files in it");
  std::ifstream in(path, std::ios::binary);
  if (!in) TETRA_FAIL(Data, "cannot open input file ", path, ": ", std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) TETRA_FAIL(Data, "cannot read input file ", path, ": I/O error");
  if (text.empty()) TETRA_FAIL(Data, "input file ", path, " is empty; every input must hold at least one byte");
  return text;
}

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

// Writes a 1-D contiguous dataset `name` of `n` elements from `data` (memory type mem_type).
void write_1d(hid_t file, const char* name, hid_t file_type, hid_t mem_type, const void* data, int64_t n,
              const std::string& path) {
  const hsize_t dims = static_cast<hsize_t>(n);
  H5Handle space = h5_check_id(H5Screate_simple(1, &dims, nullptr), "cannot make a dataspace", path);
  H5Handle dcpl = h5_check_id(H5Pcreate(H5P_DATASET_CREATE), "cannot make a dataset property list", path);
  h5_check(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), "cannot request a contiguous layout", path);
  H5Handle d = h5_check_id(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                           std::string("cannot create dataset /") + name, path);
  h5_check(H5Dwrite(d.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
           std::string("cannot write dataset /") + name, path);
  if (!d.close()) h5_check(-1, std::string("cannot close dataset /") + name, path);
}

void write_dataset_file(const std::string& path, const std::vector<uint32_t>& tokens,
                        const std::vector<int64_t>& doc_offsets, const Tokenizer& tok) {
  silence_hdf5_errors();
  H5Handle file = h5_check_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                              "cannot create the output file", path);
  // Ids are < vocab_size, so narrowing to uint16 (HDF5 converts on write) loses nothing.
  const hid_t token_type = tok.vocab_size() <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
  write_1d(file.get(), "tokens", token_type, H5T_NATIVE_UINT32, tokens.data(), static_cast<int64_t>(tokens.size()),
           path);
  write_1d(file.get(), "doc_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, doc_offsets.data(),
           static_cast<int64_t>(doc_offsets.size()), path);
  write_int_attribute(file.get(), "vocab_size", tok.vocab_size(), path);
  write_string_attribute(file.get(), "tokenizer", tok.name(), path);
  if (!file.close()) h5_check(-1, "cannot close (flush) the output file", path);
}

std::string human_bytes(uintmax_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace

void prepare_dataset(const PrepareOptions& options, std::ostream& log) {
  if (options.inputs.empty()) TETRA_FAIL(Usage, "data prepare: no input files given (--input FILE...)");
  if (options.out.empty()) TETRA_FAIL(Usage, "data prepare: no output file given (--out DATA.h5)");
  std::unique_ptr<Tokenizer> tok = make_tokenizer(options.tokenizer);

  const fs::path out(options.out);
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    TETRA_FAIL(Data, "output directory ", dir.string(), " of ", options.out, " does not exist; create it first");
  if (fs::is_directory(out, ec)) TETRA_FAIL(Data, "output ", options.out, " is a directory; give a file name");

  // Tokenize every input before touching the output: a bad input leaves nothing behind.
  std::vector<uint32_t> tokens;
  std::vector<int64_t> doc_offsets;
  uintmax_t input_bytes = 0;
  for (const std::string& input : options.inputs) {
    std::string text = read_input(input);
    input_bytes += text.size();
    doc_offsets.push_back(static_cast<int64_t>(tokens.size()));
    tok->encode(text, tokens);
  }
  if (tokens.empty()) TETRA_FAIL(Data, "data prepare: the inputs produced no tokens");

  // Write beside the target, then rename: an interrupted run never leaves a file that looks whole.
  const std::string tmp = options.out + ".tmp";
  std::error_code ignore;
  try {
    write_dataset_file(tmp, tokens, doc_offsets, *tok);
  } catch (...) {
    fs::remove(tmp, ignore);
    throw;
  }
  fs::rename(tmp, out, ec);  // atomic within one file system
  if (ec) {
    fs::remove(tmp, ignore);
    TETRA_FAIL(Data, "cannot move ", tmp, " to ", options.out, ": ", ec.message());
  }

  const uintmax_t file_bytes = fs::file_size(out, ec);
  log << "prepared " << options.out << ": " << options.inputs.size() << " file" << (options.inputs.size() == 1 ? "" : "s")
      << ", " << input_bytes << " bytes -> " << tokens.size() << " tokens ("
      << (tok->vocab_size() <= 65536 ? "uint16" : "uint32") << ", tokenizer " << tok->name() << ", vocab "
      << tok->vocab_size() << "), file " << (ec ? std::string("?") : human_bytes(file_bytes)) << std::endl;
}

void inspect_dataset(const std::string& path, std::ostream& out) {
  std::unique_ptr<TokenDataset> d = TokenDataset::open(path);
  out << "format:     " << d->format() << "\n";
  out << "path:       " << d->path() << "\n";
  out << "tokens:     " << d->size() << "\n";
  out << "dtype:      " << dtype_name(d->token_dtype()) << "\n";
  if (d->vocab_size() > 0)
    out << "vocab_size: " << d->vocab_size() << "\n";
  else
    out << "vocab_size: unknown (not stored in this format; GPT-2 shards use 50257)\n";
  out << "tokenizer:  " << (d->tokenizer().empty() ? "unknown" : d->tokenizer()) << "\n";
  if (d->num_documents() > 0) {
    const std::vector<int64_t> docs = d->doc_offsets();  // also validates them
    out << "documents:  " << docs.size() << "\n";
  } else {
    out << "documents:  not recorded\n";
  }
  if (d->contiguous_offset() >= 0)
    out << "layout:     contiguous, tokens at byte " << d->contiguous_offset() << "\n";
  else
    out << "layout:     chunked or compressed (no direct reads by file offset)\n";

  const int64_t n = std::min<int64_t>(32, d->size());
  std::vector<int32_t> ids(static_cast<size_t>(n));
  d->read(0, n, ids.data());
  out << "first " << n << " tokens:";
  for (int32_t id : ids) out << " " << id;
  out << "\n";
  if (d->tokenizer() == "byte") {
    auto tok = make_tokenizer("byte");
    out << "as text:    \"" << tok->decode_escaped(ids.data(), n) << "\"\n";
  }
  out.flush();
}

}  // namespace tetra::data
