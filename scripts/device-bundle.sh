#!/usr/bin/env bash
# Copies the Debian build dependencies that a lent GPU machine lacks (Abseil, GoogleTest,
# Google Benchmark, nlohmann-json, dlpack, CLI11, xxhash: headers, libraries and CMake
# package files, about 10 MB) into .devdeps/, which git ignores through
# .git/info/exclude. Run here before calling the device tool with carry [".devdeps"].
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/.devdeps/usr
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
grep -qx '/.devdeps/' "$root/.git/info/exclude" 2>/dev/null || echo '/.devdeps/' >>"$root/.git/info/exclude"
rm -rf "$root/.devdeps"
mkdir -p "$out/include" "$out/lib/$arch/cmake" "$out/share/cmake"
for h in absl gtest gmock benchmark nlohmann dlpack CLI xxhash.h; do cp -a "/usr/include/$h" "$out/include/"; done
cp -a /usr/lib/$arch/libabsl_*.so* /usr/lib/$arch/libgtest*.a /usr/lib/$arch/libgmock*.a \
      /usr/lib/$arch/libbenchmark*.so* /usr/lib/$arch/libxxhash.so* "$out/lib/$arch/"
for c in absl GTest benchmark dlpack; do cp -a "/usr/lib/$arch/cmake/$c" "$out/lib/$arch/cmake/"; done
for c in CLI11 nlohmann_json; do cp -a "/usr/share/cmake/$c" "$out/share/cmake/"; done
du -sh "$root/.devdeps"
