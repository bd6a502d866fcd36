#include "data/tokenizers/normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "runtime/error.h"

namespace tetra::data::tok {

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty() || text.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  size_t start = 0;
  for (size_t at; (at = text.find(from, start)) != std::string::npos; start = at + from.size()) {
    out.append(text, start, at - start);
    out += to;
  }
  out.append(text, start, std::string::npos);
  text.swap(out);
}

Normalizer::Normalizer(const Json& j) {
  if (!j.is_null()) add(j);
}

void Normalizer::add(const Json& j) {
  const std::string type = type_of(j, "normalizer");
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) malformed("normalizer Sequence has no list");
    for (const Json& part : j["normalizers"]) add(part);
    return;
  }
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* form = nullptr;
  if (type == "NFC") form = icu::Normalizer2::getNFCInstance(status);
  if (type == "NFKC") form = icu::Normalizer2::getNFKCInstance(status);
  if (type == "NFD") form = icu::Normalizer2::getNFDInstance(status);
  if (type == "NFKD") form = icu::Normalizer2::getNFKDInstance(status);
  if (form) {
    if (U_FAILURE(status)) TETRA_FAIL(Data, "tokenizer.json: ICU has no ", type, " data: ", u_errorName(status));
    steps_.push_back({.kind = Kind::Unicode, .icu = form});
  } else if (type == "Prepend") {
    steps_.push_back({.kind = Kind::Prepend, .to = string_field(j, "prepend", "normalizer Prepend")});
  } else if (type == "Replace") {
    bool is_regex = false;
    std::string from = pattern_field(j, "normalizer Replace", is_regex);
    if (is_regex) unsupported("normalizer Replace with a Regex pattern");
    if (from.empty()) malformed("normalizer Replace has an empty pattern");
    steps_.push_back({.kind = Kind::Replace, .from = std::move(from), .to = string_field(j, "content", "normalizer Replace")});
  } else {
    unsupported("normalizer type '" + type + "'");
  }
}

void Normalizer::apply(std::string& text) const {
  for (const Step& s : steps_) {
    if (s.kind == Kind::Prepend) {
      if (!text.empty()) text.insert(0, s.to);  // Hugging Face leaves an empty piece empty
    } else if (s.kind == Kind::Replace) {
      replace_all(text, s.from, s.to);
    } else {
      const auto* form = static_cast<const icu::Normalizer2*>(s.icu);
      UErrorCode status = U_ZERO_ERROR;
      const icu::UnicodeString in = icu::UnicodeString::fromUTF8(text);
      if (form->isNormalized(in, status) && U_SUCCESS(status)) continue;
      status = U_ZERO_ERROR;
      const icu::UnicodeString out = form->normalize(in, status);
      if (U_FAILURE(status)) TETRA_FAIL(Data, "Unicode normalization failed: ", u_errorName(status));
      text.clear();
      out.toUTF8String(text);
    }
  }
}

}  // namespace tetra::data::tok
