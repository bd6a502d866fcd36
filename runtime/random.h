// Deterministic, portable random numbers (same stream on every platform and rank): used for
// parameter init, data shuffling and tests. std:: distributions are implementation-defined, so
// tetra draws its own: splitmix64 for integers, Box–Muller for normals.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

namespace tetra {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n ? next_u64() % n : 0; }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) {
    state_ = s;
    has_spare_ = false;
  }

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// A standard normal draw that depends only on (stream, index): counter-based, so any element of a
// tensor can be drawn independently (in parallel, or only a shard of it). Box–Muller on two
// splitmix64 outputs of the counter.
inline double normal_at(uint64_t stream, uint64_t index) {
  Rng rng(stream ^ (index * 0xd1b54a32d192ed03ull));
  double u1 = rng.uniform(), u2 = rng.uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Stable 64-bit hash of a string (FNV-1a), e.g. to derive a per-parameter seed from its name.
inline uint64_t hash_name(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace tetra
