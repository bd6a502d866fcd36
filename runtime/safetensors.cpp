#include "runtime/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace tetra::safetensors {

namespace {

// The Hugging Face implementation refuses headers above 100 MB; so does this one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  TETRA_FAIL(Checkpoint, path, ": not a valid safetensors file: ", what);
}

uint64_t read_u64_le(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float f;
  if (exp == 0) {  // zero or subnormal: mant · 2^-24
    f = std::ldexp(static_cast<float>(mant), -24);
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    u |= sign;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  uint32_t u = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112u) << 23) | (mant << 13));
  std::memcpy(&f, &u, sizeof f);
  return f;
}

bool host_is_little_endian() {
  const uint16_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

}  // namespace

size_t dtype_bytes(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},  {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8},  {"U64", 8}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

Reader::Reader(const std::string& path) : path_(path) {
  TETRA_CHECK(host_is_little_endian(), "safetensors: a big-endian host is not supported");
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) TETRA_FAIL(Checkpoint, path, ": cannot read: ", ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) TETRA_FAIL(Checkpoint, path, ": cannot open: ", std::strerror(errno));
  if (file_size < 8) bad(path, "the file has " + std::to_string(file_size) + " bytes, fewer than the 8-byte header length");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  if (!in) TETRA_FAIL(Checkpoint, path, ": cannot read the header length");
  const uint64_t header_len = read_u64_le(len_bytes);
  if (header_len < 2 || header_len > kMaxHeaderBytes || header_len > file_size - 8)
    bad(path, "the header length says " + std::to_string(header_len) + " bytes, but the file has " +
                  std::to_string(file_size - 8) + " after it (and a header is 2.." + std::to_string(kMaxHeaderBytes) +
                  " bytes)");
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (!in) TETRA_FAIL(Checkpoint, path, ": cannot read the ", header_len, "-byte header");
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - data_start_;

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    bad(path, std::string("the header is not JSON (") + e.what() + ")");
  }
  if (!j.is_object()) bad(path, "the header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad(path, "__metadata__." + m.key() + " is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad(path, "tensor '" + name + "' lacks dtype, shape or data_offsets");
    TensorInfo t;
    t.name = name;
    if (!v["dtype"].is_string()) bad(path, "tensor '" + name + "': dtype is not a string");
    t.dtype = v["dtype"].get<std::string>();
    const size_t elem = dtype_bytes(t.dtype);
    if (elem == 0) bad(path, "tensor '" + name + "' has unknown dtype '" + t.dtype + "'");
    const nlohmann::json& shape = v["shape"];
    if (!shape.is_array()) bad(path, "tensor '" + name + "': shape is not a list");
    uint64_t numel = 1;
    for (const nlohmann::json& d : shape) {
      if (!d.is_number_unsigned()) bad(path, "tensor '" + name + "': shape " + shape.dump() + " is not a list of sizes ≥ 0");
      const uint64_t n = d.get<uint64_t>();
      if (n > 0 && numel > std::numeric_limits<uint64_t>::max() / n / elem)
        bad(path, "tensor '" + name + "': shape " + shape.dump() + " is too large");
      numel *= n;
      t.shape.push_back(static_cast<int64_t>(n));
    }
    const nlohmann::json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad(path, "tensor '" + name + "': data_offsets " + off.dump() + " is not [begin, end]");
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.end < t.begin) bad(path, "tensor '" + name + "': data_offsets " + off.dump() + " end before they begin");
    if (t.end > data_size)
      bad(path, "tensor '" + name + "': data_offsets " + off.dump() + " run past the " + std::to_string(data_size) +
                    " bytes of data");
    if (t.end - t.begin != numel * elem)
      bad(path, "tensor '" + name + "': shape " + shape.dump() + " of " + t.dtype + " needs " +
                    std::to_string(numel * elem) + " bytes, data_offsets " + off.dump() + " hold " +
                    std::to_string(t.end - t.begin));
    tensors_.push_back(std::move(t));
  }
  // The data section is covered exactly: no overlaps, no holes (as the format requires).
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->begin < covered)
      bad(path, "tensors '" + prev->name + "' and '" + t->name + "' overlap (bytes " + std::to_string(t->begin) +
                    ".." + std::to_string(covered) + ")");
    if (t->begin > covered)
      bad(path, "bytes " + std::to_string(covered) + ".." + std::to_string(t->begin) + " of the data belong to no tensor");
    covered = t->end;
    prev = t;
  }
  if (covered != data_size)
    bad(path, "the last " + std::to_string(data_size - covered) + " bytes of the data belong to no tensor");
  // File order: by offset.
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

const TensorInfo* Reader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor Reader::read_f32(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) TETRA_FAIL(Checkpoint, path_, ": no tensor '", name, "'");
  const uint64_t bytes = t->end - t->begin;
  std::vector<unsigned char> raw(bytes);
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + t->begin));
  if (bytes) in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(bytes));
  if (!in) TETRA_FAIL(Checkpoint, path_, ": cannot read the ", bytes, " bytes of tensor '", name, "'");
  Tensor out = Tensor::empty(t->shape, DType::F32);
  float* dst = out.data<float>();
  const int64_t n = out.numel();
  if (t->dtype == "F32") {
    std::memcpy(dst, raw.data(), bytes);
  } else if (t->dtype == "BF16" || t->dtype == "F16") {
    const bool bf16 = t->dtype == "BF16";
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      dst[i] = bf16 ? bf16_to_float(h) : half_to_float(h);
    }
  } else if (t->dtype == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, raw.data() + 8 * i, 8);
      dst[i] = static_cast<float>(d);
    }
  } else {
    TETRA_FAIL(Checkpoint, path_, ": tensor '", name, "' is ", t->dtype, "; weights are read from F32, BF16, F16 or F64");
  }
  return out;
}

void write(const std::string& path, const std::vector<NamedTensor>& tensors, DType dtype,
           const std::map<std::string, std::string>& metadata) {
  TETRA_CHECK(dtype == DType::F32 || dtype == DType::BF16, "safetensors::write: dtype ", dtype_name(dtype),
              " (F32 or BF16)");
  TETRA_CHECK(host_is_little_endian(), "safetensors: a big-endian host is not supported");
  const size_t elem = dtype_size(dtype);
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    TETRA_CHECK(t.value.defined() && t.value.device().is_cpu() && t.value.dtype() == DType::F32,
                "safetensors::write: ", t.name, " is ", t.value.defined() ? t.value.describe() : "undefined");
    TETRA_CHECK(t.name != "__metadata__" && !header.contains(t.name), "safetensors::write: tensor name '", t.name,
                "' twice or reserved");
    const uint64_t bytes = static_cast<uint64_t>(t.value.numel()) * elem;
    header[t.name] = {{"dtype", dtype == DType::F32 ? "F32" : "BF16"},
                      {"shape", t.value.shape()},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as Hugging Face writes it
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) TETRA_FAIL(Checkpoint, "cannot create ", tmp, ": ", std::strerror(errno));
    unsigned char len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::vector<uint16_t> bits;
    for (const NamedTensor& t : tensors) {
      const float* src = t.value.data<float>();
      const int64_t count = t.value.numel();
      if (dtype == DType::F32) {
        out.write(reinterpret_cast<const char*>(src), static_cast<std::streamsize>(count * 4));
      } else {
        bits.resize(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) bits[static_cast<size_t>(i)] = float_to_bf16(src[i]);
        out.write(reinterpret_cast<const char*>(bits.data()), static_cast<std::streamsize>(count * 2));
      }
    }
    out.flush();
    if (!out) TETRA_FAIL(Checkpoint, "cannot write ", tmp, ": ", std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) TETRA_FAIL(Checkpoint, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

}  // namespace tetra::safetensors
