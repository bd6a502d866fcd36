#include "data/formats/token_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"

namespace tetra::data {

namespace fs = std::filesystem;

namespace {
constexpr size_t kSpillBuffer = size_t{4} << 20;  // bytes buffered before each fwrite
}

TokenSpill::TokenSpill(std::string path, int width) : path_(std::move(path)), width_(width) {
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_) TETRA_FAIL(Data, "cannot create ", path_, ": ", std::strerror(errno));
  buf_.resize(kSpillBuffer);
}

TokenSpill::~TokenSpill() {
  if (f_) std::fclose(f_);
  if (!keep_) {
    std::error_code ignore;
    fs::remove(path_, ignore);
  }
}

void TokenSpill::append(const uint32_t* ids, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (used_ + 4 > buf_.size()) flush();
    if (width_ == 2) {
      const uint16_t v = static_cast<uint16_t>(ids[i]);  // ids < vocab_size <= 65536
      std::memcpy(buf_.data() + used_, &v, 2);
    } else {
      std::memcpy(buf_.data() + used_, &ids[i], 4);
    }
    used_ += static_cast<size_t>(width_);
  }
  tokens_ += n;
}

void TokenSpill::flush() {
  if (used_ > 0 && std::fwrite(buf_.data(), 1, used_, f_) != used_)
    TETRA_FAIL(Data, "cannot write ", path_, ": ", std::strerror(errno), " (is the disk full?)");
  used_ = 0;
}

void TokenSpill::finish() {
  flush();
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) TETRA_FAIL(Data, "cannot close ", path_, ": ", std::strerror(errno), " (is the disk full?)");
}

void move_into_place(const std::string& tmp, const std::string& target) {
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp, ignore);
    TETRA_FAIL(Data, "cannot move ", tmp, " to ", target, ": ", ec.message());
  }
}

std::unique_ptr<TokenWriter> make_token_writer(const std::string& format, const std::string& out,
                                               const TokenFileInfo& info) {
  if (format != "hdf5" && format != "megatron")
    TETRA_FAIL(Usage, "data prepare: --out-format ", format, " is not one of hdf5, megatron");
  if (out.empty()) TETRA_FAIL(Usage, "data prepare: no output given (--out DATA.h5, or --out PREFIX for megatron)");
  fs::path target(out);
  if (format == "megatron" && (target.extension() == ".bin" || target.extension() == ".idx"))
    target.replace_extension();
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    TETRA_FAIL(Data, "output directory ", dir.string(), " of ", out, " does not exist; create it first");
  if (fs::is_directory(target, ec)) TETRA_FAIL(Data, "output ", out, " is a directory; give a file name");
  if (format == "hdf5") return make_hdf5_writer(target.string(), info);
  return make_megatron_writer(target.string(), info);
}

}  // namespace tetra::data
