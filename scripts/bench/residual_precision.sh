#!/usr/bin/env bash
# train.residual_dtype against PyTorch on one GPU (docs/models.md "Residual stream precision"): a
# small model trained on real text from the same initial weights and the same batches by
#   tetra      train.residual_dtype bf16 and fp32 (bf16 precision), and fp32 precision (the check
#              that weights, batches and optimizer agree with the reference's fp32 run)
#   PyTorch    bf16 autocast (fp32 residual stream), autocast with the stream rounded to bf16,
#              and fp32 (scripts/bench/torch_residual_ref.py)
# then one JSON line per run: the loss after the same steps, its gap to PyTorch autocast, and the
# wall time to a common target loss (scripts/bench/residual_compare.py); the summary line names the
# tetra setting that reaches it soonest.
#   scripts/bench/residual_precision.sh [gpt2|llama] [STEPS]
# gpt2: 6 layers, d 384, 6 heads (issue 15 item 6); llama: the same with 2 KV heads, SwiGLU 1024,
# untied output layer. Byte-level text (vocabulary 256), batch 32 × 256, AdamW lr 1e-3 (20 warmup
# steps, cosine to 1e-4), weight decay 0.1, clipping at 1.0, shuffled windows (seed 1234).
# The text: /usr/share/common-licenses (every file but LGPL-3, as scripts/prepare_tiny_data.sh);
# TEXT=python takes this Python's standard library where the licences are missing.
# Environment: TETRA (default build/tetra), PYTHON (with torch + CUDA), BENCH_DIR (runs/bench),
# TETRA_ARGS (extra --set overrides of every tetra run).
set -euo pipefail
cd "$(dirname "$0")/../.."
arch=${1:-gpt2}
steps=${2:-400}
TETRA=${TETRA:-build/tetra}
PY=${PYTHON:-python3}
[ -x "$TETRA" ] || scripts/build.sh
out=${BENCH_DIR:-runs/bench}/residual-$arch
mkdir -p "$out"
case "$arch" in
  gpt2) ref_model=(--arch gpt2 --layers 6 --dim 384 --heads 6)
        yaml_model="{arch: gpt2, vocab_size: 256, seq_len: 256, d_model: 384, n_layers: 6, n_heads: 6, init_from: $out/init}" ;;
  llama) ref_model=(--arch llama --layers 6 --dim 384 --heads 6 --kv-heads 2 --ffn 1024)
         yaml_model="{arch: llama, vocab_size: 256, seq_len: 256, d_model: 384, n_layers: 6, n_heads: 6, n_kv_heads: 2, ffn_dim: 1024, init_from: $out/init}" ;;
  *) echo "unknown model $arch (gpt2 or llama)" >&2; exit 2 ;;
esac
train_args=(--vocab 256 --seq 256 --batch 32 --steps "$steps" --lr 1e-3 --min-lr 1e-4 --warmup 20 --wd 0.1
            --betas 0.9 0.95 --clip 1.0 --seed 1234 --data-seed 1234 --shuffle 1)

"$PY" scripts/bench/torch_residual_ref.py data --out "$out" --text "${TEXT:-licences}" >&2
"$PY" scripts/bench/torch_residual_ref.py init --out "$out/init" "${ref_model[@]}" "${train_args[@]}" >&2
cat > "$out/config.yaml" <<EOF
run: {name: residual, output_dir: $out/runs, seed: 1234}
model: $yaml_model
train: {steps: $steps, global_batch: 32, micro_batch: 32, grad_clip: 1.0, device: cuda}
optimizer: {lr: 1.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1, warmup_steps: 20, schedule: cosine, min_lr: 1.0e-4}
data: {train: $out/train.bin, shuffle: true}
checkpoint: {every: 0, resume: none}
log: {every: 50}
EOF

tetra_runs=()
run_tetra() {  # NAME PRECISION RESIDUAL_DTYPE
  "$TETRA" train "$out/config.yaml" --set run.name="$1" --set train.precision="$2" --set train.residual_dtype="$3" \
    ${TETRA_ARGS:-} > "$out/$1.log" 2>&1 || { tail -30 "$out/$1.log" >&2; echo "{\"run\": \"$1\", \"error\": true}"; return 0; }
  tetra_runs+=(--tetra "$1=$out/runs/$1")
}
run_tetra tetra-bf16-residual bf16 bf16
run_tetra tetra-fp32-residual bf16 fp32
run_tetra tetra-fp32 fp32 fp32
"$PY" scripts/bench/torch_residual_ref.py train --init "$out/init" --data "$out/train.bin" "${ref_model[@]}" \
  "${train_args[@]}" --modes autocast,bf16_residual,fp32 > "$out/torch.jsonl"
"$PY" scripts/bench/residual_compare.py "${tetra_runs[@]}" --torch "$out/torch.jsonl" --baseline torch-autocast
