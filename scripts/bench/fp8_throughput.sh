#!/usr/bin/env bash
# FP8 training throughput on one GPU, in one call: tetra bf16, tetra FP8 for each recipe
# (train.fp8.recipe), the PyTorch peer with torch.compile in bf16 and with float8 linears
# (--fp8 tensorwise: torch._scaled_mm, dynamic tensorwise scaling, as torchao's Float8Linear).
# Prints one JSON line per run (the fields of scripts/bench/gpt_throughput.sh; MFU on the same model
# FLOPs for every run) and a summary line: each FP8 run over its bf16 run, tetra over the peer.
# Exit 0 when every run gave its line, 1 when one failed (its error line and the log tail shown,
# the others still run), 2 for bad arguments.
#   scripts/bench/fp8_throughput.sh SHAPE [STEPS]            (default: 30 steps)
# Shapes (each the shape of its bf16 throughput script):
#   llama1b    configs/llama-1b.yaml, 4 × 4096 tokens     (scripts/bench/llama_throughput.sh)
#   gpt2-1.3b  configs/gpt2-1.3b.yaml, 8 × 2048 tokens    (scripts/bench/gpt_throughput.sh 1.3b)
#   moe2b      configs/moe-2b.yaml, 8 × 2048 tokens, the router's own routing (moe_throughput.sh)
# Knobs (environment): RECIPES (default "tensorwise"; "tensorwise blockwise" for both), PEER (the peer
# program; default scripts/bench/torch_llama.py, torch_gpt.py for gpt2-1.3b; PEER=none runs no peer),
# PEER_RUNS (default "bf16 fp8": the peer's runs, torch.compile without and with float8 linears), TETRA,
# TETRA_ARGS, BENCH_DIR, BENCH_TAG as in the other throughput scripts.
set -euo pipefail
[ -z "${PEER:-}" ] || [ "$PEER" = none ] || [ ! -f "$PEER" ] || PEER=$(realpath "$PEER")  # as the caller gave it
cd "$(dirname "$0")/../.."
usage="usage: scripts/bench/fp8_throughput.sh llama1b|gpt2-1.3b|moe2b [STEPS]"
shape=${1:-}
steps=${2:-30}
case "$steps" in '' | *[!0-9]*) echo "fp8_throughput.sh: STEPS must be a positive integer, got '$steps'" >&2; exit 2 ;; esac
[ "$steps" -gt 0 ] || { echo "fp8_throughput.sh: STEPS must be a positive integer, got '$steps'" >&2; exit 2; }
case "$shape" in
  llama1b) config=configs/llama-1b.yaml; mb=4; vocab=128256; data=random_tokens_llama3.h5; peer=scripts/bench/torch_llama.py
           peer_args="--layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab $vocab --batch $mb --seq 4096 --rope-theta 500000" ;;
  gpt2-1.3b) config=configs/gpt2-1.3b.yaml; mb=8; vocab=50257; data=random_tokens.h5; peer=scripts/bench/torch_gpt.py
             peer_args="--layers 24 --dim 2048 --heads 16 --batch 8 --seq 2048" ;;
  moe2b) config=configs/moe-2b.yaml; mb=8; vocab=32000; data=random_tokens_32k.h5; peer=scripts/bench/torch_llama.py
         peer_args="--layers 12 --dim 1536 --heads 12 --kv-heads 12 --ffn 4096 --vocab $vocab --batch $mb --seq 2048
                    --experts 64 --topk 6 --shared 2 --moe-ffn 512 --dense-layers 1" ;;
  *) echo "fp8_throughput.sh: unknown shape '$shape'; $usage" >&2; exit 2 ;;
esac
recipes=${RECIPES-tensorwise}
for r in $recipes; do
  case "$r" in tensorwise | blockwise) ;; *) echo "fp8_throughput.sh: RECIPES: '$r' is not an FP8 recipe (tensorwise, blockwise)" >&2; exit 2 ;; esac
done
PEER=${PEER:-$peer}
peer_runs=${PEER_RUNS-bf16 fp8}
for r in $peer_runs; do
  case "$r" in bf16 | fp8) ;; *) echo "fp8_throughput.sh: PEER_RUNS: '$r' is not bf16 or fp8" >&2; exit 2 ;; esac
done
[ "$PEER" = none ] || [ -f "$PEER" ] || { echo "fp8_throughput.sh: PEER=$PEER: no such file (PEER=none runs no peer)" >&2; exit 2; }
source scripts/bench/throughput_lib.sh
data="$out/$data"  # the file of the bf16 script of the shape
bench_random_tokens "$data" "$vocab"
tag=${BENCH_TAG:+-$BENCH_TAG}
runs=()  # ROLE JSON pairs for the summary

record() {  # ROLE JSON: prints the run's line and keeps it
  echo "$2"
  runs+=("$1" "$2")
}
record tetra-bf16 "$(bench_tetra "tetra-$shape-bf16$tag" "$config" 1 "$mb" "$mb" "$data" "$steps")"
for r in $recipes; do
  record "tetra-fp8-$r" "$(bench_tetra "tetra-$shape-fp8-$r$tag" "$config" 1 "$mb" "$mb" "$data" "$steps" --set train.fp8.recipe="$r")"
done
if [ "$PEER" != none ]; then
  case " $peer_runs " in *" bf16 "*)
    record peer-bf16 "$(bench_peer "peer-$shape-compile$tag" python3 "$PEER" --mode compile --steps "$steps" $peer_args)" ;;
  esac
  case " $peer_runs " in *" fp8 "*)
    record peer-fp8-tensorwise "$(bench_peer "peer-$shape-compile-fp8$tag" python3 "$PEER" --mode compile --fp8 tensorwise --steps "$steps" $peer_args)" ;;
  esac
fi
python3 scripts/bench/fp8_throughput_summary.py "$shape" "${runs[@]}"
