#include "data/token_widen.h"

#include <cstring>

#include "runtime/error.h"

namespace tetra::data {

namespace {

template <int W>
uint32_t load_id(const unsigned char* p) {
  // Byte by byte: rows start at any byte offset (a GDS read keeps the file's alignment).
  uint32_t id = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
  if constexpr (W == 4) id |= (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  return id;
}

template <int W>
int64_t widen(const unsigned char* staging, const StagedRow* rows, int64_t n_rows, int64_t T, int32_t* inputs,
              int32_t* targets) {
  int64_t bad = -1;
  for (int64_t r = 0; r < n_rows; ++r) {
    const unsigned char* p = staging + rows[r].byte_offset;
    const uint64_t limit = rows[r].limit > 0 ? static_cast<uint64_t>(rows[r].limit) : (uint64_t{1} << 31);
    for (int64_t t = 0; t <= T; ++t) {
      const uint32_t id = load_id<W>(p + t * W);
      if (id >= limit && bad < 0) bad = r * (T + 1) + t;
      if (inputs) {
        if (t < T) inputs[r * T + t] = static_cast<int32_t>(id);
        if (t > 0) targets[r * T + t - 1] = static_cast<int32_t>(id);
      }
    }
  }
  return bad;
}

}  // namespace

int64_t widen_tokens(const void* staging, int width, const StagedRow* rows, int64_t n_rows, int64_t seq_len,
                     int32_t* inputs, int32_t* targets) {
  TETRA_CHECK(width == 2 || width == 4, "token width ", width, " (2 or 4 bytes)");
  TETRA_CHECK((inputs == nullptr) == (targets == nullptr), "widen_tokens needs both outputs or neither");
  const auto* bytes = static_cast<const unsigned char*>(staging);
  return width == 2 ? widen<2>(bytes, rows, n_rows, seq_len, inputs, targets)
                    : widen<4>(bytes, rows, n_rows, seq_len, inputs, targets);
}

uint32_t staged_id(const void* staging, int width, const StagedRow* rows, int64_t seq_len, int64_t flat) {
  const int64_t r = flat / (seq_len + 1), t = flat % (seq_len + 1);
  const auto* p = static_cast<const unsigned char*>(staging) + rows[r].byte_offset + t * width;
  return width == 2 ? load_id<2>(p) : load_id<4>(p);
}

}  // namespace tetra::data
