#!/usr/bin/env bash
# The weight_sync example refuses, with exit 2 before MPI starts, a command line that is not
# one side's: both sides at once, the trainer's --restarts or the engine's --die without
# their side, a port file that is empty or a flag, a timeout too small to be one.
# Usage: example_flags_test.sh WEIGHT_SYNC
set -u
weight_sync=$1
fail=0
while IFS= read -r line; do
  eval "args=($line)"
  "$weight_sync" "${args[@]}" > /dev/null 2> /tmp/example_flags_test.$$
  rc=$?
  if [ "$rc" != 2 ] || ! grep -q '^usage: weight_sync' /tmp/example_flags_test.$$; then
    echo "weight_sync $line: exit $rc, expected 2 with the usage" >&2
    fail=1
  fi
done <<'CASES'
--accept a --connect b
--restarts 1
--die
--accept --timeout 1
--accept ''
--connect ''
--timeout 0.0001
--steps 0
--help
--no-such-flag
CASES
rm -f /tmp/example_flags_test.$$
exit $fail
