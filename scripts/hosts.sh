#!/usr/bin/env bash
# Test hosts on this machine (issue 33): N network namespaces joined by a bridge, each its own
# host to MPI and to sdrt (its own address, its own host name), made with the kernel's tools
# (ip netns, a bridge and veth pairs, unshare) and launched into by MPICH's mpiexec in place
# of ssh. Ranks on two test hosts talk over TCP through the bridge (each host has its own
# boot id, /dev/shm and IPC namespace, so MPICH's UCX finds no shared memory between them),
# ranks on one over shared memory, as on a cluster; sdrt tells nodes apart by host name
# (read once per node, the reshard's node ids).
#
#   scripts/hosts.sh up N [--hide I[,J...]:DIR]...
#                                 makes hosts 1..N (N in 1..16): namespace sdrt-hI, address
#                                 10.213.0.I/24 on an interface named like the bridge (so
#                                 that mpiexec -iface names it on both sides), host name
#                                 sdrt-hI; the bridge sdrt-hbr holds 10.213.0.254 for
#                                 mpiexec. --hide: on hosts I, J, ... the folder DIR (an
#                                 existing directory, not a link) is empty and read-only
#                                 (an empty file system mounted over it in the processes'
#                                 own mount namespace), as on a node without the shared
#                                 storage. Fails, undoing what it made, if any part exists.
#   scripts/hosts.sh down         kills the processes left in the hosts, removes the hosts,
#                                 the bridge and the state folder this script made (only
#                                 names with its prefix); nothing else.
#   scripts/hosts.sh cut I | heal I
#                                 takes host I's link to the bridge down (a node dropping
#                                 off the network: its packets are lost, nothing is closed)
#                                 or up again.
#   scripts/hosts.sh stop I | cont I
#                                 stops (SIGSTOP) or continues the ranks on host I, every
#                                 process there but mpiexec's proxy (ranks that hang: alive,
#                                 their connections open).
#   scripts/hosts.sh mpiexec HOSTS ARGS...
#                                 mpiexec ARGS on the test hosts: HOSTS is "I:R,J:R" (host
#                                 number and ranks on it, e.g. 1:2,2:2), ARGS what mpiexec
#                                 takes after them (-n 4 PROGRAM ...). The MPICH is the one
#                                 at SDRT_MPICH5 (default /opt/sdrt-mpich5, what
#                                 scripts/install-deps.sh installs), its ofi netmod.
#   scripts/hosts.sh launch [-x] ADDRESS COMMAND
#                                 what mpiexec calls instead of ssh: runs COMMAND inside the
#                                 namespace of ADDRESS under the host's name.
#   scripts/hosts.sh check        exit 0 when this machine lets the script make namespaces,
#                                 else 77 with the reason (a test's "skipped").
#
# Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 and util-linux's unshare. The
# prefix (SDRT_HOSTS_PREFIX, default sdrt-h: 2 to 9 of a-z, 0-9 and '-', starting with a
# letter and not ending in a digit, so that no prefix is another's followed by a host number)
# and the subnet (SDRT_HOSTS_SUBNET, three octets without leading zeros, default 10.213.0,
# refused when a route to it exists) keep two users of the script apart (the tests use their
# own).
set -euo pipefail

prefix=${SDRT_HOSTS_PREFIX:-sdrt-h}
bridge=${prefix}br
mpich5=${SDRT_MPICH5:-/opt/sdrt-mpich5}  # the MPICH the hosts run (scripts/install-deps.sh)
# What `up` made for `launch`: boot_id.I (host I's boot id), hide.I (its hidden folders).
state=/run/$prefix.hosts
subnet=${SDRT_HOSTS_SUBNET:-10.213.0}
script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

die() { echo "hosts.sh: $*" >&2; exit 2; }
[[ $prefix =~ ^[a-z][a-z0-9-]{0,7}[a-z-]$ ]] ||
  die "SDRT_HOSTS_PREFIX '$prefix': 2 to 9 of a-z, 0-9, '-', a letter first, no digit last"
octet='(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])'
[[ $subnet =~ ^$octet\.$octet\.$octet$ ]] ||
  die "SDRT_HOSTS_SUBNET '$subnet': three octets (0-255, no leading zeros), e.g. 10.213.0"

# check: whether namespaces, bridges and veth pairs can be made here.
check() {
  local probe=$prefix.probe$$ why  # '.': no prefix has one, so no host is named like it
  command -v ip >/dev/null || { echo "hosts.sh: skipped: no ip (iproute2)" >&2; return 77; }
  command -v unshare >/dev/null || { echo "hosts.sh: skipped: no unshare" >&2; return 77; }
  if [ ! -x "$mpich5/bin/mpiexec" ]; then
    echo "hosts.sh: skipped: no MPICH 5 at $mpich5 (scripts/install-deps.sh installs it)" >&2
    return 77
  fi
  # An interrupt between these two lines leaves the probe: `down` removes it.
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

# The processes in host I's namespace (all of them started through `launch`).
host_pids() { ip netns pids "$prefix$1" 2>/dev/null || true; }

# Ends the mpiexec processes `mpiexec` started that still run (a job that `down` interrupts:
# its proxies' hosts go away and it would wait for them forever): TERM, then KILL after 2 s.
# Only a recorded pid whose process is still such an mpiexec: this MPICH's, with this
# script as its launcher and this prefix's bridge (hydra rewrites the rest of its argv).
end_jobs() {
  local f pid left='' alive line
  for f in "$state"/mpiexec.*; do
    [ -f "$f" ] || continue
    pid=${f##*.}
    [[ $pid =~ ^[0-9]+$ ]] || continue
    line=$( { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null || true)
    if [[ $line == "$mpich5/bin/mpiexec "* &&
      $line == *" -launcher-exec $script -iface $bridge "* ]]; then
      kill -TERM "$pid" 2>/dev/null && left+=" $pid"
    fi
  done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    alive=''
    for pid in $left; do
      ! kill -0 "$pid" 2>/dev/null || alive+=" $pid"
    done
    left=$alive
    [ -n "$left" ] || return 0
    sleep 0.2
  done
  # shellcheck disable=SC2086  # a list of pids
  kill -KILL $left 2>/dev/null || true
}

down() {
  local i pids probe
  end_jobs
  for probe in $(ip netns list 2>/dev/null |
                   awk -v p="$prefix" 'index($1, p ".probe") == 1 {print $1}'); do
    ip netns del "$probe" 2>/dev/null || true
  done
  for i in $(made_hosts); do
    pids=$(host_pids "$i")
    # shellcheck disable=SC2086  # a list of pids
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    ip netns del "$prefix$i" 2>/dev/null || true
    ip link del "${prefix}v$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$state"
}

# The host number I of a made host, else exit 2.
made_host() {
  if ! [[ $1 =~ ^[0-9]+$ ]] || ! ip netns list | grep -q "^$prefix$1\b"; then
    die "no test host '$1'"
  fi
}

# Each --hide I[,J...]:DIR of `up`, recorded for `launch`.
record_hidden() {
  local n=$1 spec=$2 list dir i real
  local -a on
  list=${spec%%:*}
  dir=${spec#*:}
  [[ $spec == *:* && -n $list && $dir == /* ]] || die "up: --hide I[,J...]:/DIR, got '$spec'"
  # The folder itself, by its own path: no link (a trailing slash would follow one), no
  # '.', '..' or '//', not the root.
  [ -d "$dir" ] || die "up: --hide: $dir is no directory"
  real=$(realpath -e -- "$dir")
  [ "$real" != / ] || die "up: --hide: $dir is the root"
  [ "$real" = "${dir%/}" ] || die "up: --hide: give the folder by its own path, without" \
    "a link, '.', '..' or '//' ($dir is $real)"
  [[ $dir != *$'\n'* ]] || die "up: --hide: a folder name with a newline"
  IFS=, read -r -a on <<<"$list"
  for i in "${on[@]}"; do
    if ! [[ $i =~ ^[0-9]+$ ]] || [ "$i" -lt 1 ] || [ "$i" -gt "$n" ]; then
      die "up: --hide: no host '$i'"
    fi
    printf '%s\n' "$dir" >>"$state/hide.$i"
  done
}

# The EXIT trap while `up` runs: a failed step leaves nothing behind.
undo_on_failure() {
  local status=$?
  [ "$status" = 0 ] || down
}

up() {
  local n=$1 i
  shift
  if ! [[ $n =~ ^[0-9]{1,2}$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 16 ]; then
    die "up: N must be 1..16, got $n"
  fi
  check || exit $?
  if ip link show "$bridge" >/dev/null 2>&1 || [ -n "$(made_hosts)" ] || [ -e "$state" ]; then
    die "up: test hosts exist already (scripts/hosts.sh down first)"
  fi
  # Any table's route covering the subnet but the default one (the local table's loopback
  # 127.0.0.0/8 too).
  # and any route inside it (a VPN's /32 would win over the bridge's /24).
  routes=$(ip route show table all match "$subnet.0/24" 2>/dev/null | grep -v '^default ' || true)
  routes+=$(ip route show table all root "$subnet.0/24" 2>/dev/null || true)
  [ -z "$routes" ] || die "up: a route to $subnet.0/24 exists already (another SDRT_HOSTS_SUBNET)"
  # Whatever fails or is interrupted half way is undone.
  trap 'down; exit 130' INT TERM HUP
  trap undo_on_failure EXIT
  mkdir -m 0700 "$state"
  while [ $# -gt 0 ]; do
    if [ "$1" != --hide ] || [ $# -lt 2 ]; then die "up: unknown argument '$1'"; fi
    record_hidden "$n" "$2"
    shift 2
  done
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
    cat /proc/sys/kernel/random/uuid >"$state/boot_id.$i"
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
  # Namespaces of its own per launch, as a node has: UTS (the test host's name), IPC and
  # mount: its own /dev/shm, its own boot id (UCX, MPICH's transport, takes two processes
  # with one boot id for one machine and would move their bytes through shared memory,
  # never the network), and its hidden folders empty read-only file systems.
  # shellcheck disable=SC2016  # $0 to $3 expand in the inner shell
  exec ip netns exec "$prefix$i" unshare --uts --ipc --mount --propagation private sh -c '
    hostname "$0" || exit 1
    mount --bind "$2/boot_id.$3" /proc/sys/kernel/random/boot_id || exit 1
    mount -t tmpfs -o mode=1777 sdrt-shm /dev/shm || exit 1
    if [ -f "$2/hide.$3" ]; then
      while IFS= read -r dir; do
        mount -t tmpfs -o ro,size=4k,mode=0555 sdrt-hidden "$dir" || exit 1
      done <"$2/hide.$3"
    fi
    exec sh -c "$1"' "$prefix$i" "$*" "$state" "$i"
}

# cut/heal I: host I's end of its veth pair on the bridge down or up.
link() {
  made_host "$2"
  ip link set "${prefix}v$2" "$1"
}

# stop/cont I: a signal to the programs mpiexec started on host I (not its proxy and shell).
signal_host() {
  made_host "$2"
  local pid name
  for pid in $(host_pids "$2"); do
    name=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
    case $name in hydra_pmi_proxy | sh) ;; *) kill "-$1" "$pid" 2>/dev/null || true ;; esac
  done
}

# mpiexec HOSTS ARGS...: hydra with this script as its ssh, on the test network.
run_mpiexec() {
  [ $# -ge 2 ] || die "mpiexec: HOSTS and mpiexec's arguments expected"
  local spec=$1 hosts='' entry i r
  local -a entries
  shift
  [[ $spec =~ ^[0-9]+:[0-9]+(,[0-9]+:[0-9]+)*$ ]] ||
    die "mpiexec: HOSTS is I:R[,J:R...], got '$spec'"
  IFS=, read -r -a entries <<<"$spec"
  for entry in "${entries[@]}"; do
    i=${entry%%:*}
    r=${entry#*:}
    [[ $r =~ ^[1-9][0-9]{0,2}$ ]] || die "mpiexec: host entry '$entry': 1 to 999 ranks"
    ip netns list | grep -q "^$prefix$i\b" || die "mpiexec: no test host $i (scripts/hosts.sh up)"
    hosts+=${hosts:+,}$subnet.$i:$r
  done
  # MPICH 5 with the ofi netmod (scripts/install-deps.sh), not Debian's MPICH 4.0.2 over UCX,
  # which hangs in MPI_Finalize over TCP in about half of the runs (docs/HOSTS.md).
  [ -x "$mpich5/bin/mpiexec" ] || die "mpiexec: no MPICH 5 at $mpich5 (scripts/install-deps.sh)"
  export LD_LIBRARY_PATH=$mpich5/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export MPIR_CVAR_CH4_NETMOD=ofi
  # libfabric on the test network: the interface named like the bridge in every host.
  export FI_TCP_IFACE=$bridge FI_SOCKETS_IFACE=$bridge
  # Recorded for `down`, which ends a job still running (this process becomes mpiexec).
  local -a command=("$mpich5/bin/mpiexec" -launcher ssh -launcher-exec "$script" -iface "$bridge"
    -hosts "$hosts" "$@")
  [ ! -d "$state" ] || printf '%s ' "${command[@]}" >"$state/mpiexec.$$"
  exec "${command[@]}"
}

case "${1:-}" in
  up) [ $# -ge 2 ] || die "usage: scripts/hosts.sh up N [--hide I[,J...]:DIR]..."; shift; up "$@" ;;
  down) down ;;
  cut) [ $# = 2 ] || die "usage: scripts/hosts.sh cut I"; link down "$2" ;;
  heal) [ $# = 2 ] || die "usage: scripts/hosts.sh heal I"; link up "$2" ;;
  stop) [ $# = 2 ] || die "usage: scripts/hosts.sh stop I"; signal_host STOP "$2" ;;
  cont) [ $# = 2 ] || die "usage: scripts/hosts.sh cont I"; signal_host CONT "$2" ;;
  check) check ;;
  launch) shift; launch "$@" ;;
  mpiexec) shift; run_mpiexec "$@" ;;
  # hydra calls its launcher as ssh: [options] HOST COMMAND
  -*) launch "$@" ;;
  "$subnet".*) launch "$@" ;;
  *) die "usage: scripts/hosts.sh up N [--hide I:DIR] | down | cut I | heal I | stop I |" \
    "cont I | check | mpiexec HOSTS ARGS... | launch ADDRESS CMD" ;;
esac
