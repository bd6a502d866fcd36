#!/usr/bin/env bash
# The whole test suite: installs what is missing (scripts/setup.sh --test: the build's packages and the
# tests'), builds with the tests, runs every ctest test.
# GPU tests (label gpu) skip cleanly on machines without a GPU.
#   scripts/test.sh               # everything
#   scripts/test.sh -L unit       # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
# A build folder that scripts/run.sh configured without tests gets them here.
scripts/build.sh -DTETRA_TESTS=ON
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s)
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${CTEST_JOBS:-$(nproc)}" "$@"
echo "test.sh: suite took $(( $(date +%s) - start )) s"
