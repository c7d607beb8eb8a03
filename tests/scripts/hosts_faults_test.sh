#!/usr/bin/env bash
# CTest `hosts_faults` (issue 33): a node that drops off the network or hangs while sdrt works
# across two test hosts (scripts/hosts.sh; 4 ranks, 2 per host). Host 2's link is cut (ip
# link set down: its packets are lost, no connection is closed) or its ranks stopped
# (SIGSTOP: alive, answering nothing) in the middle of a load (--read root: the root's
# broadcast, at its first progress line), a reshard (at its first progress line: after its
# first exchange of 16 MiB buckets) and a bound weight sync (examples/weight_sync, after its
# second step). Each time every live rank
# must give up within --timeout + 5 s of the fault with an error naming the op and the ranks
# that did not arrive (2 and 3), the job must end with exit status 1, no process may be left
# on either host, and the reshard's output folder must not appear. Skipped (77) where
# namespaces are not permitted. Usage: hosts_faults_test.sh ROOT SDRT WEIGHT_SYNC
export SDRT_HOSTS_PREFIX=sdrt-f SDRT_HOSTS_SUBNET=10.216.0
# shellcheck source=tests/scripts/hosts_common.sh
source "$(dirname "$0")/hosts_common.sh"
"$hosts" up 2
timeout_s=3

# 850 MB: the root's broadcast of it to 3 ranks takes about 0.7 s here, so that a fault
# at its first progress line lands inside it.
"$sdrt" make --arch llama-8b --scale 0.35 "$work/big.safetensors" >/dev/null
"$sdrt" shard "$work/big.safetensors" "$work/fsdp" --mesh 4 --plan fsdp >/dev/null

# fault NAME FAULT MARKER COMMAND...: COMMAND on hosts 1:2,2:2 in the background; when
# MARKER appears in its output, host 2 gets FAULT (cut or stop); then the checks above.
fault() {
  local name=$1 what=$2 marker=$3 out=$work/$1.out err=$work/$1.err pid rc t0 t1
  shift 3
  "$hosts" mpiexec 1:2,2:2 -n 4 "$@" >"$out" 2>"$err" &
  pid=$!
  for _ in $(seq 1200); do
    grep -q -- "$marker" "$out" "$err" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  grep -q -- "$marker" "$out" "$err" || { cat "$err" >&2; fail "$name: no '$marker' in 60 s"; }
  t0=$(date +%s%N)
  "$hosts" "$what" 2
  rc=0
  wait "$pid" || rc=$?
  t1=$(date +%s%N)
  # mpiexec's proxies end just after it: a second for them.
  local left
  for _ in $(seq 20); do
    left=$(ip netns pids "${SDRT_HOSTS_PREFIX}1"; ip netns pids "${SDRT_HOSTS_PREFIX}2")
    [ -n "$left" ] || break
    sleep 0.05
  done
  [ -z "$left" ] || ps -o pid,stat,comm -p "$(echo "$left" | tr ' ' ,)" >&2 || true
  if [ "$what" = cut ]; then "$hosts" heal 2; else "$hosts" cont 2; fi
  local ms=$(((t1 - t0) / 1000000))
  echo "hosts_faults: $name: host 2 $what -> exit $rc after $ms ms"
  [ "$rc" = 1 ] || { cat "$err" >&2; fail "$name: exit $rc, not 1 (finished before the fault?)"; }
  [ "$ms" -le $(((timeout_s + 5) * 1000)) ] || fail "$name: $ms ms after the fault"
  [ -z "$left" ] || fail "$name: processes left on the hosts: $left"
  # Both live ranks name the ranks that did not arrive, after the op.
  local named
  named=$(grep -c "ranks 2, 3 did not arrive" "$err" || true)
  [ "$named" -ge 1 ] || { cat "$err" >&2; fail "$name: no live rank named ranks 2, 3"; }
  grep -m1 "did not arrive" "$err"
}

load=("$sdrt" load "$work/big.safetensors" --mesh 4 --plan tp --read root --bucket-mib 16
      --timeout "$timeout_s" --progress)
fault load_cut cut "load, rank 0's bytes: " "${load[@]}"
fault load_stop stop "load, rank 0's bytes: " "${load[@]}"
fault reshard_stop stop "reshard, rank 0's bytes: " "$sdrt" reshard "$work/fsdp" "$work/tp" \
  --mesh 4 --plan tp --bucket-mib 16 --timeout "$timeout_s" --progress
! compgen -G "$work/tp*" >/dev/null || fail "reshard_stop: left $(ls -d "$work"/tp*)"
sync=("$weight_sync" --steps 1000000 --timeout "$timeout_s")
fault sync_cut cut "step 2:" "${sync[@]}"
fault sync_stop stop "step 2:" "${sync[@]}"
echo "hosts_faults: every fault ended the job within ${timeout_s} s + 5 s"
