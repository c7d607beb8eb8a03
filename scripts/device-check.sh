#!/usr/bin/env bash
# The whole GPU check, in one call on a lent GPU machine (which has nvcc and cmake but no
# MPICH and no Debian -dev packages): build with CUDA and without MPI against the
# dependencies carried in .devdeps/ (scripts/device-bundle.sh), run the GPU tests, run
# them again under compute-sanitizer, run the GPU benchmarks against cudaMemcpy, and
# print a short table last. Logs and JSON go to $OUT when the device tool sets it.
#   here:   scripts/device-bundle.sh
#   there:  device run, carry [".devdeps"], command "scripts/device-check.sh"
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/sdrt-device-out}
build=/tmp/sdrt-gpu
mkdir -p "$out"
deps=$root/.devdeps/usr
arch=x86_64-linux-gnu
export CMAKE_PREFIX_PATH=$deps:${CMAKE_PREFIX_PATH:-}
export LD_LIBRARY_PATH=$deps/lib/$arch:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSDRT_WITH_MPI=OFF \
  -DSDRT_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
(cd "$build" && ctest -L gpu --output-on-failure) >"$out/ctest-gpu.log" 2>&1
gpu_rc=$?
san_rc=0
for t in "$build"/tests/*gpu_test; do
  compute-sanitizer --tool memcheck --error-exitcode 9 "$t" >>"$out/sanitizer.log" 2>&1 || san_rc=$?
done
"$build/bench/kernels_bench" --benchmark_filter='Device' --benchmark_min_time=0.5 \
  --benchmark_out="$out/kernels_bench.json" --benchmark_out_format=json >"$out/bench.log" 2>&1
echo "== GPU tests: $(grep -E 'tests passed' "$out/ctest-gpu.log") (rc=$gpu_rc)"
echo "== compute-sanitizer memcheck: rc=$san_rc; $(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitizer.log") clean binaries"
python3 - "$out/kernels_bench.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
base = next((r for r in runs if r["name"].startswith("BM_DeviceMemcpy")), None)
print(f"{'benchmark':40s} {'time us':>10s} {'GB/s':>8s} {'vs memcpy':>10s}")
for r in runs:
    gbs = r.get("bytes_per_second", 0) / 1e9
    ratio = gbs / (base["bytes_per_second"] / 1e9) if base else float("nan")
    print(f"{r['name']:40s} {r['real_time']:10.1f} {gbs:8.1f} {ratio:10.2f}")
PY
