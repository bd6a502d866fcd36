#include "data/tokenizers/utf8.h"

#include <cstdio>

namespace tetra::data::tok {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return ++i, c;
  if (c < 0xE0) {
    const char32_t cp = ((c & 0x1F) << 6) | (b(i + 1) & 0x3F);
    i += 2;
    return cp;
  }
  if (c < 0xF0) {
    const char32_t cp = ((c & 0x0F) << 12) | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
    i += 3;
    return cp;
  }
  const char32_t cp = ((c & 0x07) << 18) | ((b(i + 1) & 0x3F) << 12) | ((b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
  i += 4;
  return cp;
}

// Scans the sequence at s[i]: returns its length and sets `valid`; for an invalid one, the length of
// its maximal subpart (the lead byte and the continuation bytes still allowed when it broke off).
static size_t scan_sequence(std::string_view s, size_t i, bool& valid) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  valid = true;
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (Unicode Table 3-7)
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    valid = false;
    return 1;
  }
  size_t k = 1;
  for (; k <= need && i + k < s.size(); ++k) {
    const unsigned char d = b(i + k);
    if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) break;
  }
  valid = k == need + 1;
  return k;
}

size_t valid_sequence_length(std::string_view s, size_t i) {
  bool valid;
  const size_t n = scan_sequence(s, i, valid);
  return valid ? n : 0;
}

bool sanitize_utf8(std::string_view s, std::string& fixed) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = valid_sequence_length(s, i);
    if (n == 0) break;
    i += n;
  }
  if (i == s.size()) return true;
  fixed.assign(s.substr(0, i));
  while (i < s.size()) {
    bool valid;
    const size_t n = scan_sequence(s, i, valid);
    if (valid)
      fixed.append(s.substr(i, n));
    else
      fixed += "\xEF\xBF\xBD";
    i += n;
  }
  return false;
}

std::string to_valid_utf8(std::string s) {
  std::string fixed;
  return sanitize_utf8(s, fixed) ? s : fixed;
}

const std::array<std::string, 256>& byte_level_alphabet() {
  static const std::array<std::string, 256> alphabet = [] {
    std::array<std::string, 256> a;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      append_utf8(a[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return a;
  }();
  return alphabet;
}

int byte_level_byte(char32_t cp) {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> inv;
    inv.fill(-1);
    const auto& a = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) {
      size_t i = 0;
      inv[next_code_point(a[b], i)] = b;
    }
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

void append_escaped(std::string& s, unsigned char c, bool escape_non_ascii) {
  if (c == '\\') {
    s += "\\\\";
  } else if (c == '\n') {
    s += "\\n";
  } else if (c == '\t') {
    s += "\\t";
  } else if (c == '\r') {
    s += "\\r";
  } else if (c < 0x20 || c == 0x7f || (escape_non_ascii && c >= 0x80)) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
    s += buf;
  } else {
    s += static_cast<char>(c);
  }
}

std::string escape_line(std::string_view text) {
  std::string s;
  s.reserve(text.size());
  for (char ch : text) append_escaped(s, static_cast<unsigned char>(ch), false);
  return s;
}

}  // namespace tetra::data::tok
