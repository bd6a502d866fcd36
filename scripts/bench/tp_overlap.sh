#!/usr/bin/env bash
# Tensor-parallel communication overlap on GPUs: every primitive of parallel/tensor/linear.h at the
# Llama-1B / GPT-2 1.3B layer shapes (N = 16384 tokens, C = 2048, F = 8192), plain vs overlapped,
# one JSON line each (build/scripts/bench/tetra_tp_overlap_bench; see its header for the fields).
#   scripts/bench/tp_overlap.sh [TP ...]       (default: 2; one GPU per rank)
#   extra arguments for the program: BENCH_ARGS="--reps 50 --busbw 270"
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes=("${@:-2}")
[ $# -eq 0 ] && sizes=(2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
bench=build/scripts/bench/tetra_tp_overlap_bench
[ -x "$bench" ] || scripts/build.sh
for tp in "${sizes[@]}"; do
  # shellcheck disable=SC2086
  mpirun --oversubscribe --bind-to none -np "$tp" "$bench" ${BENCH_ARGS:-}
done
