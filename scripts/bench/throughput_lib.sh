# What the throughput scripts (scripts/bench/*_throughput.sh) share; sourced from the repository root
# after `set -euo pipefail`. Sets OUT (BENCH_DIR, default runs/bench) and TETRA (default build/tetra,
# built by scripts/build.sh where missing); Open MPI as root, NVLink multicast off.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
TETRA=${TETRA:-build/tetra}
[ -x "$TETRA" ] || scripts/build.sh
out=${BENCH_DIR:-runs/bench}
mkdir -p "$out"

# bench_random_tokens FILE VOCAB: 20M uniformly random token ids (the peers' data), made once.
bench_random_tokens() {
  [ -f "$1" ] || python3 scripts/bench/make_random_tokens.py "$1" 20000000 "$2" >&2
}

# bench_tetra NAME CONFIG RANKS GLOBAL_BATCH MICRO_BATCH DATA STEPS [TETRA TRAIN ARGS...]
# One `tetra train` under mpirun on DATA without evaluation or checkpoints (warm-up a third of the
# steps, then TETRA_ARGS), its output in $out/NAME.log. Prints scripts/bench/summarize_run.py's JSON
# line, or {"impl": NAME, "error": true} with the log's tail on stderr.
bench_tetra() {
  local name=$1 config=$2 ranks=$3 global=$4 micro=$5 data=$6 steps=$7
  shift 7
  mpirun --oversubscribe --bind-to none -np "$ranks" "$TETRA" train "$config" \
    --set run.output_dir="$out" --set run.name="$name" --set train.steps="$steps" \
    --set train.global_batch="$global" --set train.micro_batch="$micro" --set data.train="$data" \
    --set data.val="" --set train.eval_every=0 --set checkpoint.every=0 --set checkpoint.resume=none \
    --set optimizer.warmup_steps=$((steps / 3)) --set log.every=10 "$@" ${TETRA_ARGS:-} > "$out/$name.log" 2>&1 ||
    { tail -30 "$out/$name.log" >&2; echo "{\"impl\": \"$name\", \"error\": true}"; return 0; }
  python3 scripts/bench/summarize_run.py "$out/$name" "$name" "$ranks" ||
    echo "{\"impl\": \"$name\", \"error\": true}"
}

# bench_peer NAME COMMAND...: a PyTorch peer; prints its last stdout line (its JSON line), stderr in
# $out/NAME.err; where it fails, that file's tail on stderr and {"impl": NAME, "error": true}.
bench_peer() {
  local name=$1 line rc=0
  shift
  line=$("$@" 2>"$out/$name.err" | tail -1) || rc=$?
  if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
    tail -30 "$out/$name.err" >&2
    echo "{\"impl\": \"$name\", \"error\": true}"
  else
    echo "$line"
  fi
}
