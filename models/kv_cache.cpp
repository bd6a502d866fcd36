#include "models/kv_cache.h"

#include "runtime/ops.h"

namespace tetra {

const Tensor& KvCache::append(int layer, const Tensor& qkv) {
  TETRA_CHECK(qkv.ndim() == 3 && qkv.dim(0) == batch_ && qkv.dtype() == dtype_, "KvCache: rows ", qkv.describe(),
              " for a cache of ", batch_, " sequences of ", dtype_name(dtype_));
  const int64_t T = qkv.dim(1), width = qkv.dim(2);
  if (length_ + T > max_length_)
    TETRA_FAIL(Usage, "the sequence would grow to ", length_ + T, " tokens, past the cache's ", max_length_);
  auto it = rows_.find(layer);
  if (it == rows_.end()) it = rows_.emplace(layer, Tensor::empty({batch_, max_length_, width}, dtype_, device_)).first;
  Tensor& cache = it->second;
  TETRA_CHECK(cache.dim(2) == width, "KvCache: layer ", layer, " rows of ", width, " values, cached ", cache.dim(2));
  // Each sequence's new rows are one contiguous block of the cache (rows length … length + T − 1).
  for (int64_t b = 0; b < batch_; ++b) {
    Tensor dst = cache.slice_flat((b * max_length_ + length_) * width, {T, width});
    ops::copy(dst, qkv.slice_flat(b * T * width, {T, width}));
  }
  return cache;
}

void causal_attention(MicroBatchContext& ctx, int layer, Tensor& out, Tensor& lse, const Tensor& qkv,
                      int64_t n_heads, int64_t n_kv_heads) {
  if (!ctx.kv_cache) return ops::attention_forward(out, lse, qkv, n_heads, n_kv_heads);
  TETRA_CHECK(ctx.position == ctx.kv_cache->length(), "causal_attention: pass at position ", ctx.position,
              " with ", ctx.kv_cache->length(), " positions cached");
  const Tensor& cache = ctx.kv_cache->append(layer, qkv);
  ops::attention_decode(out, cache, ctx.kv_cache->length() + qkv.dim(1), n_heads, n_kv_heads);
}

}  // namespace tetra
