#!/usr/bin/env bash
# Two mpiexec jobs that meet (MpiCommunicator::Accept / Connect, sdrt_comm_accept /
# sdrt_comm_connect), run by CTest:
#   two_jobs_test.sh PART MPIEXEC WEIGHT_SYNC C_API_TWO_JOBS
# PART deadlines: nobody comes: Connect and Accept return DEADLINE_EXCEEDED within the
#   timeout + 2 s, naming the port file, and leave no file (2 ranks each); a second job
#   accepting on a port file in use is refused at once; a connect through a file that holds
#   no port fails and leaves no claim.
# PART sync: the C API's accept/connect (2 + 2 ranks), then the weight-sync example as a
#   trainer job and an engine job (2 + 2 ranks, 3 steps, bit-exact).
# PART restarts: a trainer job serving 11 engine jobs one after another (10 restarts; every
#   other engine kills itself after its steps), its resident memory and open descriptors
#   printed after each, checked flat.
# Debian 12's MPICH 4.0.2 (ch4:ucx) has no dynamic processes (docs/HOSTS.md), so the jobs
# run under the MPICH 5 that scripts/install-deps.sh puts at SDRT_MPICH5 (default
# /opt/sdrt-mpich5; the same ABI, libmpi.so.12, so sdrt's binaries run on it unchanged),
# its mpiexec and its ofi netmod; MPIEXEC where it is missing, which exits 77 (skipped)
# when that MPI has no dynamic processes.
set -u
part=$1 mpiexec=$2 weight_sync=$3 c_api=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/sdrt-two-jobs.XXXXXX")
trap 'rm -rf "$work"' EXIT
mpich5=${SDRT_MPICH5:-/opt/sdrt-mpich5}
if [[ -x $mpich5/bin/mpiexec ]]; then
  export LD_LIBRARY_PATH=$mpich5/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export MPIR_CVAR_CH4_NETMOD=ofi
  # Both jobs on this host: loopback, not whatever interface libfabric takes for its default
  # (a test host's bridge that another test removes mid-run ended a trainer's MPI_Finalize).
  export FI_TCP_IFACE=lo FI_SOCKETS_IFACE=lo
  mpiexec=$mpich5/bin/mpiexec
fi
port=$work/port
fail() { echo "FAIL: $*"; exit 1; }

# Runs the accepting command (first argument list, up to --) in the background and the
# connecting one in the foreground; their outputs land in $work/a.out and $work/c.out.
pair() {
  local accept=() connect=()
  while [[ $1 != -- ]]; do accept+=("$1"); shift; done
  shift
  connect=("$@")
  timeout 30 "${accept[@]}" > "$work/a.out" 2>&1 &
  local pid=$!
  timeout 30 "${connect[@]}" > "$work/c.out" 2>&1
  c_rc=$?
  wait "$pid"
  a_rc=$?
  cat "$work/a.out" "$work/c.out"
}

case $part in
  deadlines)
    timeout 20 "$mpiexec" -n 2 "$c_api" connect-alone "$port" 1 || fail "connect-alone"
    timeout 20 "$mpiexec" -n 2 "$c_api" accept-alone "$port" 1
    rc=$?
    [[ -e $port || -e $port.claimed ]] && fail "accept-alone left a port file"
    [[ $rc == 77 ]] && exit 77
    [[ $rc == 0 ]] || fail "accept-alone"
    # A second job accepting on the same port file is refused at once; the first goes on
    # and removes its files, the lock's included.
    timeout 20 "$mpiexec" -n 2 "$c_api" accept-alone "$port" 4 > "$work/first.out" 2>&1 &
    first=$!
    for ((i = 0; i < 100; ++i)); do [[ -e $port ]] && break; sleep 0.1; done
    timeout 20 "$mpiexec" -n 1 "$c_api" accept-second "$port" 4 || fail "accept-second"
    wait "$first" || { cat "$work/first.out"; fail "the first acceptor"; }
    [[ -e $port || -e $port.lock ]] && fail "the first acceptor left a port or lock file"
    # A port file that holds no port: the connect fails, and its claim does not stay to
    # block the next accept on that path.
    echo "not-a-port" > "$port"
    timeout 20 "$mpiexec" -n 1 "$c_api" connect-alone "$port" 2 > /dev/null 2>&1
    [[ -e $port.claimed ]] && fail "a failed connect left $port.claimed"
    rm -f "$port"
    ;;
  sync)
    pair "$mpiexec" -n 2 "$c_api" accept "$port" 10 2 -- \
         "$mpiexec" -n 2 "$c_api" connect "$port" 10 2
    grep -q "SKIP: this MPI has no dynamic processes" "$work/a.out" && exit 77
    [[ $a_rc == 0 && $c_rc == 0 ]] || fail "C API accept $a_rc, connect $c_rc"
    pair "$mpiexec" -n 2 "$weight_sync" --accept "$port" --steps 3 --timeout 20 -- \
         "$mpiexec" -n 2 "$weight_sync" --connect "$port" --steps 3 --timeout 20
    [[ $a_rc == 0 && $c_rc == 0 ]] || fail "weight_sync trainer $a_rc, engine $c_rc"
    grep -q "^plan: 7 weights from 2 trainer ranks (fsdp) to 2 engine ranks (tp)" \
      "$work/a.out" || fail "no plan line"
    for step in 1 2 3; do
      grep -q "^step $step: .* engine weights match the trainer's" "$work/a.out" ||
        fail "step $step not bit-exact"
    done
    grep -q "^engine: steps 1 to 3 received, every weight as the trainer's" "$work/c.out" ||
      fail "the engine did not report its steps"
    ;;
  restarts)
    restarts=10
    timeout 60 "$mpiexec" -n 2 "$weight_sync" --accept "$port" --restarts $restarts \
      --timeout 2 > "$work/trainer.out" 2>&1 &
    trainer=$!
    for ((k = 0; k <= restarts; ++k)); do
      die=()
      ((k % 2)) && die=(--die)
      timeout 20 "$mpiexec" -n 2 "$weight_sync" --connect "$port" --steps 2 --timeout 10 \
        "${die[@]}" > "$work/engine$k.out" 2>&1
      rc=$?
      grep -q "SKIP\|not supported" "$work/engine$k.out" "$work/trainer.out" && {
        cat "$work/trainer.out"; kill "$trainer"; exit 77; }
      # An engine that kills itself is not waited for by mpiexec's output: its rc tells.
      if ((k % 2)); then
        [[ $rc != 0 ]] || fail "engine $k (--die) exited 0"
      else
        grep -q "^engine: steps" "$work/engine$k.out" || {
          cat "$work/engine$k.out"
          echo "-- the trainer so far:"; cat "$work/trainer.out"
          fail "engine $k ($rc)"; }
      fi
    done
    wait "$trainer"
    rc=$?
    cat "$work/trainer.out"
    [[ $rc == 0 ]] || fail "trainer exit $rc"
    [[ $(grep -c "^engine [0-9]* gone after" "$work/trainer.out") == $((restarts + 1)) ]] ||
      fail "the trainer did not serve $((restarts + 1)) engines"
    # Flat: the same descriptors after every engine from the third on, and resident memory
    # after the last within 2 MiB of that after the third (MPICH grows its tables for
    # connected processes by about 2 MiB during the first two meetings, then no more).
    pattern='s/^trainer after engine [0-9]*: rss \([0-9]*\) kB, \([0-9]*\) open fds$/\1 \2/p'
    mapfile -t usage < <(sed -n "$pattern" "$work/trainer.out")
    read -r rss1 fds1 <<< "${usage[2]}"
    read -r rss_last fds_last <<< "${usage[$restarts]}"
    echo "trainer: rss $rss1 -> $rss_last kB, fds $fds1 -> $fds_last" \
      "over the last $((restarts - 2)) restarts"
    [[ $fds1 == "$fds_last" ]] || fail "open fds grew: $fds1 -> $fds_last"
    ((rss_last - rss1 < 2048)) || fail "rss grew by $((rss_last - rss1)) kB"
    ;;
  *) fail "unknown part $part" ;;
esac
echo "two_jobs_test $part: passed"
