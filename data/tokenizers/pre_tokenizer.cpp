#include "data/tokenizers/pre_tokenizer.h"

#include "data/tokenizers/normalizer.h"
#include "data/tokenizers/pcre2_pattern.h"
#include "data/tokenizers/utf8.h"

namespace tetra::data::tok {
namespace {

// Hugging Face's ByteLevel pattern (GPT-2's).
const char* const kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Escapes `s` for use as a literal in a PCRE2 pattern.
std::string quote_literal(const std::string& s) { return "\\Q" + s + "\\E"; }

}  // namespace

PreTokenizer::PreTokenizer(const Json& j) {
  if (!j.is_null()) add(j);
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::add_regex(const std::string& pattern, bool remove_matches) {
  patterns_.push_back(std::make_unique<Pcre2Pattern>(pattern));
  steps_.push_back({.kind = Kind::Regex, .regex = patterns_.back().get(), .remove_matches = remove_matches});
}

void PreTokenizer::add(const Json& j) {
  const std::string type = type_of(j, "pre_tokenizer");
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) malformed("pre_tokenizer Sequence has no list");
    for (const Json& part : j["pretokenizers"]) add(part);
  } else if (type == "ByteLevel") {
    byte_level_ = true;
    if (bool_field(j, "add_prefix_space", "pre_tokenizer ByteLevel", true)) steps_.push_back({.kind = Kind::PrefixSpace});
    if (bool_field(j, "use_regex", "pre_tokenizer ByteLevel", true)) add_regex(kByteLevelPattern, false);
  } else if (type == "Split") {
    bool is_regex = false;
    const std::string pattern = pattern_field(j, "pre_tokenizer Split", is_regex);
    if (bool_field(j, "invert", "pre_tokenizer Split", false)) unsupported("pre_tokenizer Split with invert: true");
    const std::string behavior = j.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated" && behavior != "Removed")
      unsupported("pre_tokenizer Split behavior '" + behavior + "'");
    add_regex(is_regex ? pattern : quote_literal(pattern), behavior == "Removed");
  } else if (type == "Metaspace") {
    Step s{.kind = Kind::Metaspace};
    s.replacement = string_field(j, "replacement", "pre_tokenizer Metaspace");
    const std::string scheme = metaspace_scheme(j, "pre_tokenizer Metaspace");
    if (scheme == "never") s.prepend = 0;
    else if (scheme == "first") s.prepend = 1;
    else if (scheme == "always") s.prepend = 2;
    else unsupported("pre_tokenizer Metaspace prepend_scheme '" + scheme + "'");
    s.split = bool_field(j, "split", "pre_tokenizer Metaspace", true);
    steps_.push_back(std::move(s));
  } else {
    unsupported("pre_tokenizer type '" + type + "'");
  }
}

void PreTokenizer::split(std::string_view piece, bool at_start, Words& out) const {
  out.reset(piece);
  if (steps_.empty()) return;
  Words scratch;
  for (const Step& s : steps_) {
    if (s.kind == Kind::Regex)
      apply_regex(s, out, scratch);
    else
      apply_rewrite(s, at_start, out, scratch);
  }
}

// Each word becomes its matches and the gaps between them (Isolated), or its gaps only (Removed).
void PreTokenizer::apply_regex(const Step& s, Words& w, Words& scratch) const {
  scratch.spans.clear();
  for (const auto& [b, e] : w.spans) {
    const std::string_view word(w.text.data() + b, e - b);
    size_t last = 0, from = 0, mb = 0, me = 0;
    while (from < word.size() && s.regex->find(word, from, mb, me)) {
      if (me == mb) {  // an empty match splits nothing: step over one character
        next_code_point(word, from = mb);
        continue;
      }
      if (mb > last) scratch.spans.emplace_back(b + last, b + mb);
      if (!s.remove_matches) scratch.spans.emplace_back(b + mb, b + me);
      last = from = me;
    }
    if (last < word.size()) scratch.spans.emplace_back(b + last, e);
  }
  w.spans.swap(scratch.spans);
}

// Steps that change the text: ByteLevel's prefix space, and Metaspace (spaces to the replacement,
// the replacement prepended, then split before each replacement).
void PreTokenizer::apply_rewrite(const Step& s, bool at_start, Words& w, Words& scratch) const {
  scratch.text.clear();
  scratch.spans.clear();
  for (const auto& [b, e] : w.spans) {
    const std::string_view word(w.text.data() + b, e - b);
    const auto begin = static_cast<uint32_t>(scratch.text.size());
    if (s.kind == Kind::PrefixSpace) {
      if (word.empty() || word[0] != ' ') scratch.text += ' ';
      scratch.text += word;
      scratch.spans.emplace_back(begin, static_cast<uint32_t>(scratch.text.size()));
      continue;
    }
    std::string replaced(word);
    replace_all(replaced, " ", s.replacement);
    const bool prepend = s.prepend == 2 || (s.prepend == 1 && at_start && b == 0);
    if (prepend && replaced.compare(0, s.replacement.size(), s.replacement) != 0) replaced.insert(0, s.replacement);
    scratch.text += replaced;
    if (!s.split) {
      scratch.spans.emplace_back(begin, static_cast<uint32_t>(scratch.text.size()));
      continue;
    }
    // MergedWithNext: each replacement starts a word.
    size_t start = 0;
    for (size_t at = replaced.find(s.replacement, 1); at != std::string::npos; at = replaced.find(s.replacement, at + 1)) {
      scratch.spans.emplace_back(begin + start, begin + at);
      start = at;
    }
    if (start < replaced.size()) scratch.spans.emplace_back(begin + start, begin + replaced.size());
  }
  w.text.swap(scratch.text);
  w.spans.swap(scratch.spans);
}

}  // namespace tetra::data::tok
