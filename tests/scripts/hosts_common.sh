# Sourced by the `hosts` tests (hosts_test.sh, hosts_faults_test.sh) after they set
# SDRT_HOSTS_PREFIX and SDRT_HOSTS_SUBNET (each its own, so that they never meet): takes
# ROOT SDRT WEIGHT_SYNC from their arguments, exits 77 (skipped) where test hosts cannot be
# made, makes a work folder, and on exit takes the hosts down and removes the folder.
# `fail MESSAGE` ends the test (exit 1) naming it.
set -euo pipefail
root=$1
sdrt=$2
weight_sync=$3
hosts=$root/scripts/hosts.sh
test_name=$(basename "$0" _test.sh)
"$hosts" check || exit $?
work=$(mktemp -d /tmp/sdrt-hosts-test.XXXXXX)
cleanup() { "$hosts" down; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "$test_name: $*" >&2; exit 1; }
"$hosts" down  # what an earlier run killed hard may have left
