#include "data/tokenizers/decoder.h"

#include "data/tokenizers/normalizer.h"
#include "data/tokenizers/utf8.h"

namespace tetra::data::tok {
namespace {

// GPT-2's alphabet back to bytes; a token with a character outside it stays as it is.
void byte_level_decode(std::vector<std::string>& tokens) {
  for (std::string& t : tokens) {
    std::string raw;
    bool ok = true;
    for (size_t i = 0; ok && i < t.size();) {
      const int b = byte_level_byte(next_code_point(t, i));
      ok = b >= 0;
      raw += static_cast<char>(b);
    }
    if (ok) t.swap(raw);
  }
}

// Runs of <0xXX> tokens become their bytes; a run that is not valid UTF-8 becomes one U+FFFD per byte.
void byte_fallback_decode(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string run;
  size_t run_len = 0;
  const auto flush = [&] {
    if (run_len == 0) return;
    std::string fixed;
    if (sanitize_utf8(run, fixed)) {
      out.push_back(run);
    } else {
      std::string bad;
      for (size_t i = 0; i < run_len; ++i) bad += "\xEF\xBF\xBD";
      out.push_back(bad);
    }
    run.clear();
    run_len = 0;
  };
  for (std::string& t : tokens) {
    unsigned byte = 0;
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::sscanf(t.c_str() + 3, "%2x", &byte) == 1) {
      run += static_cast<char>(byte);
      ++run_len;
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  tokens.swap(out);
}

void strip_decode(std::vector<std::string>& tokens, const std::string& ch, size_t start, size_t stop) {
  for (std::string& t : tokens) {
    for (size_t n = 0; n < start && t.compare(0, ch.size(), ch) == 0; ++n) t.erase(0, ch.size());
    for (size_t n = 0; n < stop && t.size() >= ch.size() && t.compare(t.size() - ch.size(), ch.size(), ch) == 0; ++n)
      t.resize(t.size() - ch.size());
  }
}

}  // namespace

Decoder::Decoder(const Json& j) {
  if (!j.is_null()) add(j);
}

void Decoder::add(const Json& j) {
  const std::string type = type_of(j, "decoder");
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array()) malformed("decoder Sequence has no list");
    for (const Json& part : j["decoders"]) add(part);
  } else if (type == "ByteLevel") {
    steps_.push_back({.kind = Kind::ByteLevel});
  } else if (type == "ByteFallback") {
    steps_.push_back({.kind = Kind::ByteFallback});
  } else if (type == "Fuse") {
    steps_.push_back({.kind = Kind::Fuse});
  } else if (type == "Replace") {
    bool is_regex = false;
    std::string from = pattern_field(j, "decoder Replace", is_regex);
    if (is_regex) unsupported("decoder Replace with a Regex pattern");
    steps_.push_back({.kind = Kind::Replace, .from = std::move(from), .to = string_field(j, "content", "decoder Replace")});
  } else if (type == "Strip") {
    const std::string content = string_field(j, "content", "decoder Strip");
    steps_.push_back({.kind = Kind::Strip, .from = content, .start = j.value("start", size_t{0}), .stop = j.value("stop", size_t{0})});
  } else if (type == "Metaspace") {
    const std::string scheme = metaspace_scheme(j, "decoder Metaspace");
    steps_.push_back({.kind = Kind::Metaspace, .from = string_field(j, "replacement", "decoder Metaspace"),
                      .strip_first = scheme != "never"});
  } else {
    unsupported("decoder type '" + type + "'");
  }
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Kind::ByteLevel: byte_level_decode(tokens); break;
      case Kind::ByteFallback: byte_fallback_decode(tokens); break;
      case Kind::Replace:
        for (std::string& t : tokens) replace_all(t, s.from, s.to);
        break;
      case Kind::Strip: strip_decode(tokens, s.from, s.start, s.stop); break;
      case Kind::Fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Kind::Metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          replace_all(tokens[i], s.from, " ");
          if (i == 0 && s.strip_first && !tokens[i].empty() && tokens[i][0] == ' ') tokens[i].erase(0, 1);
        }
        break;
    }
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  return to_valid_utf8(std::move(text));
}

}  // namespace tetra::data::tok
