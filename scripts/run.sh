#!/usr/bin/env bash
# Installs what is missing for building and training (scripts/setup.sh, no test packages), builds the
# executable (a new build folder without the tests and benchmarks), prepares the default dataset and
# runs an experiment
# (default configs/tiny.yaml: 2 ranks under mpirun on the CPU), ending with the goodput report and
# the path of the run's report page (RUN_DIR/report.html).
#   scripts/run.sh [CONFIG] [--set key=value ...]
#   NP=4 scripts/run.sh configs/tiny.yaml --set parallel.dp=4
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/tiny.yaml}
shift || true
scripts/setup.sh
if [ -f "${BUILD_DIR:-build}/CMakeCache.txt" ]; then
  scripts/build.sh
else
  scripts/build.sh -DTETRA_TESTS=OFF -DTETRA_BENCH=OFF
fi
tetra=${BUILD_DIR:-build}/tetra
[ -f data/tiny/train.h5 ] && [ -f data/tiny/val.h5 ] || TETRA=$tetra scripts/prepare_tiny_data.sh
np=${NP:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# The run's output also goes to a log, to find the report page rank 0 wrote (run.html_report);
# tee ignores Ctrl-C, so the output of a run that stops on it (its report, its page) is kept.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
mpirun --oversubscribe --bind-to none -np "$np" "$tetra" train "$config" "$@" | tee -i "$log"
rc=${PIPESTATUS[0]}
set -e
page=$(sed -n 's/^tetra: wrote \(.*report\.html\)$/\1/p' "$log" | tail -n 1)
if [ -n "$page" ]; then
  echo "run.sh: the run as a page: $page (open it in a browser)"
fi
exit "$rc"
