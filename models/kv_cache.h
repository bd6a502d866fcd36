// The key/value cache of generation: per attention layer, the qkv rows of every position seen so far
// [B, T_max, (H + 2·Hkv)·D] as that layer's attention lays them out (q and k rotated; the q part is
// kept too, so the rows are exactly what attention_forward reads), the first length() filled. A
// pass with MicroBatchContext::kv_cache set runs its attention through causal_attention below, which
// appends the pass's rows and attends them against the cache; every family's blocks call it in place
// of ops::attention_forward, so their projections, norms and rotary code serve generation unchanged.
#pragma once
#include <cstdint>
#include <map>

#include "models/layer.h"

namespace tetra {

class KvCache {
 public:
  // `max_length`: the longest sequence (prompt and generated tokens) the cache holds.
  KvCache(int64_t batch, int64_t max_length, DType dtype, Device device)
      : batch_(batch), max_length_(max_length), dtype_(dtype), device_(device) {}
  int64_t length() const { return length_; }  // positions cached in every layer
  int64_t max_length() const { return max_length_; }
  // After a pass over every layer: its `tokens` positions are cached.
  void advance(int64_t tokens) { length_ += tokens; }
  void clear() { length_ = 0; }
  // Appends this pass's rows qkv [B, T, width] of attention `layer` at positions [length(),
  // length() + T) (the layer's rows are allocated at first use) and returns the layer's cache.
  const Tensor& append(int layer, const Tensor& qkv);

 private:
  int64_t batch_, max_length_;
  DType dtype_;
  Device device_;
  int64_t length_ = 0;
  std::map<int, Tensor> rows_;  // attention layer → [B, T_max, width]
};

// Causal self-attention of one pass (runtime/ops.h attention_forward's contract: qkv [B, T, (H +
// 2·Hkv)·D] rotated, out [B, T, H·D], lse [B, H, T]). Without a cache: attention_forward. With
// ctx.kv_cache: the rows are appended to attention `layer`'s cache and attend to every cached
// position (attention_decode); lse is not written (nothing runs backward).
void causal_attention(MicroBatchContext& ctx, int layer, Tensor& out, Tensor& lse, const Tensor& qkv,
                      int64_t n_heads, int64_t n_kv_heads);

}  // namespace tetra
