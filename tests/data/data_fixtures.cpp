#include "data_fixtures.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "runtime/error.h"

namespace tetra::data::testing {

namespace fs = std::filesystem;

ScratchDir::ScratchDir() {
  static std::atomic<int> counter{0};
  fs::path p = fs::temp_directory_path() /
               ("tetra_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  dir_ = p.string();
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("test fixture: cannot create " + path);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("test fixture: cannot write " + path);
}

std::string read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("test fixture: cannot open " + path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_bin(const std::string& path, const BinSpec& spec) {
  int32_t header[256] = {};
  header[0] = spec.magic;
  header[1] = spec.version;
  header[2] = spec.count ? *spec.count : static_cast<int32_t>(spec.tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header), static_cast<size_t>(spec.header_bytes));
  if (spec.header_bytes == 1024) {
    bytes.append(reinterpret_cast<const char*>(spec.tokens.data()), spec.tokens.size() * 2);
    bytes.append(static_cast<size_t>(spec.extra_bytes), '\x7f');
  }
  write_raw(path, bytes);
}

namespace {
void ok(herr_t status, const char* what) {
  if (status < 0) throw std::runtime_error(std::string("test fixture HDF5 call failed: ") + what);
}
hid_t ok_id(hid_t id, const char* what) {
  if (id < 0) throw std::runtime_error(std::string("test fixture HDF5 call failed: ") + what);
  return id;
}
}  // namespace

void write_h5(const std::string& path, const H5Spec& spec) {
  hid_t file = ok_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "H5Fcreate");
  if (spec.tokens_as_group) ok(H5Gclose(ok_id(H5Gcreate2(file, "tokens", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                                "H5Gcreate2")),
                               "H5Gclose");
  if (!spec.tokens_as_group && !spec.omit_tokens) {
    std::vector<hsize_t> dims = spec.dims.empty() ? std::vector<hsize_t>{spec.tokens.size()} : spec.dims;
    hid_t space = dims.empty() ? ok_id(H5Screate(H5S_SCALAR), "H5Screate")
                               : ok_id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                       "H5Screate_simple");
    hid_t dcpl = ok_id(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate");
    if (spec.chunked_gzip) {
      hsize_t chunk = 7;
      ok(H5Pset_chunk(dcpl, 1, &chunk), "H5Pset_chunk");
      ok(H5Pset_deflate(dcpl, 4), "H5Pset_deflate");
    }
    hid_t d = ok_id(H5Dcreate2(file, "tokens", spec.file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), "H5Dcreate2");
    if (!spec.tokens.empty())
      ok(H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, spec.tokens.data()), "H5Dwrite tokens");
    ok(H5Dclose(d), "H5Dclose");
    ok(H5Pclose(dcpl), "H5Pclose");
    ok(H5Sclose(space), "H5Sclose");
  }
  if (spec.vocab_size) {
    hid_t space = ok_id(H5Screate(H5S_SCALAR), "H5Screate");
    hid_t a = ok_id(H5Acreate2(file, "vocab_size", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2");
    int32_t v = static_cast<int32_t>(*spec.vocab_size);
    ok(H5Awrite(a, H5T_NATIVE_INT32, &v), "H5Awrite vocab_size");
    ok(H5Aclose(a), "H5Aclose");
    ok(H5Sclose(space), "H5Sclose");
  }
  if (spec.tokenizer) {
    hid_t type = ok_id(H5Tcopy(H5T_C_S1), "H5Tcopy");
    const std::string& s = *spec.tokenizer;
    ok(H5Tset_size(type, spec.tokenizer_fixed_length ? s.size() : H5T_VARIABLE), "H5Tset_size");
    hid_t space = ok_id(H5Screate(H5S_SCALAR), "H5Screate");
    hid_t a = ok_id(H5Acreate2(file, "tokenizer", type, space, H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2");
    const char* p = s.c_str();
    ok(spec.tokenizer_fixed_length ? H5Awrite(a, type, s.data()) : H5Awrite(a, type, &p), "H5Awrite tokenizer");
    ok(H5Aclose(a), "H5Aclose");
    ok(H5Sclose(space), "H5Sclose");
    ok(H5Tclose(type), "H5Tclose");
  }
  if (spec.doc_offsets) {
    hsize_t n = spec.doc_offsets->size();
    hid_t space = ok_id(H5Screate_simple(1, &n, nullptr), "H5Screate_simple");
    hid_t d = ok_id(H5Dcreate2(file, "doc_offsets", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                    "H5Dcreate2 doc_offsets");
    ok(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, spec.doc_offsets->data()), "H5Dwrite doc_offsets");
    ok(H5Dclose(d), "H5Dclose");
    ok(H5Sclose(space), "H5Sclose");
  }
  ok(H5Fclose(file), "H5Fclose");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tetra::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a tetra::Error, got another exception: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a tetra::Error, but nothing was thrown";
  return "";
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

CommandResult run_command(const std::string& command) {
  CommandResult r;
  std::FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error("test fixture: popen failed for " + command);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

CommandResult run_python(const ScratchDir& dir, const std::string& code, const std::vector<std::string>& args) {
  static std::atomic<int> counter{0};
  const std::string script = dir.file("script_" + std::to_string(counter++) + ".py");
  write_raw(script, code);
  std::string cmd = shell_quote(TETRA_PYTHON) + " " + shell_quote(script);
  for (const std::string& a : args) (cmd += ' ') += shell_quote(a);
  return run_command(cmd);
}

}  // namespace tetra::data::testing
