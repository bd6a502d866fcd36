#!/usr/bin/env bash
# The opt-in step settings on one GPU, each beside the default, in one go (docs/kernels.md NOTES
# v13): for every pair of TETRA_WGRAD_STREAMS (a block's weight-gradient GEMMs over 1, 2 or 4
# streams) and TETRA_NORM_BACKWARD_STAGES (the norm backward's row kernel with 2 or 1 staging
# buffers), one run of scripts/bench/gpt_throughput.sh or llama_throughput.sh, tagged wWAYSsSTAGES;
# then, with PEER, the PyTorch peer of the same shape (torch.compile). One JSON line per run (the
# throughput scripts'); exits 1 when a run failed (its line says "error"), 2 on bad arguments.
#   scripts/bench/step_levers.sh [124m|1.3b|llama] [STEPS]
#   WAYS="1 4" STAGES=2 scripts/bench/step_levers.sh 124m 30      # a subset
#   PEER=path/to/torch_gpt.py scripts/bench/step_levers.sh 124m   # and the peer beside them
# The runs follow one another on the same GPU, so their figures compare with each other only.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-124m}
steps=${2:-30}
bad() { echo "step_levers: $*" >&2; exit 2; }
case "$model" in
  124m | 1.3b) bench=(scripts/bench/gpt_throughput.sh "$model" "$steps" 1) ;;
  llama) bench=(scripts/bench/llama_throughput.sh "$steps" 1) ;;
  *) bad "unknown model '$model' (124m, 1.3b or llama)" ;;
esac
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || bad "STEPS must be a positive number, got '$steps'"
for w in ${WAYS:-1 2 4}; do [[ "$w" =~ ^[1-4]$ ]] || bad "WAYS: '$w' is not 1 to 4 streams"; done
for s in ${STAGES:-2 1}; do [[ "$s" =~ ^[12]$ ]] || bad "STAGES: '$s' is not 1 or 2"; done
[ -z "${PEER:-}" ] || [ -f "$PEER" ] || bad "PEER '$PEER' is not a file"

failed=0
for stages in ${STAGES:-2 1}; do
  for ways in ${WAYS:-1 2 4}; do
    line=$(TETRA_WGRAD_STREAMS=$ways TETRA_NORM_BACKWARD_STAGES=$stages BENCH_TAG="w${ways}s${stages}" PEER= \
           "${bench[@]}" | tail -1)
    echo "$line"
    [[ "$line" != *'"error": true'* ]] || failed=1
  done
done
if [ -n "${PEER:-}" ]; then
  case "$model" in
    124m) peer_args=(--layers 12 --dim 768 --heads 12 --batch 16 --seq 1024) ;;
    1.3b) peer_args=(--layers 24 --dim 2048 --heads 16 --batch 8 --seq 2048) ;;
    llama) peer_args=(--steps "$steps" --layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256
                      --batch 4 --seq 4096 --rope-theta 500000) ;;
  esac
  python3 "$PEER" --mode compile "${peer_args[@]}" | tail -1
fi
exit "$failed"
