#!/usr/bin/env bash
# Copies the Debian build dependencies that a lent GPU machine lacks (Abseil, GoogleTest,
# Google Benchmark, nlohmann-json, dlpack, CLI11, xxhash, RE2: headers, libraries and CMake
# package files, about 10 MiB) into .devdeps/usr/ (git-ignored), then proves the bundle is
# complete: a probe CMake project, with the machine's own /usr and / ignored, finds every
# package in the bundle, and every file and include folder that each package's imported
# targets name exists there (Debian's benchmark config, for one, stops configure with a
# fatal error when libbenchmark_main.a is missing). The device tool carries ignored paths
# only when named: device run, carry [".devdeps"] (64 MiB for the tree and carry together).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.devdeps
out=$dest/usr
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
rm -rf "$dest"
mkdir -p "$out/include" "$out/lib/$arch/cmake" "$out/share/cmake"
for h in absl gtest gmock benchmark nlohmann dlpack CLI xxhash.h re2; do cp -a "/usr/include/$h" "$out/include/"; done
cp -a /usr/lib/"$arch"/libabsl_*.so* /usr/lib/"$arch"/libgtest*.a /usr/lib/"$arch"/libgmock*.a \
      /usr/lib/"$arch"/libbenchmark*.so* /usr/lib/"$arch"/libbenchmark*.a \
      /usr/lib/"$arch"/libxxhash.so* /usr/lib/"$arch"/libre2.so* "$out/lib/$arch/"
for c in absl GTest benchmark dlpack; do cp -a "/usr/lib/$arch/cmake/$c" "$out/lib/$arch/cmake/"; done
for c in CLI11 nlohmann_json; do cp -a "/usr/share/cmake/$c" "$out/share/cmake/"; done

# The probe: find_package for each config (a missing imported file is a fatal error there),
# then every imported target's locations, include folders and absolute link paths must lie
# in the bundle and exist.
probe=$(mktemp -d "${TMPDIR:-/tmp}/sdrt-bundle-probe.XXXXXX")
trap 'rm -rf "$probe"' EXIT
cat >"$probe/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(sdrt_bundle_probe LANGUAGES CXX)
set(bundle "${BUNDLE}")
foreach(pkg absl GTest benchmark dlpack CLI11 nlohmann_json)
  find_package(${pkg} REQUIRED)
  cmake_path(IS_PREFIX bundle "${${pkg}_DIR}" inside)
  if(NOT inside)
    message(FATAL_ERROR "${pkg} was found at ${${pkg}_DIR}, outside the bundle ${bundle}")
  endif()
endforeach()
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY xxhash REQUIRED)
find_path(RE2_INCLUDE_DIR re2/re2.h REQUIRED)
find_library(RE2_LIBRARY re2 REQUIRED)
set(paths "${XXHASH_INCLUDE_DIR}" "${XXHASH_LIBRARY}" "${RE2_INCLUDE_DIR}" "${RE2_LIBRARY}")
get_directory_property(targets IMPORTED_TARGETS)
set(checked 0)
foreach(target IN LISTS targets)
  get_target_property(configs ${target} IMPORTED_CONFIGURATIONS)
  foreach(property INTERFACE_INCLUDE_DIRECTORIES INTERFACE_LINK_LIBRARIES IMPORTED_LOCATION)
    get_target_property(values ${target} ${property})
    if(values)
      list(APPEND paths ${values})
    endif()
  endforeach()
  foreach(config IN LISTS configs)
    get_target_property(location ${target} IMPORTED_LOCATION_${config})
    if(location)
      list(APPEND paths "${location}")
    endif()
  endforeach()
  math(EXPR checked "${checked} + 1")
endforeach()
foreach(path IN LISTS paths)
  if(IS_ABSOLUTE "${path}")
    cmake_path(IS_PREFIX bundle "${path}" inside)
    if(NOT inside OR NOT EXISTS "${path}")
      message(FATAL_ERROR "an imported target names ${path}: not a file of the bundle")
    endif()
  endif()
endforeach()
list(LENGTH paths count)
message(STATUS "bundle probe: ${checked} imported targets, ${count} paths, all in ${bundle}")
CMAKE
cmake -S "$probe" -B "$probe/build" -DBUNDLE="$out" -DCMAKE_PREFIX_PATH="$out" \
  "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/" >"$probe/log" 2>&1 || { cat "$probe/log" >&2; exit 1; }
grep 'bundle probe:' "$probe/log"
size_kib=$(du -sk "$dest" | cut -f1)
echo "device-bundle: $dest, $((size_kib / 1024)) MiB (the device tool carries 64 MiB in all)"
if [ "$size_kib" -gt $((48 * 1024)) ]; then
  echo "device-bundle: over 48 MiB; too little room is left for the working tree" >&2
  exit 1
fi
