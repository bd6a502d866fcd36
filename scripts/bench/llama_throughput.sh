#!/usr/bin/env bash
# Llama throughput on GPUs, beside the PyTorch peer, in one go: configs/llama-1b.yaml (the shape of
# Llama 3.2 1B with an untied output layer: 16 layers, d 2048, 32 heads / 8 KV heads, SwiGLU 8192,
# vocabulary 128256, rope_theta 500000), 4 × 4096 tokens per GPU and step, bf16, on random tokens.
# Prints one JSON line per run with the fields of scripts/bench/gpt_throughput.sh: tokens/s over
# all GPUs, ms/step (median after warm-up), MFU of 989 TFLOP/s with FLOPs per token as torchtitan
# counts them (6·(N − embedding) + 12·L·d·T, the peer's count), exposed communication, peak memory.
#   scripts/bench/llama_throughput.sh [STEPS] [GPUS...]        (default: 30 steps on 1 GPU)
#   PEER=path/to/torch_llama.py   also runs the PyTorch peer with the same shape, in the modes of
#   PEER_MODES (default "compile"; "eager compile" for both).
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-30}
shift || true
gpus=("${@:-1}")
[ $# -eq 0 ] && gpus=(1)
source scripts/bench/throughput_lib.sh
config=configs/llama-1b.yaml
mb=4
seq=4096
vocab=128256
peer_args="--layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab $vocab --batch $mb --seq $seq --rope-theta 500000"
data="$out/random_tokens_llama3.h5"
bench_random_tokens "$data" "$vocab"
for n in "${gpus[@]}"; do
  bench_tetra "tetra-llama-1b-${n}gpu${BENCH_TAG:+-$BENCH_TAG}" "$config" "$n" $((mb * n)) "$mb" "$data" "$steps"
done
if [ -n "${PEER:-}" ]; then
  for mode in ${PEER_MODES:-compile}; do
    for n in "${gpus[@]}"; do
      if [ "$n" -eq 1 ]; then
        bench_peer "peer-llama-$mode-1" python3 "$PEER" --mode "$mode" --steps "$steps" $peer_args
      else
        bench_peer "peer-llama-$mode-$n" torchrun --standalone --nproc_per_node "$n" "$PEER" --mode "$mode" --steps "$steps" $peer_args
      fi
    done
  done
fi
