#include "data/tokenizers/bpe_model.h"

#include <algorithm>
#include <cstdio>

#include "data/tokenizers/utf8.h"
#include "runtime/error.h"

namespace tetra::data::tok {

BpeModel::BpeModel(const Json& model, bool byte_level) : byte_level_(byte_level) {
  if (!model.is_object()) malformed("has no \"model\"");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") unsupported("model type '" + type + "'");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0)
    unsupported("model BPE with dropout");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
      unsupported(std::string("model BPE with a ") + key);
  byte_fallback_ = bool_field(model, "byte_fallback", "model", false);
  fuse_unk_ = bool_field(model, "fuse_unk", "model", false);
  ignore_merges_ = bool_field(model, "ignore_merges", "model", false);
  if (!model.contains("vocab") || !model["vocab"].is_object()) malformed("model has no \"vocab\" object");
  read_vocab(model["vocab"]);
  if (!model.contains("merges") || !model["merges"].is_array()) malformed("model has no \"merges\" list");
  read_merges(model["merges"]);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    unk_ = id_of(model["unk_token"].get<std::string>());
    if (!unk_) malformed("model unk_token '" + model["unk_token"].get<std::string>() + "' is not in the vocabulary");
  }
}

void BpeModel::read_vocab(const Json& vocab) {
  vocab_.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    if (!id_json.is_number_unsigned()) malformed("vocab entry '" + token + "' has no id");
    const auto id = id_json.get<uint32_t>();
    vocab_.emplace(token, id);
    if (id >= id_to_token_.size()) {
      id_to_token_.resize(id + 1);
      has_id_.resize(id + 1);
    }
    id_to_token_[id] = token;
    has_id_[id] = true;
  }
  byte_ids_.fill(-1);
  if (!byte_level_) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      if (auto it = vocab_.find(name); it != vocab_.end()) byte_ids_[b] = it->second;
    }
    return;
  }
  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b)
    if (auto it = vocab_.find(alphabet[b]); it != vocab_.end()) byte_ids_[b] = it->second;
  // Entries outside GPT-2's alphabet cannot come out of the byte-level pre-tokenizer: left out.
  raw_vocab_.reserve(vocab_.size());
  for (const auto& [token, id] : vocab_) {
    std::string raw;
    size_t i = 0;
    bool ok = true;
    while (ok && i < token.size()) {
      const int byte = byte_level_byte(next_code_point(token, i));
      ok = byte >= 0;
      raw += static_cast<char>(byte);
    }
    if (ok) raw_vocab_.emplace(std::move(raw), id);
  }
}

void BpeModel::read_merges(const Json& merges) {
  merges_.reserve(merges.size());
  uint32_t rank = 0;
  for (const Json& m : merges) {
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        malformed("merge '" + s + "' is not two tokens separated by a space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      malformed("merge " + m.dump() + " is not a pair of tokens");
    }
    const auto l = id_of(left), r = id_of(right), merged = id_of(left + right);
    if (!l || !r || !merged) malformed("merge '" + left + " " + right + "' names a token not in the vocabulary");
    merges_.insert(*l, *r, Merge{rank++, *merged});
  }
}

std::optional<uint32_t> BpeModel::id_of(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::token_of(uint32_t id) const {
  return id < has_id_.size() && has_id_[id] ? &id_to_token_[id] : nullptr;
}

const BpeModel::Merge* BpeModel::find_merge(uint32_t left, uint32_t right) const {
  return merges_.find(left, right);
}

void BpeModel::initial_symbols(std::string_view word, std::vector<Symbol>& syms) const {
  syms.clear();
  bool pending_unk = false;  // the last symbol is an unk that fuse_unk may extend
  const auto push = [&](uint32_t id) {
    syms.push_back({id, static_cast<int32_t>(syms.size()) - 1, static_cast<int32_t>(syms.size()) + 1});
  };
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    if (byte_level_) {
      ++i;
    } else {
      next_code_point(word, i);
    }
    const std::string_view ch = word.substr(start, i - start);
    if (byte_level_ && byte_ids_[static_cast<unsigned char>(ch[0])] >= 0) {
      push(static_cast<uint32_t>(byte_ids_[static_cast<unsigned char>(ch[0])]));
      pending_unk = false;
      continue;
    }
    if (!byte_level_) {
      if (auto it = vocab_.find(ch); it != vocab_.end()) {
        push(it->second);
        pending_unk = false;
        continue;
      }
      if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
        for (char c : ch) push(static_cast<uint32_t>(byte_ids_[static_cast<unsigned char>(c)]));
        pending_unk = false;
        continue;
      }
    }
    if (!unk_) continue;  // Hugging Face drops a character it has no id for when there is no unk
    if (!(fuse_unk_ && pending_unk)) push(*unk_);
    pending_unk = true;
  }
  if (!syms.empty()) syms.back().next = -1;
}

void BpeModel::merge_all(std::vector<Symbol>& syms) const {
  struct Candidate {
    uint32_t rank, pos, id;
  };
  // A min-heap on (rank, position): the lowest rank first, the leftmost among equal ranks.
  const auto later = [](const Candidate& a, const Candidate& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  thread_local std::vector<Candidate> heap;
  heap.clear();
  for (size_t i = 0; i + 1 < syms.size(); ++i)
    if (const Merge* m = find_merge(syms[i].id, syms[i + 1].id)) heap.push_back({m->rank, static_cast<uint32_t>(i), m->id});
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = syms[c.pos];
    if (left.id == UINT32_MAX || left.next < 0) continue;
    Symbol& right = syms[left.next];
    const Merge* now = find_merge(left.id, right.id);
    if (!now || now->id != c.id) continue;  // a stale entry: one side was merged since
    left.id = c.id;
    right.id = UINT32_MAX;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = static_cast<int32_t>(c.pos);
    if (left.prev >= 0)
      if (const Merge* m = find_merge(syms[left.prev].id, left.id)) {
        heap.push_back({m->rank, static_cast<uint32_t>(left.prev), m->id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    if (left.next >= 0)
      if (const Merge* m = find_merge(left.id, syms[left.next].id)) {
        heap.push_back({m->rank, c.pos, m->id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
  }
}

namespace {

// A thread's cache of word -> ids: text repeats its words, and a word's ids never change. Words
// up to kMaxCachedWord bytes; emptied when it holds kMaxCachedWords (bounded memory per thread) or
// when the thread moves to another tokenizer.
constexpr size_t kMaxCachedWord = 64;
constexpr size_t kMaxCachedWords = 1 << 16;
struct WordCache {
  const void* owner = nullptr;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> words;  // -> ids[first, +second)
  std::vector<uint32_t> ids;
  void reset(const void* model) {
    owner = model;
    words.clear();
    ids.clear();
  }
};

}  // namespace

void BpeModel::encode_word(std::string_view word, std::vector<uint32_t>& out) const {
  if (word.empty()) return;
  if (word.size() > kMaxCachedWord) return encode_uncached(word, out);
  thread_local WordCache cache;
  if (cache.owner != this || cache.words.size() >= kMaxCachedWords) cache.reset(this);
  if (auto it = cache.words.find(word); it != cache.words.end()) {
    const uint32_t* ids = cache.ids.data() + it->second.first;
    out.insert(out.end(), ids, ids + it->second.second);
    return;
  }
  const size_t before = out.size();
  encode_uncached(word, out);
  const auto start = static_cast<uint32_t>(cache.ids.size());
  cache.ids.insert(cache.ids.end(), out.begin() + static_cast<ptrdiff_t>(before), out.end());
  cache.words.emplace(std::string(word), std::make_pair(start, static_cast<uint32_t>(out.size() - before)));
}

void BpeModel::encode_uncached(std::string_view word, std::vector<uint32_t>& out) const {
  if (ignore_merges_) {
    const auto& whole = byte_level_ ? raw_vocab_ : vocab_;
    if (auto it = whole.find(word); it != whole.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<Symbol> syms;
  initial_symbols(word, syms);
  merge_all(syms);
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace tetra::data::tok
