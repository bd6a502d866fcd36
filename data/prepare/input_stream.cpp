#include "data/prepare/input_stream.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "runtime/error.h"

namespace tetra::data {

namespace {

constexpr size_t kReadBytes = size_t{1} << 20;  // compressed bytes read from the file at a time

// An open FILE* that closes itself; reads fail naming the file.
class File {
 public:
  explicit File(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "rb")) {
    if (!f_) TETRA_FAIL(Data, "cannot open input file ", path, ": ", std::strerror(errno));
  }
  ~File() { std::fclose(f_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  size_t read(void* dst, size_t n) {
    const size_t got = std::fread(dst, 1, n, f_);
    if (got < n && std::ferror(f_)) TETRA_FAIL(Data, "cannot read input file ", path_, ": I/O error");
    return got;
  }

 private:
  std::string path_;
  std::FILE* f_;
};

class PlainStream final : public InputStream {
 public:
  explicit PlainStream(const std::string& path) : InputStream(path), file_(path) {}
  size_t read(char* dst, size_t n) override { return file_.read(dst, n); }

 private:
  File file_;
};

// gzip through zlib's inflate with automatic header detection off (windowBits 16 + 15: gzip only),
// restarted at each member's end so that concatenated members (as `cat a.gz b.gz`) read whole.
class GzipStream final : public InputStream {
 public:
  explicit GzipStream(const std::string& path) : InputStream(path), file_(path), in_(kReadBytes) {
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) TETRA_FAIL(Data, "zlib: cannot start inflating ", path);
  }
  ~GzipStream() override { inflateEnd(&z_); }

  size_t read(char* dst, size_t n) override {
    z_.next_out = reinterpret_cast<Bytef*>(dst);
    z_.avail_out = static_cast<uInt>(n);
    while (z_.avail_out == n) {
      if (z_.avail_in == 0 && !out_full_) {
        z_.avail_in = static_cast<uInt>(file_.read(in_.data(), in_.size()));
        z_.next_in = reinterpret_cast<Bytef*>(in_.data());
        if (z_.avail_in == 0) {
          if (mid_member_ || !seen_any_)
            TETRA_FAIL(Data, "gzip input ", path_, " is ", seen_any_ ? "cut short (truncated)" : "empty",
                       "; re-create or re-download it");
          return 0;
        }
      }
      seen_any_ = true;
      const uInt in_before = z_.avail_in;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      out_full_ = z_.avail_out == 0;  // inflate may hold more output: call it again before reading
      if (z_.avail_in < in_before) mid_member_ = true;
      if (rc == Z_STREAM_END) {
        mid_member_ = false;
        inflateReset(&z_);
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        TETRA_FAIL(Data, "gzip input ", path_, " is not valid gzip (zlib: ", z_.msg ? z_.msg : "error ",
                   z_.msg ? "" : std::to_string(rc), ")");
      }
    }
    return n - z_.avail_out;
  }

 private:
  File file_;
  std::vector<char> in_;
  z_stream z_{};
  bool mid_member_ = false;
  bool seen_any_ = false;
  bool out_full_ = false;
};

class ZstdStream final : public InputStream {
 public:
  explicit ZstdStream(const std::string& path) : InputStream(path), file_(path), in_(kReadBytes) {
    dctx_ = ZSTD_createDCtx();
    if (!dctx_) TETRA_FAIL(Data, "zstd: cannot start decompressing ", path);
  }
  ~ZstdStream() override { ZSTD_freeDCtx(dctx_); }

  size_t read(char* dst, size_t n) override {
    ZSTD_outBuffer out{dst, n, 0};
    while (out.pos == 0) {
      if (in_pos_ == in_len_ && !out_full_) {
        in_len_ = file_.read(in_.data(), in_.size());
        in_pos_ = 0;
        if (in_len_ == 0) {
          if (frame_left_ != 0 || !seen_any_)
            TETRA_FAIL(Data, "zstd input ", path_, " is ", seen_any_ ? "cut short (truncated)" : "empty",
                       "; re-create or re-download it");
          return 0;
        }
      }
      seen_any_ = true;
      ZSTD_inBuffer in{in_.data(), in_len_, in_pos_};
      const size_t out_before = out.pos;
      const size_t rc = ZSTD_decompressStream(dctx_, &out, &in);
      if (ZSTD_isError(rc))
        TETRA_FAIL(Data, "zstd input ", path_, " is not valid zstd (", ZSTD_getErrorName(rc), ")");
      // A call that moved nothing (a flush after a frame ended) says nothing about the frame.
      if (in.pos > in_pos_ || out.pos > out_before) frame_left_ = rc;
      in_pos_ = in.pos;
      out_full_ = out.pos == out.size;  // the decoder may hold more output: call it again before reading
    }
    return out.pos;
  }

 private:
  File file_;
  std::vector<char> in_;
  size_t in_pos_ = 0, in_len_ = 0;
  size_t frame_left_ = 0;  // ZSTD_decompressStream's hint: 0 when a frame ended
  bool seen_any_ = false;
  bool out_full_ = false;
  ZSTD_DCtx* dctx_ = nullptr;
};

}  // namespace

std::string compression_of(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".gz") return "gzip";
  if (ext == ".zst") return "zstd";
  return "";
}

std::unique_ptr<InputStream> InputStream::open(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) TETRA_FAIL(Data, "input file ", path, " does not exist");
  if (std::filesystem::is_directory(status))
    TETRA_FAIL(Data, "input ", path, " is a directory; pass the files in it (a glob such as DIR/*.jsonl)");
  const std::string kind = compression_of(path);
  if (kind == "gzip") return std::make_unique<GzipStream>(path);
  if (kind == "zstd") return std::make_unique<ZstdStream>(path);
  return std::make_unique<PlainStream>(path);
}

}  // namespace tetra::data
