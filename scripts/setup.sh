#!/usr/bin/env bash
# Installs what tetra needs to build and test on Debian 12 / Ubuntu 24.04 (as root or with sudo).
# Only missing packages are installed; a machine that has them all is left untouched.
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libopenmpi-dev openmpi-bin libhdf5-dev libyaml-cpp-dev
          libgtest-dev libopenblas-dev nlohmann-json3-dev libcli11-dev python3 python3-numpy python3-h5py
          python3-torch)
# The SLURM test (tests/launch/job) starts a one-node cluster from these; TETRA_SETUP_SLURM=0 leaves them
# out (the test then skips).
if [ "${TETRA_SETUP_SLURM:-1}" != 0 ]; then
  packages+=(munge slurmctld slurmd slurm-client)
fi
# The report page's rendering test (tests/launch/report/browser_render.py) takes a screenshot in headless
# Chromium; TETRA_SETUP_CHROMIUM=0 leaves it out (the test then skips).
if [ "${TETRA_SETUP_CHROMIUM:-1}" != 0 ]; then
  packages+=(chromium)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
