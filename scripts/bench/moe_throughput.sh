#!/usr/bin/env bash
# Mixture-of-experts throughput on one GPU, beside the PyTorch peer, in one go: configs/moe-2b.yaml
# (12 layers of d 1536, 12 heads, the first with a dense SwiGLU of 4096, the other 11 with 64 routed
# experts of width 512, top 6, and 2 shared experts; vocabulary 32000; 1.94B parameters, 0.44B
# active), 8 × 2048 tokens per step, bf16, on random tokens; the shape of the MoE peer line in the benchmark notes.
# Each run prints one JSON line with the fields of scripts/bench/gpt_throughput.sh plus
# max_load_over_mean (the busiest expert's load over the mean in the last step, the largest over the
# MoE layers, as the peer reports it):
#   routed      the router's own choice (with the auxiliary-loss-free bias update)
#   balanced    model.moe.force_balance: token t to experts (t·k + j) mod E, the peer's --force-balance
#   OVERLAP=1 adds two runs of 2 micro-batches of 4 × 2048 each, parallel.moe_overlap off and on
#   (the two-micro-batch interleave; at pp 1 on one GPU it must not cost more than 2%).
#   scripts/bench/moe_throughput.sh [STEPS]                  (default: 30 steps)
#   PEER=path/to/torch_llama.py   also runs the PyTorch peer with the same shape, both routings, in
#   the modes of PEER_MODES (default "compile"; "eager compile" for both).
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-30}
source scripts/bench/throughput_lib.sh
config=configs/moe-2b.yaml
mb=8
seq=2048
vocab=32000
peer_args="--layers 12 --dim 1536 --heads 12 --kv-heads 12 --ffn 4096 --vocab $vocab --batch $mb --seq $seq
           --experts 64 --topk 6 --shared 2 --moe-ffn 512 --dense-layers 1"
data="$out/random_tokens_32k.h5"
bench_random_tokens "$data" "$vocab"

run() {  # NAME MICRO_BATCH [--set KEY=VALUE ...]
  local name="tetra-moe-2b-$1${BENCH_TAG:+-$BENCH_TAG}" micro=$2
  shift 2
  bench_tetra "$name" "$config" 1 "$mb" "$micro" "$data" "$steps" "$@"
}

run routed "$mb"
run balanced "$mb" --set model.moe.force_balance=true
if [ "${OVERLAP:-0}" = 1 ]; then
  run mb4-overlap-off $((mb / 2)) --set parallel.moe_overlap=false
  run mb4-overlap-on $((mb / 2)) --set parallel.moe_overlap=true
fi
if [ -n "${PEER:-}" ]; then
  for mode in ${PEER_MODES:-compile}; do
    bench_peer "peer-moe-$mode" python3 "$PEER" --mode "$mode" --steps "$steps" $peer_args
    bench_peer "peer-moe-$mode-balanced" python3 "$PEER" --mode "$mode" --steps "$steps" $peer_args --force-balance
  done
fi
