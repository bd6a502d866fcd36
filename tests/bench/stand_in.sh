# What the benchmark-script tests share; sourced after `set -euo pipefail` with the work directory
# as $1. Sets src (TETRA_SOURCE_DIR), py (the tests' Python, linked as python3 first on PATH: the
# scripts call python3), work (emptied), BENCH_DIR (work/bench) and TETRA (work/bin/fake-tetra,
# written by stand_in_tetra); fail MESSAGE exits 1.
src=${TETRA_SOURCE_DIR:?}
py=${TETRA_PYTHON:-python3}
work=$1
rm -rf "$work" && mkdir -p "$work/bin" "$work/bench"
fail() { echo "FAIL: $*" >&2; exit 1; }
ln -s "$py" "$work/bin/python3"
export PATH="$work/bin:$PATH" BENCH_DIR="$work/bench" TETRA="$work/bin/fake-tetra"

# stand_in_tetra < SNIPPET: writes $TETRA, a `tetra train` that reads its --set KEY=VALUE arguments
# into the array `set`, runs SNIPPET (bash; it sets ms, the step time, or exits), and writes the run
# directory the benchmark scripts read: train.steps steps of ms each, 16,384 tokens a step.
stand_in_tetra() {
  {
    cat <<'SH'
#!/usr/bin/env bash
declare -A set
while [ $# -gt 0 ]; do
  [ "$1" = --set ] && { set[${2%%=*}]=${2#*=}; shift; }
  shift
done
SH
    cat
    cat <<'SH'
run="${set[run.output_dir]}/${set[run.name]}"
mkdir -p "$run"
: > "$run/metrics.jsonl"
for ((s = 1; s <= ${set[train.steps]}; s++)); do
  echo "{\"step\": $s, \"loss\": 5.0, \"step_ms\": $ms}" >> "$run/metrics.jsonl"
done
echo '{"event": "run_info", "tokens_per_step": 16384, "flops_per_token": 1e10, "device_kind": "Fake GPU"}' > "$run/goodput.jsonl"
SH
  } > "$TETRA"
  chmod +x "$TETRA"
}
