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
source scripts/bench/throughput_lib.sh
case "$model" in
  124m) config=configs/gpt2-124m.yaml; mb=16; peer_args="--layers 12 --dim 768 --heads 12 --batch 16 --seq 1024" ;;
  1.3b) config=configs/gpt2-1.3b.yaml; mb=8; peer_args="--layers 24 --dim 2048 --heads 16 --batch 8 --seq 2048" ;;
  *) echo "unknown model $model (124m or 1.3b)" >&2; exit 2 ;;
esac
data="$out/random_tokens.h5"
bench_random_tokens "$data" 50257
for n in "${gpus[@]}"; do
  bench_tetra "tetra-$model-${n}gpu${BENCH_TAG:+-$BENCH_TAG}" "$config" "$n" $((mb * n)) "$mb" "$data" "$steps"
done
if [ -n "${PEER:-}" ]; then
  for n in "${gpus[@]}"; do
    if [ "$n" -eq 1 ]; then
      bench_peer "peer-$model-1" python3 "$PEER" --mode compile $peer_args
    else
      bench_peer "peer-$model-$n" torchrun --standalone --nproc_per_node "$n" "$PEER" --mode compile $peer_args
    fi
  done
fi
