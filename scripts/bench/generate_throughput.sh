#!/usr/bin/env bash
# Generation speed beside transformers (docs/models.md "Generation"): a Llama of configs/llama-1b.yaml's
# shape (16 layers, d 2048, 32 query / 8 key-value heads, SwiGLU 8192, vocabulary 128256, rope_theta
# 500000, untied) with random weights, saved by transformers' save_pretrained (no download); then on
# one GPU in bf16, batch 1, greedy, a PROMPT-token prompt and NEW new tokens (eos never stops it):
#   tetra          `tetra generate FOLDER --prompt-ids ... --device cuda --json` (its own timing:
#                  generation only, the weights already loaded)
#   transformers   generate(do_sample=False) in the same call (scripts/bench/generate_throughput_peer.py),
#                  after one warm-up generate; timed with CUDA synchronisation
# One JSON line each: {"impl", "new_tokens", "seconds", "tokens_per_s", ...}, then a summary line with
# the ratio and whether the two greedy continuations agree token for token (bf16 on both sides: a
# near-tie may flip). Lines to stdout and, with --json FILE (or $OUT/generate_throughput.json when $OUT
# is a directory), as one JSON object to FILE.
#   scripts/bench/generate_throughput.sh [--json FILE] [PROMPT [NEW]]      (defaults 128 and 256)
# Environment: TETRA (default build/tetra; built here with CUDA when missing), PYTHON (python3 with
# torch + CUDA + transformers), BENCH_DIR (runs/bench).
set -euo pipefail
cd "$(dirname "$0")/../.."
json=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --json) [ $# -ge 2 ] || { echo "--json needs a FILE" >&2; exit 2; }; json=$2; shift 2 ;;
    --json=*) json=${1#--json=}; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
prompt=${args[0]:-128}
new=${args[1]:-256}
for v in "$prompt" "$new"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "PROMPT and NEW must be positive integers, got '$v'" >&2; exit 2; }
done
if [ -z "$json" ] && [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then json=$OUT/generate_throughput.json; fi
TETRA=${TETRA:-build/tetra}
PY=${PYTHON:-python3}
bench=${BENCH_DIR:-runs/bench}/generate
mkdir -p "$bench"
if [ ! -x "$TETRA" ]; then  # only the binary
  [ -f build/CMakeCache.txt ] || cmake -S . -B build $(command -v ninja >/dev/null && echo -G Ninja) \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}" -DTETRA_CUDA=ON \
    -DTETRA_PYTHON="$(command -v "$PY")" >&2
  cmake --build build --target tetra -j "$(nproc)" >&2
  TETRA=build/tetra
fi
"$PY" scripts/bench/generate_throughput_peer.py --tetra "$TETRA" --work "$bench" --prompt "$prompt" --new "$new" \
  ${json:+--json "$json"}
