#!/usr/bin/env bash
# Installs with apt-get whatever sdrt's build and tests need and is missing. Idempotent;
# prints nothing when everything is already there. The CUDA toolkit and NCCL are not
# Debian packages: they are used from /usr/local/cuda when present (CUDA builds are AUTO).
# clang and libclang-rt-14-dev (libFuzzer and the sanitizer runtimes of Debian's default
# clang, 14 in bookworm) build the fuzz targets (scripts/fuzz.sh); iproute2 makes the test
# hosts of the `hosts` test (scripts/hosts.sh).
set -euo pipefail

packages=(
  cmake g++ make pkg-config git ca-certificates python3 python3-pip
  mpich libmpich-dev
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev python3-numpy
  nlohmann-json3-dev libdlpack-dev libxxhash-dev libcli11-dev libre2-dev
  xxhash
  clang libclang-rt-14-dev
  iproute2
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
