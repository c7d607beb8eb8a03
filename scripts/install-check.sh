#!/usr/bin/env bash
# scripts/install-check.sh BUILD_DIR: checks that BUILD_DIR installs as a C++ library is used.
# Installs it into a temporary prefix, then builds tests/install/consumer.cc (a program using
# only sdrt/sdrt.h: it writes and reads back a safetensors file and prints sdrt::Version())
# twice, with -Wall -Wextra -Werror: by CMake (find_package(sdrt CONFIG REQUIRED), sdrt::sdrt)
# and by plain g++ with `pkg-config --cflags --libs sdrt` (--static for a static libsdrt.a),
# and runs both; then the examples (examples/engine, C; examples/trainer and
# examples/weight_sync, C++) the same way, run under mpiexec when the build has MPI. When the
# build is shared, libsdrt.so must carry its SONAME and its dynamic symbol table must hold
# the public API alone: sdrt:: C++ symbols outside any internal namespace and the C API's
# sdrt_* functions; anything else (absl::, std::, nlohmann, re2, XXH_*, sdrt::internal::) is
# printed and fails the check. Removes only the temporary folder
# it made. Exit 0 when all of it holds.
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sdrt-install-check.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT
prefix=$tmp/prefix
echo "== install check: $build -> $prefix" >&2

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
for f in include/sdrt/sdrt.h include/sdrt/export.h include/sdrt/version.h bin/sdrt \
         lib/cmake/sdrt/sdrtConfig.cmake lib/cmake/sdrt/sdrtConfigVersion.cmake \
         lib/cmake/sdrt/sdrtTargets.cmake lib/pkgconfig/sdrt.pc; do
  [[ -e $prefix/$f ]] || { echo "install-check: $f was not installed" >&2; exit 1; }
done
for dir in tests tools bench; do
  if [[ -e $prefix/include/sdrt/$dir ]]; then
    echo "install-check: include/sdrt/$dir was installed" >&2
    exit 1
  fi
done
"$prefix/bin/sdrt" --version > /dev/null

shared=0
if [[ -e $prefix/lib/libsdrt.so ]]; then
  shared=1
elif [[ ! -e $prefix/lib/libsdrt.a ]]; then
  echo "install-check: neither lib/libsdrt.a nor lib/libsdrt.so was installed" >&2
  exit 1
fi

# 1. The CMake package.
cmake -S "$root/tests/install" -B "$tmp/cmake-build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/configure.log" || { cat "$tmp/configure.log" >&2; exit 1; }
cmake --build "$tmp/cmake-build" > "$tmp/build.log" || { cat "$tmp/build.log" >&2; exit 1; }
mkdir "$tmp/out-cmake"
"$tmp/cmake-build/consumer" "$tmp/out-cmake"

# 2. pkg-config and a plain compiler.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
static_flag=--static
[[ $shared == 1 ]] && static_flag=
# shellcheck disable=SC2046,SC2086  # the flags are words
g++ -Wall -Wextra -Werror -o "$tmp/consumer-pc" "$root/tests/install/consumer.cc" \
  $(pkg-config --cflags sdrt) $(pkg-config $static_flag --libs sdrt)
mkdir "$tmp/out-pc"
LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$tmp/consumer-pc" "$tmp/out-pc"

# 3. The C API's header alone, as C11 and as C++17, pedantic.
for lang in "gcc -x c -std=c11" "g++ -x c++ -std=c++17"; do
  # shellcheck disable=SC2086
  echo '#include "sdrt/c_api.h"' | $lang -pedantic -Wall -Wextra -Werror -fsyntax-only \
    $(pkg-config --cflags sdrt) - || { echo "install-check: sdrt/c_api.h: $lang failed" >&2; exit 1; }
done

# 4. The examples (the trainer and the weight sync only when the build has MPI), each configured
# out of tree against the prefix, built with -Wall -Wextra -Werror, and run under mpiexec when the
# build has MPI: the C engine loads a synthetic tiny-llama (made by the installed `sdrt make`)
# tensor-parallel on 2 and 3 ranks (3: uneven slices) and checks its slices, and the same model as
# a Hugging Face folder (with a config.json made from `sdrt make --json`) on 2 ranks into vLLM's
# fused qkv_proj / gate_up_proj buffers through the built-in weight map; the C++ trainer syncs its
# Megatron-named weights into vLLM-style bf16 and FP8 buffers and exports on 3 (the engine then
# loads its sharded export on 3 ranks); the weight sync runs 2 steps on 4 ranks (2 trainer, 2
# engine). The engine (engine.c and fused.c) is also built by pkg-config and the C compiler alone
# (-std=c11 -pedantic).
mpi=$(sed -n 's/^#define SDRT_BUILT_WITH_MPI \([01]\)$/\1/p' "$prefix/include/sdrt/version.h")
examples=(engine)
[[ $mpi == 1 ]] && examples+=(trainer weight_sync)  # both gather or reshard: they need MPI
for example in "${examples[@]}"; do
  cmake -S "$root/examples/$example" -B "$tmp/$example" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" "-DCMAKE_C_FLAGS=-Werror" "-DCMAKE_CXX_FLAGS=-Werror" --no-warn-unused-cli \
    > "$tmp/$example.configure.log" || { cat "$tmp/$example.configure.log" >&2; exit 1; }
  cmake --build "$tmp/$example" > "$tmp/$example.build.log" ||
    { cat "$tmp/$example.build.log" >&2; exit 1; }
done
pc_libs=$(pkg-config $static_flag --libs sdrt)
[[ $shared == 1 ]] || pc_libs="$pc_libs -lstdc++ -lm"  # a static libsdrt.a is C++
# shellcheck disable=SC2086
gcc -std=c11 -pedantic -Wall -Wextra -Werror -o "$tmp/engine-pc" "$root/examples/engine/engine.c" \
  "$root/examples/engine/fused.c" $(pkg-config --cflags sdrt) $pc_libs
if [[ $mpi == 1 ]] && command -v mpiexec >/dev/null; then
  # A Hugging Face folder: the model and a config.json with its sizes.
  mkdir "$tmp/tl"
  "$prefix/bin/sdrt" make --arch tiny-llama --seed 0 --json "$tmp/tl/model.safetensors" \
    > "$tmp/tl.json"
  field() { sed -n "s/^ *\"$1\": *\([0-9]*\),*$/\1/p" "$tmp/tl.json"; }
  printf '{"model_type": "llama", "hidden_size": %s, "num_attention_heads": %s,
 "num_key_value_heads": %s, "head_dim": %s, "intermediate_size": %s}\n' \
    "$(field hidden)" "$(field heads)" "$(field kv_heads)" "$(field head_dim)" \
    "$(field intermediate)" > "$tmp/tl/config.json"
  export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for ranks in 2 3; do
    mpiexec -n $ranks "$tmp/engine/engine" "$tmp/tl/model.safetensors" \
      > "$tmp/engine.$ranks.log" || { cat "$tmp/engine.$ranks.log" >&2; exit 1; }
  done
  mpiexec -n 2 "$tmp/engine/engine" "$tmp/tl" > "$tmp/engine.vllm.log" ||
    { cat "$tmp/engine.vllm.log" >&2; exit 1; }
  grep -q "qkv_proj.weight .*: matches the file" "$tmp/engine.vllm.log" ||
    { echo "install-check: the engine did not check a fused qkv_proj:" >&2
      cat "$tmp/engine.vllm.log" >&2; exit 1; }
  mpiexec -n 2 "$tmp/engine-pc" "$tmp/tl" > /dev/null
  mkdir "$tmp/trainer-out"
  mpiexec -n 3 "$tmp/trainer/trainer" "$tmp/trainer-out" --steps 2 --engine-ranks 2 \
    > "$tmp/trainer.log" || { cat "$tmp/trainer.log" >&2; exit 1; }
  grep -q "fp8-block .*both engines match the trainer" "$tmp/trainer.log" ||
    { echo "install-check: the trainer did not check its engines:" >&2
      cat "$tmp/trainer.log" >&2; exit 1; }
  # The engine loads the trainer's sharded export (tp over 2 ranks) on 3 ranks.
  mpiexec -n 3 "$tmp/engine/engine" "$tmp/trainer-out/sharded" > "$tmp/engine.sharded.log" ||
    { cat "$tmp/engine.sharded.log" >&2; exit 1; }
  grep -q ": matches the file" "$tmp/engine.sharded.log" ||
    { echo "install-check: the engine did not check the sharded export:" >&2
      cat "$tmp/engine.sharded.log" >&2; exit 1; }
  mpiexec -n 4 "$tmp/weight_sync/weight_sync" --steps 2 > "$tmp/weight_sync.log" ||
    { cat "$tmp/weight_sync.log" >&2; exit 1; }
  grep -q "step 2: .* engine weights match the trainer's" "$tmp/weight_sync.log" ||
    { echo "install-check: the weight sync did not check its engine:" >&2
      cat "$tmp/weight_sync.log" >&2; exit 1; }
  echo "install-check: $(tail -1 "$tmp/engine.3.log")" >&2
  echo "install-check: $(grep qkv_proj "$tmp/engine.vllm.log")" >&2
  echo "install-check: trainer: $(tail -1 "$tmp/trainer.log")" >&2
  echo "install-check: weight sync: $(tail -1 "$tmp/weight_sync.log")" >&2
fi

# 5. The shared library's SONAME and exported symbols.
if [[ $shared == 1 ]]; then
  soname=$(readelf -d "$prefix/lib/libsdrt.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
  if [[ ! $soname =~ ^libsdrt\.so\.[0-9]+$ ]]; then
    echo "install-check: libsdrt.so has SONAME '$soname', not libsdrt.so.N" >&2
    exit 1
  fi
  # Names only (after the address and type), without the version suffix.
  nm -D --defined-only -C "$prefix/lib/libsdrt.so" |
    sed -E 's/^[0-9a-fA-F]* *[A-Za-z] //; s/@@?SDRT_[0-9]+$//' > "$tmp/symbols"
  special='(typeinfo|typeinfo name|vtable|VTT|guard variable|construction vtable) for '
  grep -Ev "^(sdrt_[A-Za-z0-9_]*|SDRT_[0-9]+|($special)?sdrt::.*)$" "$tmp/symbols" \
    > "$tmp/bad" || true
  grep -E "^($special)?sdrt::([A-Za-z0-9_]+::)*(internal::|\(anonymous namespace\))" \
    "$tmp/symbols" >> "$tmp/bad" || true
  if [[ -s $tmp/bad ]]; then
    echo "install-check: libsdrt.so exports $(wc -l < "$tmp/bad") symbols outside the public API:" >&2
    cat "$tmp/bad" >&2
    exit 1
  fi
  echo "install-check: $soname exports $(wc -l < "$tmp/symbols") symbols, all public API" >&2
fi
echo "install-check: OK ($([[ $shared == 1 ]] && echo shared || echo static))" >&2
