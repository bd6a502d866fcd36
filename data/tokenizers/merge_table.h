// The merges of a BPE model as an open-addressing hash table: (left id, right id) -> (rank, merged
// id). One probe is usually one cache line, where std::unordered_map chases a node pointer; the
// merge loop looks a pair up for every neighbour it forms.
#pragma once
#include <cstdint>
#include <vector>

namespace tetra::data::tok {

class MergeTable {
 public:
  struct Merge {
    uint32_t rank, id;
  };
  // Room for `n` pairs at most half full.
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots_.assign(cap, Slot{kEmpty, {0, 0}});
    mask_ = cap - 1;
  }
  // Adds the pair unless it is there already (the first rank wins, as in Hugging Face's files).
  void insert(uint32_t left, uint32_t right, Merge m) {
    const uint64_t key = (uint64_t{left} << 32) | right;
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return;
      if (slots_[i].key == kEmpty) {
        slots_[i] = {key, m};
        return;
      }
    }
  }
  const Merge* find(uint32_t left, uint32_t right) const {
    const uint64_t key = (uint64_t{left} << 32) | right;
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // no id pair is (2^32-1, 2^32-1)
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  size_t hash(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace tetra::data::tok
