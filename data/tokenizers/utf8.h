// UTF-8 helpers shared by the tokenizers: decoding one code point, the replacement of invalid
// sequences (what Python's bytes.decode(errors="replace") and WHATWG's TextDecoder do), GPT-2's
// byte-to-character alphabet, and the one-line escaping of decoded text.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tetra::data::tok {

void append_utf8(std::string& out, char32_t cp);

// The code point at s[i] of valid UTF-8; advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);

// Length in bytes of the valid sequence starting at s[i], or 0 where s[i] starts an invalid one.
size_t valid_sequence_length(std::string_view s, size_t i);

// True when `s` is valid UTF-8. Otherwise writes to `fixed` a copy in which each maximal invalid
// subpart is one U+FFFD and returns false.
bool sanitize_utf8(std::string_view s, std::string& fixed);

// `s` with each maximal invalid subpart replaced by U+FFFD (itself where it is valid).
std::string to_valid_utf8(std::string s);

// GPT-2's bytes_to_unicode: byte b is shown as this character (UTF-8), so every byte is printable.
const std::array<std::string, 256>& byte_level_alphabet();

// The byte a byte-level character stands for, or -1 for a character outside the alphabet.
int byte_level_byte(char32_t cp);

// Appends byte `c` escaped: backslash as "\\", \n \t \r, other control bytes (and with
// `escape_non_ascii` bytes >= 0x80) as \xNN, anything else as is.
void append_escaped(std::string& s, unsigned char c, bool escape_non_ascii);

// Printable text as is; backslash as "\\", \n \t \r, other control bytes as \xNN: one line.
std::string escape_line(std::string_view text);

}  // namespace tetra::data::tok
