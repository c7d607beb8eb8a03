#!/usr/bin/env bash
# The main job, for now: install what is missing, build, fetch the real checkpoint
# (all-MiniLM-L6-v2) and run `sdrt inspect` on it. Arguments go to `sdrt inspect`
# (for example --json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SDRT_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
model=$("$root/scripts/fetch-model.sh" | tail -n 1)
exec "$build/bin/sdrt" inspect "$@" "$model"
