#include "data/tokenizers/added_tokens.h"

#include <algorithm>

namespace tetra::data::tok {

AddedTokens::AddedTokens(const Json& added, bool normalizes) {
  if (added.is_null()) return;
  if (!added.is_array()) malformed("\"added_tokens\" is not a list");
  for (const Json& t : added) {
    const std::string content = string_field(t, "content", "added token");
    if (!t.contains("id") || !t["id"].is_number_unsigned()) malformed("added token '" + content + "' has no id");
    const auto id = t["id"].get<uint32_t>();
    for (const char* flag : {"single_word", "lstrip", "rstrip"})
      if (bool_field(t, flag, "added token", false))
        unsupported(std::string("added token '") + content + "' with " + flag + ": true");
    const bool special = bool_field(t, "special", "added token", false);
    if (normalizes && bool_field(t, "normalized", "added token", !special))
      unsupported("added token '" + content + "' with normalized: true beside a normalizer");
    if (content.empty()) malformed("an added token is empty");
    ids_[content] = id;
    contents_[id] = content;
    id_limit_ = std::max(id_limit_, id + 1);
    by_first_byte_[static_cast<unsigned char>(content[0])].emplace_back(content, id);
  }
  for (auto& bucket : by_first_byte_)
    std::stable_sort(bucket.begin(), bucket.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

void AddedTokens::split(std::string_view text, std::vector<Segment>& out) const {
  out.clear();
  size_t plain = 0;  // start of the plain text not yet emitted
  for (size_t i = 0; i < text.size(); ++i) {
    const auto& bucket = by_first_byte_[static_cast<unsigned char>(text[i])];
    if (bucket.empty()) continue;
    for (const auto& [content, id] : bucket) {
      if (text.compare(i, content.size(), content) != 0) continue;
      if (i > plain) out.push_back({plain, i, -1});
      out.push_back({i, i + content.size(), id});
      plain = i + content.size();
      i = plain - 1;
      break;
    }
  }
  if (plain < text.size()) out.push_back({plain, text.size(), -1});
}

std::optional<uint32_t> AddedTokens::id_of(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* AddedTokens::content_of(uint32_t id) const {
  auto it = contents_.find(id);
  return it == contents_.end() ? nullptr : &it->second;
}

}  // namespace tetra::data::tok
