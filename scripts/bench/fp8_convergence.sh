#!/usr/bin/env bash
# FP8 convergence against bf16 on real text: tetra trains a Llama-shaped model (configs/llama-1b.yaml's
# width, heads and SwiGLU with fewer layers) for bf16 and each FP8 recipe (train.fp8.recipe), several
# seeds each (run.seed: the initialisation and the data order), and compares the mean training loss of
# the last LAST steps (scripts/bench/fp8_convergence_summary.py): each recipe's mean over seeds
# against bf16's mean, within bf16's own seed spread (max − min of its per-seed means), and no
# non-finite loss.
#   scripts/bench/fp8_convergence.sh TOKENIZER [DIR]
# TOKENIZER: what `tetra data prepare --tokenizer` takes (Llama 3's tokenizer.json; `byte` for tests).
# DIR (default runs/bench/fp8_convergence under the repository) receives text/ (TEXT_MB of the Python sources, /usr/include
# and /usr/share/doc, scripts/bench/gather_text.py), tokens.h5, runs/RECIPE-seedSEED (each run's
# directory and log), runs.jsonl (one throughput line per run), summary.json (what is printed) and
# loss_curves.svg (the smoothed curves of every run). Text and tokens are reused while TOKENIZER and
# TEXT_MB stay the same; each run directory is made anew.
# Knobs (environment), defaults for one H200:
#   STEPS 1000, LAST 200, LAYERS 4, BATCH 4, SEQ 1024 (4 × 1024 tokens per step), SEEDS "1 2 3",
#   RECIPES "bf16 tensorwise" (bf16 sets no train.fp8 key; bf16-state is bf16 with
#   optimizer.state_dtype bf16, AdamW's moments in bf16, measured the same way), WARMUP STEPS/10, TEXT_MB 64,
#   CONFIG configs/llama-1b.yaml, TETRA build/tetra (both from the repository root), TETRA_ARGS (more
#   --set arguments for every run).
# At the defaults a step is 12.9 TFLOP of model FLOPs (6 · 506M non-embedding parameters with the
# output layer · 4096 tokens, plus attention): at 40–55% of 989 TFLOP/s that is 24–33 ms, so a run of
# 1000 steps takes about 25–35 s after its start-up, the nine runs about 5–7 minutes.
# Exit 0 when every run completed (the verdict is in the JSON: "converged"), 1 when a run failed or
# stopped short, 2 for bad arguments.
set -euo pipefail
die() { echo "fp8_convergence.sh: $*" >&2; exit 2; }
tokenizer=${1:-}
[ -n "$tokenizer" ] || die "usage: scripts/bench/fp8_convergence.sh TOKENIZER [DIR]"
[ "$tokenizer" = byte ] || [ -e "$tokenizer" ] || die "$tokenizer: no such tokenizer file or folder"
[ "$tokenizer" = byte ] || tokenizer=$(realpath "$tokenizer")  # paths as the caller gave them, from here on absolute
dir=$(realpath -m "${2:-runs/bench/fp8_convergence}")
[ -n "${2:-}" ] || dir=  # the default lives under the repository
cd "$(dirname "$0")/../.."
dir=${dir:-$PWD/runs/bench/fp8_convergence}
steps=${STEPS:-1000} last=${LAST:-200} layers=${LAYERS:-4} batch=${BATCH:-4} seq=${SEQ:-1024}
seeds=${SEEDS-1 2 3} recipes=${RECIPES-bf16 tensorwise} text_mb=${TEXT_MB:-64}
config=${CONFIG:-configs/llama-1b.yaml}
for knob in STEPS=$steps LAST=$last LAYERS=$layers BATCH=$batch SEQ=$seq; do
  case "${knob#*=}" in '' | *[!0-9]* | 0*) die "${knob%%=*} must be a positive integer, got '${knob#*=}'" ;; esac
done
warmup=${WARMUP:-$((steps / 10))}
case "$warmup" in '' | *[!0-9]*) die "WARMUP must be a non-negative integer, got '$warmup'" ;; esac
[ "$last" -le "$steps" ] || die "LAST ($last) exceeds STEPS ($steps)"
[ -n "$seeds" ] || die "SEEDS is empty"
for s in $seeds; do case "$s" in *[!0-9]*) die "SEEDS: '$s' is not a non-negative integer" ;; esac; done
[ -n "$recipes" ] || die "RECIPES is empty"
for r in $recipes; do
  case "$r" in bf16 | bf16-state | tensorwise | blockwise) ;; *) die "RECIPES: '$r' is not bf16, bf16-state, tensorwise or blockwise" ;; esac
done
[ -f "$config" ] || die "CONFIG=$config: no such file"
py=${PYTHON:-python3}
mkdir -p "$dir"
export BENCH_DIR="$dir/runs"
source scripts/bench/throughput_lib.sh

# The tokens: real text through the real tokenizer, once per (tokenizer, amount of text).
"$py" scripts/bench/gather_text.py "$dir/text" "$text_mb"
stamp="tokenizer=$tokenizer text_mb=$text_mb"
data="$dir/tokens.h5"
if [ ! -f "$data" ] || [ "$(cat "$dir/tokens.stamp" 2>/dev/null)" != "$stamp" ]; then
  eos=()
  # Without a tokenizer_config.json beside it a tokenizer.json names no end-of-document token; the
  # 4 MB documents here need none.
  folder=$tokenizer
  [ -d "$folder" ] || folder=$(dirname "$tokenizer")
  if [[ "$tokenizer" == *.json || -f "$tokenizer/tokenizer.json" ]] && [ ! -f "$folder/tokenizer_config.json" ]; then
    eos=(--eos none)
  fi
  rm -f "$dir/tokens.stamp"
  "$TETRA" data prepare --input "$dir/text/doc*.txt" --tokenizer "$tokenizer" --out "$data" "${eos[@]}" >&2 ||
    { echo "fp8_convergence.sh: tetra data prepare failed" >&2; exit 1; }
  echo "$stamp" > "$dir/tokens.stamp"
fi

: > "$dir/runs.jsonl"
for recipe in $recipes; do
  case "$recipe" in  # what the run sets beyond bf16's
    bf16) fp8=() ;;
    bf16-state) fp8=(--set optimizer.state_dtype=bf16) ;;
    *) fp8=(--set train.fp8.recipe="$recipe") ;;
  esac
  for seed in $seeds; do
    name="$recipe-seed$seed"
    rm -rf "${out:?}/$name"
    bench_tetra "$name" "$config" 1 "$batch" "$batch" "$data" "$steps" --set model.n_layers="$layers" \
      --set model.seq_len="$seq" --set run.seed="$seed" --set optimizer.warmup_steps="$warmup" \
      --set parallel.zero_stage=0 --set log.every=100 "${fp8[@]}" | tee -a "$dir/runs.jsonl" >&2
  done
done

rc=0
"$py" scripts/bench/fp8_convergence_summary.py "$out" --recipes "$recipes" --seeds "$seeds" --steps "$steps" \
  --last "$last" --svg "$dir/loss_curves.svg" > "$dir/summary.json" || rc=$?
cat "$dir/summary.json"
exit "$rc"
