#!/usr/bin/env bash
# Installs with apt-get whatever sdrt's build and tests need and is missing. Idempotent;
# prints nothing when everything is already there. The CUDA toolkit and NCCL are not
# Debian packages: they are used from /usr/local/cuda when present (CUDA builds are AUTO).
# clang and libclang-rt-14-dev (libFuzzer and the sanitizer runtimes of Debian's default
# clang, 14 in bookworm) build the fuzz targets (scripts/fuzz.sh); iproute2 makes the test
# hosts of the `hosts` test (scripts/hosts.sh).
#
# A second MPICH, 5.0.2 from PyPI's `mpich` wheel, goes into a virtualenv at
# /opt/sdrt-mpich5 (SDRT_MPICH5 to move it): the same ABI as Debian's (libmpi.so.12, so
# sdrt's binaries run on it unchanged), with the ofi netmod. The tests between test hosts
# and between two jobs run on it, because Debian 12's MPICH 4.0.2 (ch4:ucx, UCX 1.13.1)
# hangs in MPI_Finalize over TCP in about half of the runs and has no dynamic processes
# (docs/HOSTS.md says what fails and how).
set -euo pipefail

packages=(
  cmake g++ make pkg-config git ca-certificates python3 python3-pip
  mpich libmpich-dev
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev python3-numpy
  nlohmann-json3-dev libdlpack-dev libxxhash-dev libcli11-dev libre2-dev
  xxhash
  clang libclang-rt-14-dev
  iproute2 python3-venv
)
mpich5=${SDRT_MPICH5:-/opt/sdrt-mpich5}
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

# The second MPICH (above), once: its library also under the name sdrt links
# (libmpich.so.12), so that LD_LIBRARY_PATH=$mpich5/lib puts it in place of Debian's.
install_mpich5() {
  [ -x "$mpich5/bin/mpiexec" ] && [ -e "$mpich5/lib/libmpich.so.12" ] && return 0
  echo "install-deps: installing MPICH 5.0.2 (PyPI) into $mpich5" >&2
  $sudo python3 -m venv "$mpich5"
  $sudo "$mpich5/bin/pip" install -q --disable-pip-version-check mpich==5.0.2
  $sudo ln -sf libmpi.so.12 "$mpich5/lib/libmpich.so.12"
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  install_mpich5
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_mpich5
