// The op library: every op the models need, forward and backward, for both backends.
// Each op dispatches on the device of its tensors: CPU (fp32, clear loops, OpenBLAS GEMM) or CUDA
// (bf16 storage, fp32 accumulation). Outputs are passed in, preallocated, so no op allocates in
// the step loop. Shapes below: N = tokens (B·T), C = channels, V = vocabulary, H = query heads,
// Hkv = key/value heads (H % Hkv == 0), D = head dim, F = MLP hidden width, O/I = output/input
// features. "accumulate" means out += result instead of out = result.
#pragma once
#include <cstdint>

#include "runtime/op_list.h"
#include "runtime/rope.h"
#include "runtime/step_control.h"
#include "runtime/tensor.h"

namespace tetra::ops {

// ---------- elementwise and memory ----------
void fill(Tensor& x, float value);
void zero(Tensor& x);
// dst = src, across devices and between fp32/bf16 (conversion on the destination's device); nothing
// when dst and src are the same elements.
void copy(Tensor& dst, const Tensor& src);
// dst[n, dst_col + j] = src[n, src_col + j] for j < cols and every row n: a block of columns
// between two 2-D tensors of one dtype, one device and the same rows (the q or k heads of a fused
// qkv and a [N, heads·D] buffer of their own). dst and src may not overlap. CUDA: one 2-D copy
// (cudaMemcpy2DAsync) on the current stream.
void copy_columns(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t cols);
// y = a + b (residual connection); y may alias a or b.
void add(Tensor& y, const Tensor& a, const Tensor& b);
// x *= s
void scale(Tensor& x, float s);
// y[N, C] += b[C]: a bias after a GEMM without a bias epilogue (fp8_gemm's unfused one). y and b fp32 or
// bf16, added in fp32 and rounded once to y's dtype (CPU and CUDA alike, bit for bit).
void add_bias(Tensor& y, const Tensor& b);

// ---------- dense layers ----------
enum class Activation { None, Gelu };

// y[N, O] = act(x[N, I] · w[O, I]^T + b[O]). b may be undefined. With act = Gelu, pre_act (if given)
// receives the pre-activation values [N, O] that gelu_backward needs.
// With a residual [N, O] (same dtype as y; act must be None, pre_act not given):
// y = x · w^T + b + residual, the residual connection fused into the GEMM (CUDA: cuBLASLt's C
// operand with beta = 1). y may be the residual itself (in place), but may not partly overlap it.
// Dtypes: x and w alike; y (pre_act, residual) x's or fp32 — bf16 x and w with an fp32 y and
// residual is the fp32 residual stream (CUDA: fp32 C and D with bf16 A and B, fp32 compute); b of
// y's dtype or of x's (a bf16 bias added to an fp32 y exactly). The CPU computes in fp32 only.
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, Activation act = Activation::None,
                    Tensor* pre_act = nullptr, const Tensor* residual = nullptr);
// dx[N, I] (+)= dy[N, O] · w[O, I]
void linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, bool accumulate = false);
// dx[N, I] = (dy[N, O] · w[O, I]) ⊙ gelu'(gelu_pre[N, I]): the gradient reaching the pre-activation of
// a GELU whose output fed this layer (an MLP's second projection), the GELU backward fused into the
// GEMM (CUDA bf16: cuBLASLt's DGELU epilogue). dx may not alias gelu_pre.
void linear_backward_input_gelu(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& gelu_pre);
// dw[O, I] (+)= dy[N, O]^T · x[N, I];  db[O] (+)= Σ_n dy[n, :]  (db may be null)
// dy_column_sum (fp32 [O], optional): Σ_n dy[n, :] already computed (layernorm_backward gives it for
// the residual stream); db then takes it instead of reading dy again.
void linear_backward_weight(Tensor& dw, Tensor* db, const Tensor& dy, const Tensor& x, bool accumulate,
                            const Tensor* dy_column_sum = nullptr);

// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). amax (optional, U32 [1]
// on the output's device): the largest |value| written, as swiglu_forward's amax.
void gelu_forward(Tensor& y, const Tensor& x, Tensor* amax = nullptr);
// dx = dy · gelu'(x); dx may alias dy. amax as above.
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, Tensor* amax = nullptr);

// ---------- normalisation ----------
// Dtypes of the norms (both backends): x, and in backward dx and dresidual, share one dtype (the
// residual stream's); y, and in backward dy, share x's or are bf16 with an fp32 x — an fp32 residual
// stream normalised into bf16 activations (docs/kernels.md "Residual stream precision"). w, b one
// dtype; dw, db one dtype; statistics fp32. An output may alias an input only of its own dtype.
// The CPU computes in fp32 whatever the storage.
//
// y[N, C] = (x - mean) · rstd · w + b;  mean[N], rstd[N] fp32 (kept for backward).
// amax (optional, U32 [1]): the largest |y| as stored, as swiglu_forward's (the FP8 cast of the
// projection that reads y then takes it instead of a pass of its own).
void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps, Tensor* amax = nullptr);
// dx[N, C] (+)= ...; dw[C] += Σ dy·x̂; db[C] += Σ dy. Weight gradients always accumulate. db may be
// undefined (a LayerNorm without bias). dx may alias dy.
// With dresidual [N, C] (dx's dtype; accumulate_dx must be false): dx = dresidual + (the gradient
// through the LayerNorm), for the residual stream of a pre-LN block (x feeds both the LayerNorm and
// the residual add). dx may alias dresidual, which saves copying dresidual into dx first.
// dx_column_sum (fp32 [C], optional) receives Σ_n dx[n, :] over the values dx holds afterwards: in a
// pre-LN model dx is the residual stream's gradient, whose column sum is the bias gradient of the
// projection that wrote into the stream (CUDA: summed while dx is written, no second pass).
// dx_rounded ([N, C] of dy's dtype, which must differ from dx's; optional) receives dx's final
// values rounded to its dtype, written in the same pass: the fp32 stream gradient as the bf16
// GEMMs of the projections that wrote into the stream read it.
// dx_amax (optional, U32 [1] on dx's device): the largest |value| of the copy those GEMMs read —
// dx_rounded when given, else dx — as stored, after dresidual is added; the forward's amax contract
// (the FP8 cast of that projection's output gradient then takes it instead of a pass of its own).
// CUDA: folded in the kernel that writes dx.
void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd, bool accumulate_dx = false,
                        const Tensor* dresidual = nullptr, Tensor* dx_column_sum = nullptr,
                        Tensor* dx_rounded = nullptr, Tensor* dx_amax = nullptr);

// RMSNorm (Hugging Face LlamaRMSNorm): y[N, C] = x · rstd · w, rstd[N] fp32 = 1/√(mean_c(x²) + eps).
// y may alias x. amax as in layernorm_forward. row_amax (optional, U32 [N]): each row's largest |y|
// as stored, as swiglu_forward's row_amax (the routed experts' cast of y then takes them:
// moe_permute_fp8_cast's token_amax).
void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps, Tensor* amax = nullptr,
                     Tensor* row_amax = nullptr);
// dx[N, C] (+)= the gradient through the norm; dw[C] += Σ_n dy·x·rstd (always accumulates).
// With dresidual [N, C] (dx's dtype; accumulate_dx false): dx = dresidual + (gradient through the
// norm), for a pre-norm residual stream; dx may alias dresidual or dy. dx_rounded and dx_amax as in
// layernorm_backward. dx_row_amax (optional, U32 [N]): each row's largest |value| of what dx_amax
// measures, as rmsnorm_forward's row_amax. Same contract as layernorm_backward.
void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      bool accumulate_dx = false, const Tensor* dresidual = nullptr, Tensor* dx_rounded = nullptr,
                      Tensor* dx_amax = nullptr, Tensor* dx_row_amax = nullptr);

// ---------- rotary position embedding ----------
// In place on the q and k heads of a fused qkv [B, T, (H + 2·Hkv)·D] (per token: q heads, then k
// heads, then v heads, each head D contiguous values; v untouched). Hugging Face Llama's rotate-half
// convention: for i < D/2 and the angle a = t·inv_freq[i] at position t (position … position + T−1:
// row r of each sequence is at position + r; 0 in training, the cached length when decoding),
// inv_freq[i] = 1 / theta^(2i/D) (fp32, as transformers computes it), rescaled as rope.scaling says
// (linear, llama3; runtime/rope.h). A bare theta converts to plain RoPE:
//   x'[i] = x[i]·cos a − x[i + D/2]·sin a;   x'[i + D/2] = x[i + D/2]·cos a + x[i]·sin a.
// Angles in fp32 on every backend (the same fp32 angle everywhere; sin/cos to fp32 rounding). D even.
void rope_forward(Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, const Rope& rope, int64_t position = 0);
// The transpose (inverse rotation) applied in place to dq and dk of dqkv (same layout); dv untouched.
void rope_backward(Tensor& dqkv, int64_t n_heads, int64_t n_kv_heads, const Rope& rope);

// ---------- SwiGLU ----------
// On a fused gate/up projection gu[N, 2F] = [gate | up] (gate in columns 0 … F−1):
// h[N, F] = silu(gate) · up, silu(g) = g·sigmoid(g). h may not alias gate_up.
// amax (optional, U32 [1] on the output's device) receives the largest |value| the op wrote, as
// stored (rounded to the output's dtype), compared as fp32 bit patterns — what a Tensorwise
// fp8_quantize of the output measures first, which that cast can then take instead (its amax).
// row_amax (optional, U32 [N] on the output's device; N the rows, every dimension but the last):
// each row's largest |value| as stored, the same bits — what moe_grouped_fp8_cast of the output
// takes instead of measuring each expert's rows itself.
void swiglu_forward(Tensor& h, const Tensor& gate_up, Tensor* amax = nullptr, Tensor* row_amax = nullptr);
// d_gate_up[N, 2F] from dh[N, F] and the saved gate_up; d_gate_up may alias neither. amax and
// row_amax as above (of d_gate_up).
void swiglu_backward(Tensor& d_gate_up, const Tensor& dh, const Tensor& gate_up, Tensor* amax = nullptr,
                     Tensor* row_amax = nullptr);

// ---------- mixture of experts (DeepSeek-V3; docs/kernels.md "Mixture of experts") ----------
// E = routed experts, k = experts per token (top_k), N = tokens, R = routed rows (N·k in a layer's own
// expert-grouped order; after an expert-parallel exchange, the rows that arrived), G = experts of one
// grouped GEMM (E, or this rank's E/ep), d = model width. Expert ids, rows, counts and offsets are
// int32 tensors on the op's device: no op here waits for the host, and all may be graph-captured.
struct MoeRouting {
  int64_t top_k = 1;           // k, 1 ≤ k ≤ E
  int64_t n_group = 1;         // expert groups of group-limited routing (E % n_group == 0); 1: none
  int64_t topk_group = 1;      // groups eligible per token, 1 ≤ topk_group ≤ n_group
  float route_scale = 1.0f;    // Hugging Face's routed_scaling_factor
  bool force_balance = false;  // benchmarks only: token n goes to experts (n·k + j) mod E
};

// The router of Hugging Face's DeepseekV3TopkRouter, per token n, from the gate's logits[N, E] fp32
// and the correction bias[E] fp32 (e_score_correction_bias):
//   s = sigmoid(logits), fp32 (evaluated in fp64 and rounded, so that the backends agree bit for bit
//   but in vanishingly rare cases);
//   c = s + bias, the choice scores; with n_group > 1 a group scores the sum of its two largest c,
//   the topk_group best groups stay eligible and the other groups' c become 0 (Hugging Face masks
//   with 0.0, not −∞: an ineligible expert is chosen only when fewer than k eligible c exceed 0);
//   expert_ids[n, :] int32 [N, k] = the k largest c, largest first; equal scores (and equal group
//   scores) go to the lower index, on every backend;
//   weights[n, j] fp32 [N, k] = route_scale · s[id_j] / (Σ_j s[id_j] + 1e-20).
// counts[E] int32 = slots routed to each expert by this call (written). load (optional, int32 [E]):
// += counts, summed over a step's micro-batches for the balancing bias (moe_bias_update).
// force_balance: expert_ids[n, j] = (n·k + j) mod E instead of the choice; weights as above.
// CUDA takes E ≤ 1024, k ≤ 32 and n_group ≤ 32 (one warp per token).
void moe_router_forward(Tensor& expert_ids, Tensor& weights, Tensor& counts, const Tensor& logits,
                        const Tensor& bias, const MoeRouting& routing, Tensor* load = nullptr);
// d_logits[N, E] (fp32; CUDA also bf16) = the gradient through the weights' normalisation and the
// sigmoid from d_weights[N, k] fp32 (the selection is not differentiated): with D = Σ_j s_j + 1e-20
// over the selected experts, ds_j = route_scale/D · (dw_j − Σ_l dw_l·s_l/D), d_logit = ds·s·(1 − s),
// 0 for unselected experts. d_prob_sums (optional, fp32 [B, E], B = N / seq_len sequences of
// consecutive tokens): the gradient w.r.t. moe_balance_loss's per-sequence sums of s_i / Σ_e s_e,
// added for every expert: ds_i += (g_i − Σ_e g_e·s_e/S) / S with S = Σ_e s_e, g = d_prob_sums[b].
// accumulate: d_logits += the result.
void moe_router_backward(Tensor& d_logits, const Tensor& d_weights, const Tensor& logits, const Tensor& expert_ids,
                         const MoeRouting& routing, const Tensor* d_prob_sums = nullptr, bool accumulate = false);
// DeepSeek-V3's sequence-wise balance loss over B = N / seq_len sequences of seq_len = T tokens:
// f[b, i] = E/(k·T) · (slots of sequence b routed to i), P[b, i] = (1/T) · Σ_t s[t, i] / Σ_e s[t, e];
// loss_sum fp64 [1] += loss_scale · Σ_b Σ_i f[b, i]·P[b, i];
// d_prob_sums fp32 [B, E] = grad_scale · f[b, i] / T, for moe_router_backward (written).
void moe_balance_loss(Tensor& loss_sum, Tensor& d_prob_sums, const Tensor& logits, const Tensor& expert_ids,
                      int64_t seq_len, float loss_scale, float grad_scale);
// Auxiliary-loss-free balancing after an optimizer step: bias[i] += rate · sign(mean(load) − load[i])
// (sign(0) = 0), bias fp32 [E], load int32 [E] (the step's counts over every micro-batch and rank).
// control (optional; fp64 [kStepControlSlots] on bias's device, runtime/step_control.h): nothing
// changes when the step was skipped (control[kCtlSkipped] ≠ 0), as the optimizer's update does not.
void moe_bias_update(Tensor& bias, const Tensor& load, float rate, const Tensor* control = nullptr);

// Where each routed slot (n, j), j < k, goes in the expert-grouped order (by expert, then token, then
// slot), from expert_ids[N, k] with E = offsets.numel() − 1 experts:
//   offsets int32 [E + 1]: expert e owns rows [offsets[e], offsets[e + 1]), offsets[0] = 0, offsets[E] = N·k
//   (the prefix sums of the router's counts);
//   row_of int32 [N, k]: the row of slot (n, j);  slot_of int32 [N·k]: the slot n·k + j at each row.
// An id outside [0, E) is an error on the CPU; CUDA cannot raise it and leaves such a slot out of
// every expert (its row_of entry and the row it would have had are then unspecified).
void moe_permute_map(Tensor& offsets, Tensor& row_of, Tensor& slot_of, const Tensor& expert_ids);
// rows[r, :] = x[slot_of[r] / top_k, :] for r < R (rows [R, d], x [N, d], slot_of int32 [R]): the
// tokens copied into expert-grouped rows. rows may not overlap x. row_amax (optional, U32 [R]): as
// swiglu_forward's, of rows.
void moe_permute(Tensor& rows, const Tensor& x, const Tensor& slot_of, int64_t top_k, Tensor* row_amax = nullptr);
// dx[n, :] (+)= Σ_j d_rows[row_of[n, j], :] (fp32 sum over j in order); dx [N, d], row_of [N, k].
void moe_permute_backward(Tensor& dx, const Tensor& d_rows, const Tensor& row_of, bool accumulate = false);
// The combine: y[n, :] (+)= Σ_j weights[n, j] · rows[row_of[n, j], :] (fp32 sum over j in order);
// y [N, d], rows [R, d] (the experts' outputs), weights fp32 [N, k]. y may not overlap rows.
void moe_unpermute(Tensor& y, const Tensor& rows, const Tensor& weights, const Tensor& row_of,
                   bool accumulate = false);
// Its backward: d_rows[row_of[n, j], :] = weights[n, j] · dy[n, :] (rows no slot maps to are not
// written) and d_weights[n, j] fp32 = Σ_c dy[n, c] · rows[row_of[n, j], c] (fp32 dot products).
// d_rows_amax (optional, U32 [R]): as swiglu_forward's row_amax, of d_rows (0 for rows not written).
// d_rows may be undefined (then without d_rows_amax): d_weights alone, for a caller whose only reader
// of d_rows is their FP8 cast, which moe_permute_fp8_cast with the weights makes from dy.
void moe_unpermute_backward(Tensor& d_rows, Tensor& d_weights, const Tensor& dy, const Tensor& rows,
                            const Tensor& weights, const Tensor& row_of, Tensor* d_rows_amax = nullptr);

// Expert parallelism: rows that arrive from A ranks hold, per rank, its rows for each of this rank's
// B experts, in (rank, expert) order; chunk_counts int32 [A, B] (device) gives their sizes.
// moe_sort_chunks reorders the chunks into (expert, rank) order, so that each expert's rows are
// contiguous for the grouped GEMMs; inverse = true takes (expert, rank) order back to (rank, expert)
// for the return exchange. out, in [R, d] (R ≥ Σ chunk_counts; rows past the sum are not written;
// out may not overlap in). moe_chunk_offsets gives the experts' offsets int32 [B + 1] in the sorted
// order: offsets[b] = Σ_{b' < b} Σ_a chunk_counts[a, b'].
void moe_sort_chunks(Tensor& out, const Tensor& in, const Tensor& chunk_counts, bool inverse = false);
void moe_chunk_offsets(Tensor& offsets, const Tensor& chunk_counts);

// Grouped expert GEMMs. Expert g owns rows [offsets[g], offsets[g + 1]) (offsets int32 [G + 1] on the
// device, nondecreasing, within [0, R]; a group may be empty); w [G, O, I] holds one nn.Linear weight
// per expert (SwiGLU experts: gate|up fused [G, 2F, d], down [G, d, F]). Rows outside
// [offsets[0], offsets[G]) of y or dx are not written. Types as linear_forward (CUDA: x/w, dy/w, dy/x
// bf16 or fp32 alike, outputs of that type or fp32; CPU: fp32).
//   forward          y[r, O]   = x[r, I] · w[g]ᵀ                 for each row r of expert g
//   backward input   dx[r, I]  = dy[r, O] · w[g]
//   backward weight  dw[g]     (+)= Σ_{r of g} dy[r, :]ᵀ · x[r, :]   ([G, O, I]; an expert without rows
//                    gets 0, or keeps its values when accumulating)
// Offsets that break the rules above are an error on the CPU; on CUDA they cannot be checked without a
// host synchronisation, so rows are clamped to [0, R] and nothing outside the tensors is touched.
void moe_grouped_linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& offsets);
void moe_grouped_linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& offsets);
void moe_grouped_linear_backward_weight(Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                                        bool accumulate);

// ---------- embeddings ----------
// A vocabulary shard (tensor parallelism: an embedding table or output layer split by vocabulary):
// the table or logits at hand hold ids [begin, begin + rows) of a vocabulary of `vocab` ids. The
// default, vocab = 0, means the whole vocabulary (begin 0, rows = vocab).
struct VocabShard {
  int64_t begin = 0;
  int64_t vocab = 0;
};
// The vocabulary that ids index for a table or logits of `rows` rows: rows without a shard, else
// shard.vocab after checking that [begin, begin + rows) lies in it (an Internal error naming op).
int64_t shard_vocabulary(const char* op, const VocabShard& shard, int64_t rows);
// y[N, C] = wte[ids[n], :] + wpe[n mod T, :]   (ids int32 [N], N = B·T; wpe [≥T, C] may be undefined)
// CUDA: y fp32 or bf16 whatever the tables' dtype (an fp32 residual stream from bf16 tables).
// With a shard: wte [Vr, C] holds rows [begin, begin + Vr); an id of the vocabulary outside them
// gives a zero token row (y = the position row, or 0), so a sum over the shards is the lookup.
void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& wte, const Tensor& wpe, int64_t seq_len,
                       VocabShard shard = {});
// dwte[ids[n], :] += dy[n, :]; dwpe[n mod T, :] += dy[n, :]   (dwpe may be null)
// CUDA: dy fp32 or bf16 whatever the gradients' dtype.
// With a shard: only ids inside it update dwte (row id − begin); dwpe takes every row.
void embedding_backward(Tensor& dwte, Tensor* dwpe, const Tensor& dy, const Tensor& ids, int64_t seq_len,
                        VocabShard shard = {});

// ---------- attention ----------
// Causal self-attention with grouped-query heads. qkv[B, T, (H + 2·Hkv)·D] holds per token the H query
// heads, then the Hkv key heads, then the Hkv value heads, each D contiguous values; query head h reads
// key/value head h / (H / Hkv). Hkv = H is plain multi-head attention (qkv [B, T, 3·H·D]).
// out[B, T, H·D]; lse[B, H, T] fp32 = log Σ exp(scaled scores) per query (for backward).
// scale = 1/√D. No backend repeats K/V in memory.
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads);
// dqkv (qkv's shape) = gradient w.r.t. qkv, from dout[B, T, H·D]; dk, dv summed over the query heads
// of each group.
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int64_t n_heads, int64_t n_kv_heads);
// Plain multi-head attention (n_kv_heads = n_heads): attention_forward(out, lse, qkv, n_heads) and
// attention_backward(dqkv, dout, qkv, out, lse, n_heads), at the end of this file.
// Decoding against a key/value cache (models/kv_cache.h): cache [B, T_max, (H + 2·Hkv)·D] holds qkv rows
// as attention_forward reads them (q and k rotated), of which the first `length` are filled; the
// queries are its rows length − Tq … length − 1, and query row r attends key rows 0 … r.
// out [B, Tq, H·D] of the cache's dtype; fp32 scores and sums; scale 1/√D. Equals the last Tq rows
// of attention_forward over the first `length` rows.
void attention_decode(Tensor& out, const Tensor& cache, int64_t length, int64_t n_heads, int64_t n_kv_heads);

// ---------- loss ----------
// Fused softmax cross-entropy. logits[N, V], targets int32[N] (target < 0: ignored, loss 0).
// losses[N] fp32 = -log softmax(logits)[target]. If dlogits is given it receives
// grad_scale · (softmax(logits) - onehot(target)); it may alias logits (overwritten in place).
void softmax_cross_entropy(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                           float grad_scale);

// Vocabulary-parallel softmax cross-entropy (tensor parallelism; Megatron's
// vocab_parallel_cross_entropy with its three all-reduces folded into one all-gather of per-row
// statistics): logits [N, Vr] hold ids [shard.begin, shard.begin + Vr) of shard.vocab, and no rank
// ever holds all of a row.
//   1. cross_entropy_shard_stats: stats fp32 [3, N] = the shard's max m, Σ exp(logit − m) over the
//      shard, and the target's logit where the target lies in the shard (else 0);
//   2. the caller all-gathers every rank's stats, in rank order, into all_stats fp32 [tp, 3, N];
//   3. cross_entropy_from_stats: M = max_r m_r, S = Σ_r s_r·exp(m_r − M) (rank order), losses[n] =
//      M + log S − logit[target] on every rank alike; dlogits (may alias logits) = grad_scale ·
//      (softmax − onehot(target)) over the shard's columns.
// A target < 0 is ignored (loss 0, zero gradient row); a target ≥ shard.vocab is rejected (CPU) or
// gives a NaN loss (CUDA), as softmax_cross_entropy.
void cross_entropy_shard_stats(Tensor& stats, const Tensor& logits, const Tensor& targets, VocabShard shard);
void cross_entropy_from_stats(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                              VocabShard shard, const Tensor& all_stats, float grad_scale);

// ---------- optimizer ----------
struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled, applied as p -= lr·wd·p (PyTorch AdamW)
  int64_t step = 1;           // 1-based, for bias correction
  float grad_scale = 1.0f;    // multiplies the gradient first (gradient clipping)
};
// One AdamW update of fp32 master weights with moments m, v (same shape; both fp32, or both bf16 as
// optimizer.state_dtype bf16 keeps them: read into fp32, updated in fp32, the new weights computed
// from the fp32 moments, each moment rounded to nearest even once as it is stored).
// grad may be fp32 or bf16. If `working` is given (e.g. the bf16 copy the model computes with)
// it receives the updated weights.
void adamw_update(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                  Tensor* working = nullptr);

// ---------- FP8 casts (runtime/fp8_format.h) ----------
// How an FP8 cast is scaled. Each group of x gets r = fp8_largest / max(amax, 1e-12) (fp32, amax the
// group's largest |x|), q = fp8(x·r) (round to nearest even, saturating), and the dequantisation
// scale s = 1/r (fp32) that the GEMM multiplies back in: x ≈ q·s.
//   Tensorwise: the whole tensor is one group (torchao's dynamic tensorwise recipe); scale [1].
//   Rows1x128:  each run of 128 columns of a row (DeepSeek-V3's activations and gradients);
//               scale [⌈K/128⌉, M].
//   Blocks128:  each 128×128 tile (DeepSeek-V3's weights); scale [⌈M/128⌉, ⌈K/128⌉].
// These are the layouts Hopper's block-scaled GEMMs read (cuBLASLt VEC128_32F: the rows contiguous,
// confirmed by the GPU test against the CPU twin; BLK128x128_32F: the column blocks contiguous, what
// that test's failure with the transposed layout points to, not yet rerun on a GPU).
enum class Fp8Scaling { Tensorwise, Rows1x128, Blocks128 };
constexpr int64_t kFp8Block = 128;
// q[M, K] (F8E4M3 or F8E5M2: q's dtype is the format) and scale (fp32, shape as above) from x[M, K]
// (fp32 or bf16; more dimensions are [rows, last]). q_t [K, M] and scale_t (optional, q's format):
// what fp8_quantize of xᵀ with the same scaling writes — the K-major copy of the other GEMM that
// reads x (a weight gradient reads xᵀ, an input gradient wᵀ). Tensorwise: the same codes transposed,
// scale_t (may be null) = scale. Blocks128: the same blocks, codes transposed, scale_t the block
// scales transposed. Rows1x128: runs of 128 rows of a column, scale_t [⌈M/128⌉, K] (DeepSeek-V3's
// 128×1 tiles of the backward). scale_t is required for Rows1x128 and Blocks128 when q_t is given.
// amax (optional, Tensorwise only): U32 [1], the bits of the amax to scale by instead of measuring
// x's own: what x's producer measured while writing it (ops' amax outputs: x is then read once), or,
// for x one part of a larger tensor (a tensor-parallel slice or shard), the max over the parts'
// fp8_amax, so that every part casts with the whole's scale.
void fp8_quantize(Tensor& q, Tensor& scale, const Tensor& x, Fp8Scaling scaling, Tensor* q_t = nullptr,
                  Tensor* scale_t = nullptr, const Tensor* amax = nullptr);
// amax U32 [1] = the bits of the largest |x| (fp32; 0 for an empty x), compared as unsigned bits as
// the Tensorwise cast compares them (a NaN wins): a max over several tensors' amaxes (e.g. an
// all-reduce with ReduceOp::Max) is the amax of their union.
void fp8_amax(Tensor& amax, const Tensor& x);
// y[M, K] (fp32 or bf16) = q·s with the scales fp8_quantize wrote (the GEMMs' view of q).
void fp8_dequantize(Tensor& y, const Tensor& q, const Tensor& scale, Fp8Scaling scaling);
// y[M, N] (+)= (a·sa)[M, K] · (b·sb)[N, K]ᵀ, FP8 operands and scales as fp8_quantize wrote them (each
// with its own scaling), both K-major: the layout Hopper's FP8 tensor cores read, so the forward
// (x, w), input gradient (dy, wᵀ) and weight gradient (dyᵀ, xᵀ) each pass their operands in it.
// fp32 accumulation. y fp32 or bf16 on CUDA; the CPU computes in fp32 on the operands dequantised as
// fp8_dequantize does (the emulation the recipes' CPU runs use). CUDA (cuBLASLt): M, N and K
// multiples of 16; not both operands E5M2; not both Blocks128. fast_accum (Tensorwise operands only):
// Hopper's fast accumulation, partial sums kept in the tensor cores' own accumulator for the whole
// K loop instead of promoted to fp32 every few steps — faster, less exact (torchao's Float8Linear
// takes it for the forward GEMM); the CPU computes in fp32 either way.
//
// The epilogue (Fp8Epilogue) finishes y from the product P = (a·sa)·(b·sb)ᵀ as the working dtype's
// linear_forward / linear_backward_input_gelu do, each part optional:
//   bias      [N], fp32 or bf16: added to every row;
//   residual  [M, N] of y's dtype: y = P + residual + bias, the residual connection read where it
//             lies (cuBLASLt's C distinct from D) instead of copied into y first; may be y itself;
//   gelu_pre  [M, N] of y's dtype, not y: receives z = P + bias, and y = gelu(z) (gelu_forward);
//   dgelu_pre [M, N] of y's dtype, not y (no bias): y = P ⊙ gelu'(dgelu_pre) (gelu_backward's), the
//             gradient reaching the pre-activation of the GELU whose output was the input;
//   amax      U32 [1]: the largest |y| as stored (ops' amax outputs), for the cast of y that follows.
// At most one of residual, gelu_pre and dgelu_pre; all but amax need accumulate false. CPU: the
// unfused sequence — the GEMM, then add_bias, gelu_forward or gelu_backward, fp8_amax — so a fused
// call equals it bit for bit. CUDA: cuBLASLt's epilogues (BIAS, GELU_AUX(_BIAS); DGELU only with
// TETRA_FP8_FUSE asking for it, runtime/cuda/fp8_gemm_cuda.cpp; a bf16 bias with an fp32 y, as
// cuBLASLt's FP8 GEMMs take it) where it has an algorithm, else that sequence.
struct Fp8Epilogue {
  const Tensor* bias = nullptr;
  const Tensor* residual = nullptr;
  Tensor* gelu_pre = nullptr;
  const Tensor* dgelu_pre = nullptr;
  Tensor* amax = nullptr;
  // Whether it changes what y holds (everything but amax).
  bool transforms() const { return bias || residual || gelu_pre || dgelu_pre; }
};
void fp8_gemm(Tensor& y, const Tensor& a, const Tensor& a_scale, Fp8Scaling a_scaling, const Tensor& b,
              const Tensor& b_scale, Fp8Scaling b_scaling, bool accumulate = false, bool fast_accum = false,
              const Fp8Epilogue& epilogue = {});

// How one operand of an FP8 GEMM is cast: its scaling and its format (F8E4M3 or F8E5M2).
struct Fp8Cast {
  Fp8Scaling scaling = Fp8Scaling::Tensorwise;
  DType format = DType::F8E4M3;
};
// The grouped expert GEMMs (moe_grouped_linear_*: offsets, shapes and rows as there) with both operands
// cast to FP8 first, each expert on its own: expert g's rows [offsets[g], offsets[g + 1]) and its weight
// w[g] are cast as fp8_quantize casts a tensor of their own, so
//   forward          y[rows of g]  = fp8_gemm(cast(x[rows of g]), cast(w[g]))
//   backward input   dx[rows of g] = fp8_gemm(cast(dy[rows of g]), cast(w[g])ᵀ)    (the transposed copy)
//   backward weight  dw[g] (+)= fp8_gemm(cast(dy[rows of g])ᵀ, cast(x[rows of g])ᵀ)
// Tensorwise: one scale per expert's rows and one per expert's weight. Rows1x128: 1×128 tiles of each
// row; the transposed copies of the weight gradient take runs of 128 rows that start at the expert's
// first row, the last run holding what is left (fewer than 128 rows where the expert's count is not a
// multiple of 128): no run spans two experts. Blocks128: 128×128 blocks of each w[g], the last ones
// ragged where O or I is not a multiple of 128. An expert without rows gives no rows and a zero weight
// gradient (kept when accumulating). CPU: fp32, the casts and the emulated GEMM of fp8_quantize and
// fp8_gemm, expert by expert (the twin). CUDA: Tensorwise only (the others are an Internal error); x,
// dy and w fp32 or bf16, outputs fp32 or bf16; the same codes and scales as the CPU, read from the
// device offsets without a host synchronisation (runtime/cuda/moe_grouped_fp8.cu).
//
// Cast once (Tensorwise): a tensor that two of these GEMMs read — x (the forward and the weight
// gradient), dy (the input and the weight gradients), w (the forward and the input gradient) — can be
// cast ahead with moe_grouped_fp8_cast and handed to both as its Fp8GroupedCodes (x_codes, w_codes,
// dy_codes; null: cast here). The op then reads the codes in the layout its kernel takes instead of
// casting that operand; the result is the same bit for bit (the codes are the casts it would make).
// The codes must be of the operand and its cast (format, shape); a layout they lack (undefined q or
// q_t) is cast from the operand here. x or dy may be undefined where its codes hold the layout the
// GEMM reads (the forward and the input gradient: q; the weight gradient: q_t, for one of its two):
// its shape is then [R, I] or [R, O], R the other row tensor's rows and I, O w's or dw's
// (moe_permute_fp8_cast's codes of rows never written).
struct Fp8GroupedCodes;
void moe_grouped_fp8_forward(Tensor& y, const Tensor& x, Fp8Cast x_cast, const Tensor& w, Fp8Cast w_cast,
                             const Tensor& offsets, const Fp8GroupedCodes* x_codes = nullptr,
                             const Fp8GroupedCodes* w_codes = nullptr);
void moe_grouped_fp8_backward_input(Tensor& dx, const Tensor& dy, Fp8Cast dy_cast, const Tensor& w, Fp8Cast w_cast,
                                    const Tensor& offsets, const Fp8GroupedCodes* dy_codes = nullptr,
                                    const Fp8GroupedCodes* w_codes = nullptr);
void moe_grouped_fp8_backward_weight(Tensor& dw, const Tensor& dy, Fp8Cast dy_cast, const Tensor& x, Fp8Cast x_cast,
                                     const Tensor& offsets, bool accumulate, const Fp8GroupedCodes* dy_codes = nullptr,
                                     const Fp8GroupedCodes* x_codes = nullptr);
// One operand of the grouped FP8 GEMMs cast per expert, Tensorwise (one scale per expert), in both
// layouts the GEMMs read:
//   a row tensor x [R, cols] (offsets given): q = the codes [R, cols]; q_t = the transposed codes
//     [cols, Rp], expert g's rows at columns [po[g], po[g + 1]) with zero codes after its last row
//     (po = padded_offsets, int32 [G + 1]: po[g + 1] = po[g] + round_up(rows of g, 128);
//     Rp = moe_grouped_fp8_padded_rows(R, G); columns past po[G] are not written);
//   the weights w [G, O, I] (no offsets): q = the codes [G, O, I]; q_t = w[g]ᵀ's codes [G, I, O].
// scale: fp32 [G], expert g's dequantisation scale (as fp8_quantize writes a Tensorwise scale of g's
// rows or of w[g]; 1/r of an expert without rows). A holder may drop q or q_t once no GEMM needs it.
// Blocks128 (blockwise weights only, O a multiple of 128: no block spans two experts, so the stack's
// blocks are each expert's own): the stack [G·O, I] cast whole by fp8_quantize with its transposed
// copy, q = the codes [G, O, I] with scale = fp32 fp8_scale_shape(Blocks128, G·O, I), q_t = the
// stack's transposed codes [I, G·O] (w[g]ᵀ at columns g·O) with scale_t = fp8_scale_shape(Blocks128,
// I, G·O) — the layouts the tensor-core kernel's blockwise forward and input gradient read.
// Rows1x128 (blockwise row tensors, offsets given, cols a multiple of 128): the two casts that a row
// tensor's blockwise GEMMs read, q = each expert's rows' codes [R, cols] in 1×128 groups with scale =
// fp32 fp8_scale_shape(Rows1x128, R, cols), as fp8_quantize of the whole x writes them (rows outside
// every expert are not written), and q_t = the 128×1 runs down each expert's rows [cols, Rp], placed
// as above, with scale_t = fp8_scale_shape(Rows1x128, cols, Rp) (run b of the padded rows at row b of
// it): expert g's part is what fp8_quantize of its rows [m, cols] writes as q_t and scale_t.
struct Fp8GroupedCodes {
  Tensor q, q_t, scale, padded_offsets;
  DType format = DType::F8E4M3;
  Tensor scale_t;  // blockwise: q_t's scales (Tensorwise: scale serves both layouts)
  bool defined() const { return scale.defined(); }
};
// The columns of a row tensor's transposed codes: R rounded up to 128, plus 128 per expert (every
// expert's padding fits whatever the counts; the tensor-core kernel's padded weight-gradient operands).
int64_t moe_grouped_fp8_padded_rows(int64_t R, int64_t G);
// out = x cast per expert as above (cast.scaling Tensorwise; Blocks128 for weights whose O is a
// multiple of 128: one fp8_quantize of the stack on either backend; Rows1x128 for row tensors whose
// cols are a multiple of 128; x fp32 or bf16). offsets: the row tensor's, int32 [G + 1] on x's device;
// null for the weights [G, O, I]. CPU: each expert's fp8_quantize with its transposed copy, placed;
// CUDA, Tensorwise: one segmented amax pass and one pass writing both layouts
// (runtime/cuda/moe_grouped_fp8_cast.h); Rows1x128: one pass of bf16 x writing both
// (runtime/cuda/moe_grouped_fp8_blockwise.cu); from the device offsets (no host sync).
// row_amax (optional, row tensors only; U32 [R] on x's device): each row's amax as the op that wrote
// x measured it (swiglu_forward's row_amax): each expert's amax is then the largest over its rows,
// and x is read once, by the codes' pass. expert_amax (optional, weights only; U32 [G]): each
// expert's amax as the writer of the weights measured it (the optimizer's update: AdamWSegment::amax),
// taken as it is, and the weights are read once.
void moe_grouped_fp8_cast(Fp8GroupedCodes& out, const Tensor& x, Fp8Cast cast, const Tensor* offsets,
                          const Tensor* row_amax = nullptr, const Tensor* expert_amax = nullptr);
// moe_permute and moe_grouped_fp8_cast of its rows in one pass over x (Tensorwise): rows[r, :] =
// x[slot_of[r] / top_k, :] as moe_permute writes them (rows [R, C] of x's dtype, x [N, C], slot_of
// int32 [R]; rows outside every expert are not written), and out = moe_grouped_fp8_cast(out, rows,
// cast, &offsets) of them, bit for bit. Each expert's amax is the largest over the tokens routed to
// it, from x's rows' amaxes ([N] words): x is read once for its amaxes and once, through slot_of,
// for the rows and both code layouts, where the two ops write the rows and read them back. CPU: the
// two ops. CUDA: one pass where C is a multiple of 8 and x and rows are 16-byte aligned and of one
// dtype (else the two ops). rows may be undefined: the codes alone (the rows only where the op must
// fall back to the two ops, as a temporary).
// weights (optional, fp32 [N, top_k]): each gathered row scaled by its slot's weight, rows[r, :] =
// weights[slot_of[r]] · x[slot_of[r] / top_k, :] rounded to x's dtype — the d_rows that
// moe_unpermute_backward writes from dy = x — and the codes those rows' cast makes, bit for bit. Each
// expert's amax then comes from the tokens' amaxes times |weight|, rounded as the rows are: the same
// value, as rounding and multiplying by a fixed |w| keep the order of magnitudes.
// token_amax (optional, U32 [N]): x's rows' amaxes as the op that wrote x measured them
// (rmsnorm_forward's row_amax, rmsnorm_backward's dx_row_amax), taken as they are: x is then read
// once, by the pass that writes the codes.
void moe_permute_fp8_cast(Tensor& rows, Fp8GroupedCodes& out, const Tensor& x, const Tensor& slot_of, int64_t top_k,
                          const Tensor& offsets, Fp8Cast cast, const Tensor* weights = nullptr,
                          const Tensor* token_amax = nullptr);
// The cast of a weight w[rows, cols] that no rank holds whole (ZeRO-3's FP8 gather,
// parallel/zero/fp8_gather.h): each rank casts its flat slice of w with the scales of all of w.
// x: the slice (fp32 or bf16), w's elements [begin, begin + x.numel()) in row-major order.
// amax: I32, shaped as w's scale (fp8_scale_shape), each group's largest |x| as the bits of an fp32
// — the order fp8_quantize compares in, kept by an integer max over the ranks.
// fp8_slice_amax raises amax to x's groups (zero it first; entries of no group stay as they are).
void fp8_slice_amax(Tensor& amax, const Tensor& x, int64_t begin, int64_t rows, int64_t cols, Fp8Scaling scaling);
// With amax all of w's: q [x.numel()] (q's dtype the format) = the codes fp8_quantize of w writes at
// x's elements, and scale = the scale it writes, bit for bit. x may be empty (scale only).
void fp8_slice_quantize(Tensor& q, Tensor& scale, const Tensor& x, const Tensor& amax, int64_t begin, int64_t rows,
                        int64_t cols, Fp8Scaling scaling);
// q_t [K, M] and scale_t from q [M, K] and the scale fp8_quantize wrote with it: the transposed copy
// fp8_quantize writes alongside, bit for bit (Tensorwise: the codes transposed, scale_t = scale;
// Blocks128: the codes and the block scales transposed). Rows1x128 is refused: its transposed copy
// has groups of its own.
void fp8_transpose(Tensor& q_t, Tensor& scale_t, const Tensor& q, const Tensor& scale, Fp8Scaling scaling);

// ---------- reductions ----------
// acc[1] (fp32 or fp64) += Σ x² (x fp32 or bf16). acc lives on x's device.
void sum_squares(Tensor& acc, const Tensor& x);
// acc[1] fp64 += Σ x (x fp32, bf16 or fp64), on x's device without synchronising the host.
void sum_accumulate(Tensor& acc, const Tensor& x);
// Σ x over all elements, returned on the host (synchronises).
double sum_to_host(const Tensor& x);

// ---------- partial sums (tensor parallelism) ----------
// out[M, C] = Σ_{s<S} parts[s] + b[C] + residual[M, C] for parts [S, M, C]: the partial products a
// reduce-scatter brings to one rank, summed in fp32 in the order s = 0 … S−1, then b, then the
// residual, rounded once to out's dtype (CPU and CUDA add in that order, so they agree bit for bit).
// parts, out and residual share one dtype; b (fp32 or bf16) and residual may be undefined / null.
// out may be the residual itself (in place) but may not overlap parts.
void sum_partials(Tensor& out, const Tensor& parts, const Tensor& b, const Tensor* residual = nullptr);

// ---------- step control ----------
// The end-of-step decisions on the device (runtime/step_control.h): control fp64 [kStepControlSlots]
// is updated from loss_sum fp64 [1], grad_sq fp64 [1] and lr_table fp64 [steps], all on one device.
void step_control(Tensor& control, const Tensor& loss_sum, const Tensor& grad_sq, const Tensor& lr_table,
                  const StepControlConfig& cfg);

// ---------- the op table ----------
// The type of each op the backends implement (runtime/op_list.h), taken from its declaration above:
// the backends declare their kernels with it and the op table holds pointers of it
// (runtime/op_table.h), so every signature is written once, here. Before the overloads below, so
// that each name still means one function.
namespace op_type {
#define TETRA_OP_TYPE(name) using name = decltype(::tetra::ops::name);
TETRA_OPS(TETRA_OP_TYPE)
#undef TETRA_OP_TYPE
}  // namespace op_type

// Plain multi-head attention (n_kv_heads = n_heads).
inline void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads) {
  attention_forward(out, lse, qkv, n_heads, n_heads);
}
inline void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                               const Tensor& lse, int64_t n_heads) {
  attention_backward(dqkv, dout, qkv, out, lse, n_heads, n_heads);
}

}  // namespace tetra::ops
