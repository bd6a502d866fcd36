#include "models/stored_tensors.h"

#include <algorithm>
#include <cstring>

namespace tetra {

Tensor transpose_host(const Tensor& m) {
  TETRA_CHECK(m.ndim() == 2 && m.dtype() == DType::F32 && m.device().is_cpu(), "transpose_host: ", m.describe());
  const int64_t R = m.dim(0), C = m.dim(1);
  Tensor t = Tensor::empty({C, R}, DType::F32);
  const float* src = m.data<float>();
  float* dst = t.data<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) dst[c * R + r] = src[r * C + c];
  return t;
}

std::vector<StoredTensor> stored_tensors(const Param& p) {
  std::vector<StoredTensor> out;
  const Shape& full = p.full_shape;
  auto rows_shape = [&](int64_t rows) {
    Shape s = full;
    s[0] = rows;
    if (p.transposed_in_checkpoint && s.size() == 2) std::swap(s[0], s[1]);
    return s;
  };
  if (p.stored_in_parts()) {
    for (const ParamPart& part : p.parts)
      out.push_back({part.name, rows_shape(part.rows), part.row_begin, part.rows, p.transposed_in_checkpoint});
  } else {
    out.push_back({p.name, rows_shape(full.empty() ? 1 : full[0]), 0, full.empty() ? 1 : full[0],
                   p.transposed_in_checkpoint});
  }
  return out;
}

namespace {
// Elements per row of a full tensor (the product of every dim after the first).
int64_t row_elems(const Tensor& full) { return full.ndim() == 0 ? 1 : full.numel() / std::max<int64_t>(1, full.dim(0)); }
}  // namespace

Tensor to_stored(const StoredTensor& t, const Tensor& full) {
  TETRA_CHECK(full.device().is_cpu() && full.dtype() == DType::F32, "to_stored: ", full.describe());
  const int64_t per_row = row_elems(full);
  Shape rows_shape = t.shape;
  if (t.transposed) std::swap(rows_shape[0], rows_shape[1]);
  Tensor rows = Tensor::empty(rows_shape, DType::F32);
  TETRA_CHECK(rows.numel() == t.rows * per_row, "to_stored: ", t.name, " ", shape_str(t.shape), " from ",
              full.describe());
  std::memcpy(rows.data<float>(), full.data<float>() + t.row_begin * per_row, rows.nbytes());
  return t.transposed ? transpose_host(rows) : rows;
}

void from_stored(const StoredTensor& t, const Tensor& stored, Tensor& full) {
  TETRA_CHECK(full.device().is_cpu() && full.dtype() == DType::F32 && stored.shape() == t.shape, "from_stored: ",
              t.name, " ", stored.describe(), " into ", full.describe());
  const Tensor rows = t.transposed ? transpose_host(stored) : stored;
  const int64_t per_row = row_elems(full);
  TETRA_CHECK(rows.numel() == t.rows * per_row, "from_stored: ", t.name);
  std::memcpy(full.data<float>() + t.row_begin * per_row, rows.data<float>(), rows.nbytes());
}

}  // namespace tetra
