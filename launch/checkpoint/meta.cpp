#include "launch/checkpoint/meta.h"

#include <filesystem>

#include "launch/checkpoint/checksum.h"
#include "launch/checkpoint/files.h"
#include "runtime/error.h"

namespace tetra::launch {

using nlohmann::json;

json to_json(const CheckpointMeta& m) {
  json params = json::array();
  for (const ParamInfo& p : m.params) params.push_back({{"name", p.name}, {"shape", p.full_shape}});
  json files = json::array();
  for (const RankFileInfo& f : m.files) {
    json pieces = json::array();
    for (const SavedPiece& s : f.pieces) {
      json piece = json::array({s.name, s.begin, s.end});
      if (!s.box.shape.empty()) piece.push_back({{"offset", s.box.offset}, {"shape", s.box.shape}});
      pieces.push_back(std::move(piece));
    }
    files.push_back({{"file", f.file}, {"rank", f.rank}, {"bytes", f.bytes}, {"crc32", crc32_hex(f.crc32)},
                     {"pieces", pieces}});
  }
  return {{"format", "tetra-checkpoint"},
          {"version", m.version},
          {"step", m.step},
          {"tokens_seen", m.tokens_seen},
          {"optimizer_steps", m.optimizer_steps},
          {"skipped_steps", m.skipped_steps},
          {"attempt", m.attempt},
          {"time", m.time},
          {"mesh", {{"world_size", m.world_size}, {"dp", m.dp}, {"tp", m.tp}, {"pp", m.pp}, {"ep", m.ep}}},
          {"zero_stage", m.zero_stage},
          {"sampler", m.sampler},
          {"lr_schedule", m.lr_schedule},
          {"rng", m.rng},
          {"config", m.config_yaml},
          {"params", params},
          {"files", files}};
}

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  TETRA_FAIL(Checkpoint, where, ": ", what, " (not a meta.json written by this version of tetra, or damaged)");
}

const json& field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) bad(where, std::string("missing \"") + key + "\"");
  return j.at(key);
}

int64_t int_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_number_integer()) bad(where, std::string("\"") + key + "\" is not an integer");
  return v.get<int64_t>();
}

CheckpointMeta parse_meta(const json& j, const std::string& where) {
  CheckpointMeta m;
  if (!j.is_object() || j.value("format", "") != "tetra-checkpoint") bad(where, "\"format\" is not \"tetra-checkpoint\"");
  m.version = static_cast<int>(int_field(j, "version", where));
  if (m.version < kOldestReadableCheckpointVersion || m.version > kCheckpointFormatVersion)
    TETRA_FAIL(Checkpoint, where, ": checkpoint format version ", m.version, " but this tetra reads versions ",
               kOldestReadableCheckpointVersion, " to ", kCheckpointFormatVersion,
               " (use the tetra that wrote it, or consolidate it there)");
  m.step = int_field(j, "step", where);
  m.tokens_seen = int_field(j, "tokens_seen", where);
  m.optimizer_steps = int_field(j, "optimizer_steps", where);
  m.skipped_steps = int_field(j, "skipped_steps", where);
  m.attempt = static_cast<int>(j.value("attempt", 0));
  m.time = j.value("time", 0.0);
  const json& mesh = field(j, "mesh", where);
  m.world_size = static_cast<int>(int_field(mesh, "world_size", where));
  m.dp = static_cast<int>(int_field(mesh, "dp", where));
  m.tp = static_cast<int>(int_field(mesh, "tp", where));
  m.pp = static_cast<int>(int_field(mesh, "pp", where));
  m.ep = static_cast<int>(int_field(mesh, "ep", where));
  m.zero_stage = static_cast<int>(int_field(j, "zero_stage", where));
  m.sampler = j.value("sampler", json::object());
  m.lr_schedule = j.value("lr_schedule", json::object());
  m.rng = j.value("rng", json::object());
  const json& cfg = field(j, "config", where);
  if (!cfg.is_string()) bad(where, "\"config\" is not a string");
  m.config_yaml = cfg.get<std::string>();
  for (const json& p : field(j, "params", where)) {
    ParamInfo info;
    info.name = field(p, "name", where).get<std::string>();
    info.full_shape = field(p, "shape", where).get<Shape>();
    m.params.push_back(std::move(info));
  }
  for (const json& f : field(j, "files", where)) {
    RankFileInfo info;
    info.file = field(f, "file", where).get<std::string>();
    if (info.file.empty() || info.file.find('/') != std::string::npos || info.file[0] == '.')
      bad(where, "rank file name \"" + info.file + "\" is not a plain file name");
    info.rank = static_cast<int>(int_field(f, "rank", where));
    info.bytes = field(f, "bytes", where).get<uint64_t>();
    const std::string crc = field(f, "crc32", where).get<std::string>();
    if (crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos)
      bad(where, "crc32 \"" + crc + "\" of " + info.file + " is not 8 hex digits");
    info.crc32 = static_cast<uint32_t>(std::stoul(crc, nullptr, 16));
    for (const json& s : field(f, "pieces", where)) {
      if (!s.is_array() || s.size() < 3 || s.size() > 4 || !s[0].is_string() || !s[1].is_number_integer() ||
          !s[2].is_number_integer())
        bad(where, "a piece of " + info.file + " is not [name, begin, end] or [name, begin, end, box]");
      SavedPiece piece{s[0].get<std::string>(), s[1].get<int64_t>(), s[2].get<int64_t>(), {}};
      if (s.size() == 4) {
        const json& b = s[3];
        if (!b.is_object() || !b.contains("offset") || !b.contains("shape") || !b["offset"].is_array() ||
            !b["shape"].is_array() || b["offset"].size() != b["shape"].size())
          bad(where, "the box of a piece of " + info.file + " is not {offset: [...], shape: [...]}");
        for (const json& v : b["offset"]) {
          if (!v.is_number_integer()) bad(where, "a box offset in " + info.file + " is not an integer");
          piece.box.offset.push_back(v.get<int64_t>());
        }
        for (const json& v : b["shape"]) {
          if (!v.is_number_integer()) bad(where, "a box extent in " + info.file + " is not an integer");
          piece.box.shape.push_back(v.get<int64_t>());
        }
      }
      info.pieces.push_back(std::move(piece));
    }
    m.files.push_back(std::move(info));
  }
  if (static_cast<int>(m.files.size()) != m.world_size)
    bad(where, "lists " + std::to_string(m.files.size()) + " rank files for a world of " +
                   std::to_string(m.world_size) + " ranks");
  return m;
}

}  // namespace

CheckpointMeta meta_from_json(const json& j, const std::string& where) {
  try {
    return parse_meta(j, where);
  } catch (const json::exception& e) {  // a field of the wrong type (a string where a number belongs, ...)
    bad(where, std::string("a field has the wrong type or value: ") + e.what());
  }
}

CheckpointMeta read_meta(const std::string& step_dir) {
  const std::string path = (std::filesystem::path(step_dir) / kMetaFile).string();
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (ec) throw CheckpointUnreadable(path + ": cannot look at it: " + ec.message());
  if (!exists)
    TETRA_FAIL(Checkpoint, step_dir, ": no ", kMetaFile,
               " — not a complete checkpoint (its writer was stopped before the commit, or this is not a step_N "
               "directory)");
  json j = json::parse(read_text_file(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) TETRA_FAIL(Checkpoint, path, ": not valid JSON (cut short or damaged)");
  return meta_from_json(j, path);
}

}  // namespace tetra::launch
