#!/usr/bin/env bash
# Test hosts on this machine (issue 33): N network namespaces joined by a bridge, each its own
# host to MPI and to sdrt (its own address, its own host name), made with the kernel's tools
# (ip netns, a bridge and veth pairs, unshare --uts) and launched into by MPICH's mpiexec in
# place of ssh. Ranks on two test hosts talk over TCP through the bridge, ranks on one over
# shared memory, as on a cluster; sdrt tells nodes apart by host name (read once per node,
# the reshard's node ids).
#
#   scripts/hosts.sh up N         makes hosts 1..N (N in 1..16): namespace sdrt-hI, address
#                                 10.213.0.I/24 on an interface named like the bridge (so
#                                 that mpiexec -iface names it on both sides), host name
#                                 sdrt-hI; the bridge sdrt-hbr holds 10.213.0.254 for
#                                 mpiexec. Fails, undoing what it made, if any part exists.
#   scripts/hosts.sh down         removes the hosts and the bridge this script made (only
#                                 names with its prefix); nothing else.
#   scripts/hosts.sh mpiexec HOSTS ARGS...
#                                 mpiexec ARGS on the test hosts: HOSTS is "I:R,J:R" (host
#                                 number and ranks on it, e.g. 1:2,2:2), ARGS what mpiexec
#                                 takes after them (-n 4 PROGRAM ...).
#   scripts/hosts.sh launch [-x] ADDRESS COMMAND
#                                 what mpiexec calls instead of ssh: runs COMMAND inside the
#                                 namespace of ADDRESS under the host's name.
#   scripts/hosts.sh check        exit 0 when this machine lets the script make namespaces,
#                                 else 77 with the reason (a test's "skipped").
#
# Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 and util-linux's unshare. The
# prefix (SDRT_HOSTS_PREFIX, default sdrt-h, at most 9 characters: interface names are) and
# the subnet (SDRT_HOSTS_SUBNET, three octets, default 10.213.0) keep two users of the script
# apart (the tests use their own).
set -euo pipefail

prefix=${SDRT_HOSTS_PREFIX:-sdrt-h}
bridge=${prefix}br
subnet=${SDRT_HOSTS_SUBNET:-10.213.0}
[ ${#prefix} -le 9 ] || { echo "hosts.sh: SDRT_HOSTS_PREFIX longer than 9" >&2; exit 2; }
[[ $subnet =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "hosts.sh: bad SDRT_HOSTS_SUBNET" >&2; exit 2; }
script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

die() { echo "hosts.sh: $*" >&2; exit 2; }

# check: whether namespaces, bridges and veth pairs can be made here.
check() {
  local probe=${prefix}probe why
  command -v ip >/dev/null || { echo "hosts.sh: skipped: no ip (iproute2)" >&2; return 77; }
  command -v unshare >/dev/null || { echo "hosts.sh: skipped: no unshare" >&2; return 77; }
  if ! why=$(ip netns add "$probe" 2>&1); then
    echo "hosts.sh: skipped: network namespaces not permitted here ($why)" >&2
    return 77
  fi
  ip netns del "$probe"
  if ! why=$(unshare --uts true 2>&1); then
    echo "hosts.sh: skipped: UTS namespaces not permitted here ($why)" >&2
    return 77
  fi
  return 0
}

# The hosts this script made, by number, from the namespaces with its prefix.
made_hosts() {
  ip netns list 2>/dev/null | awk -v p="$prefix" '$1 ~ "^"p"[0-9]+$" { sub(p, "", $1); print $1 }' |
    sort -n
}

down() {
  local i
  for i in $(made_hosts); do
    ip netns del "$prefix$i" 2>/dev/null || true
    ip link del "${prefix}v$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}

# The EXIT trap while `up` runs: a failed step leaves nothing behind.
undo_on_failure() {
  local status=$?
  [ "$status" = 0 ] || down
}

up() {
  local n=$1 i
  if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 16 ]; then
    die "up: N must be 1..16, got $n"
  fi
  check || exit $?
  if ip link show "$bridge" >/dev/null 2>&1 || [ -n "$(made_hosts)" ]; then
    die "up: test hosts exist already (scripts/hosts.sh down first)"
  fi
  # Whatever fails or is interrupted half way is undone.
  trap 'down; exit 130' INT TERM
  trap undo_on_failure EXIT
  ip link add "$bridge" type bridge
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
  for i in $(seq 1 "$n"); do
    ip netns add "$prefix$i"
    # The host's end carries the bridge's name inside its namespace (names are per
    # namespace), so that `mpiexec -iface $bridge` means the test network on both sides.
    ip link add "${prefix}v$i" type veth peer name "$bridge" netns "$prefix$i"
    ip link set "${prefix}v$i" master "$bridge" up
    ip netns exec "$prefix$i" ip addr add "$subnet.$i/24" dev "$bridge"
    ip netns exec "$prefix$i" ip link set "$bridge" up
    ip netns exec "$prefix$i" ip link set lo up
  done
  trap - INT TERM EXIT
  echo "hosts.sh: $n test hosts up: ${prefix}1..$prefix$n at $subnet.1..$subnet.$n"
}

# launch [-x ...] ADDRESS COMMAND...: ssh's calling convention, as hydra uses it.
launch() {
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
  [ $# -ge 2 ] || die "launch: ADDRESS and COMMAND expected"
  local address=$1 i
  shift
  i=${address##*.}
  [[ $address == "$subnet.$i" && $i =~ ^[0-9]+$ ]] || die "launch: $address is no test host"
  # A UTS namespace of its own per launch: the host name is the test host's.
  # shellcheck disable=SC2016  # $0 and $1 expand in the inner shell
  exec ip netns exec "$prefix$i" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' \
    "$prefix$i" "$*"
}

# mpiexec HOSTS ARGS...: hydra with this script as its ssh, on the test network.
run_mpiexec() {
  [ $# -ge 2 ] || die "mpiexec: HOSTS and mpiexec's arguments expected"
  local spec=$1 hosts='' entry i r
  local -a entries
  shift
  IFS=, read -r -a entries <<<"$spec"
  for entry in "${entries[@]}"; do
    i=${entry%%:*}
    r=${entry#*:}
    [[ $i =~ ^[0-9]+$ && $r =~ ^[0-9]+$ ]] || die "mpiexec: bad host entry '$entry' (I:R)"
    ip netns list | grep -q "^$prefix$i\b" || die "mpiexec: no test host $i (scripts/hosts.sh up)"
    hosts+=${hosts:+,}$subnet.$i:$r
  done
  exec mpiexec -launcher ssh -launcher-exec "$script" -iface "$bridge" -hosts "$hosts" "$@"
}

case "${1:-}" in
  up) [ $# = 2 ] || die "usage: scripts/hosts.sh up N"; up "$2" ;;
  down) down ;;
  check) check ;;
  launch) shift; launch "$@" ;;
  mpiexec) shift; run_mpiexec "$@" ;;
  # hydra calls its launcher as ssh: [options] HOST COMMAND
  -*) launch "$@" ;;
  "$subnet".*) launch "$@" ;;
  *) die "usage: scripts/hosts.sh up N | down | check | mpiexec HOSTS ARGS... | launch ADDRESS CMD" ;;
esac
