#!/usr/bin/env bash
# GPT throughput on GPUs, beside the PyTorch peer, in one go. Prints one JSON line per run:
# tokens/s over all GPUs, ms/step (median after warm-up), MFU of 989 TFLOP/s, exposed
# communication, peak memory.
#   scripts/bench/gpt_throughput.sh [124m|1.3b] [STEPS] [GPUS...]
#   PEER=path/to/torch_gpt.py  also runs the PyTorch peer (torch.compile) with the same shapes.
# Shapes: 124m = GPT-2 124M, 16×1024 tokens per GPU; 1.3b = 24 layers, d 2048, 8×2048 per GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-124m}
steps=${2:-30}
shift 2 || true
gpus=("${@:-1 2}")
[ $# -eq 0 ] && gpus=(1 2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
TETRA=${TETRA:-build/tetra}
[ -x "$TETRA" ] || scripts/build.sh
out=${BENCH_DIR:-runs/bench}
mkdir -p "$out"
case "$model" in
  124m) config=configs/gpt2-124m.yaml; mb=16; seq=1024; peer_args="--layers 12 --dim 768 --heads 12 --batch 16 --seq 1024" ;;
  1.3b) config=configs/gpt2-1.3b.yaml; mb=8; seq=2048; peer_args="--layers 24 --dim 2048 --heads 16 --batch 8 --seq 2048" ;;
  *) echo "unknown model $model (124m or 1.3b)" >&2; exit 2 ;;
esac
data="$out/random_tokens.h5"
[ -f "$data" ] || python3 scripts/bench/make_random_tokens.py "$data" 20000000 50257 >&2
for n in "${gpus[@]}"; do
  name="tetra-$model-${n}gpu${BENCH_TAG:+-$BENCH_TAG}"
  mpirun --oversubscribe --bind-to none -np "$n" "$TETRA" train "$config" \
    --set run.output_dir="$out" --set run.name="$name" --set train.steps="$steps" \
    --set train.global_batch=$((mb * n)) --set train.micro_batch="$mb" --set data.train="$data" \
    --set data.val="" --set train.eval_every=0 --set checkpoint.every=0 --set checkpoint.resume=none \
    --set optimizer.warmup_steps=$((steps / 3)) --set log.every=10 ${TETRA_ARGS:-} > "$out/$name.log" 2>&1 || { tail -30 "$out/$name.log" >&2; echo "{\"impl\": \"$name\", \"error\": true}"; continue; }
  python3 scripts/bench/summarize_run.py "$out/$name" "$name" "$n"
done
if [ -n "${PEER:-}" ]; then
  for n in "${gpus[@]}"; do
    if [ "$n" -eq 1 ]; then
      python3 "$PEER" --mode compile $peer_args 2>"$out/peer-$model-1.err" | tail -1
    else
      torchrun --standalone --nproc_per_node "$n" "$PEER" --mode compile $peer_args 2>"$out/peer-$model-$n.err" | tail -1
    fi
  done
fi
