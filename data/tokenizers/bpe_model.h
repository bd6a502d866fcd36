// The BPE model of a tokenizer.json: vocabulary, merges by rank, unknown token, byte fallback.
// A word's symbols are its bytes (byte-level files: GPT-2, Llama 3) or its characters (Llama 2),
// merged pair by pair, lowest rank first and leftmost among equals, as Hugging Face's BPE does.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizers/hf_json.h"
#include "data/tokenizers/merge_table.h"

namespace tetra::data::tok {

// A string-keyed map that finds by string_view without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIds = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `model` is the file's "model"; `byte_level`: the pre-tokenizer maps bytes to GPT-2's alphabet.
  BpeModel(const Json& model, bool byte_level);
  // Appends the ids of one word (raw bytes; valid UTF-8 unless byte-level). Thread-safe.
  void encode_word(std::string_view word, std::vector<uint32_t>& out) const;
  // The id of a vocabulary entry as the file writes it (byte-level entries in GPT-2's alphabet).
  std::optional<uint32_t> id_of(std::string_view token) const;
  // The entry of `id` as the file writes it; nullptr where the vocabulary has no such id.
  const std::string* token_of(uint32_t id) const;
  // One past the largest id.
  uint32_t id_limit() const { return static_cast<uint32_t>(id_to_token_.size()); }

 private:
  using Merge = MergeTable::Merge;
  struct Symbol {
    uint32_t id;
    int32_t prev, next;
  };
  void read_vocab(const Json& vocab);
  void read_merges(const Json& merges);
  const Merge* find_merge(uint32_t left, uint32_t right) const;
  // The word's symbols before any merge: bytes or characters, unknown ones as bytes or unk.
  void initial_symbols(std::string_view word, std::vector<Symbol>& syms) const;
  void merge_all(std::vector<Symbol>& syms) const;
  // encode_word without the cache.
  void encode_uncached(std::string_view word, std::vector<uint32_t>& out) const;

  bool byte_level_;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  std::optional<uint32_t> unk_;
  StringIds vocab_;      // as the file writes it
  StringIds raw_vocab_;  // byte-level: the bytes each entry stands for
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::array<int64_t, 256> byte_ids_;  // byte-level: each byte's character; else the <0xXX> entries; -1: none
  MergeTable merges_;  // (left id, right id) -> rank and merged id
};

}  // namespace tetra::data::tok
