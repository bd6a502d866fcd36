// CPU token + position embedding:
//   forward   y[n, :] = wte[ids[n], :] + wpe[n mod T, :]        (wpe optional)
//   backward  dwte[ids[n], :] += dy[n, :],  dwpe[n mod T, :] += dy[n, :]
// Shapes: ids int32 [N] or [B, T] (N = B·T, T = seq_len); wte [V, C]; wpe [≥T, C]; y, dy = ids' shape + [C].
// With a vocabulary shard (ops::VocabShard, tensor parallelism) wte [Vr, C] holds ids [begin, begin + Vr)
// of shard.vocab: other ids read a zero token row (forward) and update nothing (backward).
// Token ids are checked against the vocabulary before anything is written, so a bad id leaves the
// outputs untouched.
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

namespace {

// Validates ids (int32, N divisible by seq_len, every id in [0, V)) and returns N.
int64_t check_ids(const char* op, const Tensor& ids, int64_t vocab, int64_t seq_len) {
  check_dtype(op, "ids", ids, DType::I32);
  if (seq_len <= 0) TETRA_FAIL(Internal, op, ": seq_len must be > 0, got ", seq_len);
  const int64_t N = ids.numel();
  if (N % seq_len != 0)
    TETRA_FAIL(Internal, op, ": ids ", ids.describe(), " hold ", N, " tokens, not a multiple of seq_len ", seq_len);
  const int32_t* p = ids.data<int32_t>();
  for (int64_t n = 0; n < N; ++n)
    if (p[n] < 0 || p[n] >= vocab)
      TETRA_FAIL(Internal, op, ": token id ", p[n], " at position ", n, " is outside the vocabulary [0, ", vocab,
                 "); check the tokenizer and model.vocab_size");
  return N;
}

void check_table(const char* op, const char* what, const Tensor& t) {
  check_dtype(op, what, t, DType::F32);
  if (t.ndim() != 2) TETRA_FAIL(Internal, op, ": ", what, " must be 2-D [rows, C], got ", t.describe());
}

void check_positions(const char* op, const char* what, const Tensor& wpe, int64_t C, int64_t seq_len) {
  check_table(op, what, wpe);
  if (wpe.dim(1) != C || wpe.dim(0) < seq_len)
    TETRA_FAIL(Internal, op, ": ", what, " must be [≥", seq_len, ", ", C, "] (seq_len ", seq_len,
               " positions), got ", wpe.describe());
}

}  // namespace

void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& wte, const Tensor& wpe, int64_t seq_len,
                       ops::VocabShard shard) {
  const char* op = "embedding_forward";
  check_table(op, "wte", wte);
  const int64_t V = wte.dim(0), C = wte.dim(1);
  const int64_t vocab = ops::shard_vocabulary(op, shard, V);
  const bool with_pos = wpe.defined();
  if (with_pos) check_positions(op, "wpe", wpe, C, seq_len);
  check_dtype(op, "y", y, DType::F32);
  check_shape(op, "y", y, with_last(ids.shape(), C));
  const int64_t N = check_ids(op, ids, vocab, seq_len);

  const int32_t* pid = ids.data<int32_t>();
  const float* pte = wte.data<float>();
  const float* ppe = with_pos ? wpe.data<float>() : nullptr;
  float* py = y.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = static_cast<int64_t>(pid[n]) - shard.begin;
    float* yr = py + n * C;
    if (row < 0 || row >= V) {  // another shard's id: the position row alone
      for (int64_t c = 0; c < C; ++c) yr[c] = ppe ? ppe[(n % seq_len) * C + c] : 0.0f;
      continue;
    }
    const float* te = pte + row * C;
    if (ppe) {
      const float* pe = ppe + (n % seq_len) * C;
      for (int64_t c = 0; c < C; ++c) yr[c] = te[c] + pe[c];
    } else {
      for (int64_t c = 0; c < C; ++c) yr[c] = te[c];
    }
  }
}

void embedding_backward(Tensor& dwte, Tensor* dwpe, const Tensor& dy, const Tensor& ids, int64_t seq_len,
                        ops::VocabShard shard) {
  const char* op = "embedding_backward";
  check_table(op, "dwte", dwte);
  const int64_t V = dwte.dim(0), C = dwte.dim(1);
  const int64_t vocab = ops::shard_vocabulary(op, shard, V);
  const bool with_pos = given(dwpe);
  if (with_pos) check_positions(op, "dwpe", *dwpe, C, seq_len);
  check_dtype(op, "dy", dy, DType::F32);
  check_shape(op, "dy", dy, with_last(ids.shape(), C));
  const int64_t N = check_ids(op, ids, vocab, seq_len);

  const int32_t* pid = ids.data<int32_t>();
  const float* pdy = dy.data<float>();
  float* pdte = dwte.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = static_cast<int64_t>(pid[n]) - shard.begin;
    if (row < 0 || row >= V) continue;  // another shard's id
    float* g = pdte + row * C;
    const float* dyr = pdy + n * C;
    for (int64_t c = 0; c < C; ++c) g[c] += dyr[c];
  }
  if (with_pos) {
    // Each position receives B rows; sum them in double before adding to dwpe.
    float* pdpe = dwpe->data<float>();
    std::vector<double> acc(static_cast<size_t>(seq_len * C), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      double* a = acc.data() + (n % seq_len) * C;
      const float* dyr = pdy + n * C;
      for (int64_t c = 0; c < C; ++c) a[c] += dyr[c];
    }
    for (int64_t i = 0; i < seq_len * C; ++i) pdpe[i] = static_cast<float>(pdpe[i] + acc[i]);
  }
}

}  // namespace tetra::cpu
