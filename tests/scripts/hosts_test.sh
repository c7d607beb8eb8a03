#!/usr/bin/env bash
# CTest `hosts` (issue 33): sdrt across test hosts of this machine (scripts/hosts.sh:
# network namespaces on a bridge, MPICH launching into them; between hosts TCP). Three
# hosts; the checkpoint's folder is hidden on host 3 (a node without the shared storage).
# - load, 2 hosts x 2 ranks, --read all --read-once-per-node: two nodes (node_of_rank
#   [0, 0, 1, 1]), each reads its bytes once; --read auto with the file on both hosts reads
#   on every rank; with host 3 (which cannot see it) the root reads and broadcasts, and the
#   summary says why; every piece bit-exact.
# - gather of a sharded folder over hosts 1:1,2:2,3:1 to one file: byte for byte the file.
# - reshard fsdp -> tp over hosts 1:1,2:2,3:1 and 1:2,2:2: the stats' internode bytes are
#   what the node ids predict (tests/scripts/internode_bytes.py: what several ranks of one
#   host need enters it once), the folder as `sdrt shard` writes it.
# - examples/weight_sync as two jobs, the trainer's on host 1 and the engine's on host 2,
#   meeting through a port file.
# Skipped (77) where namespaces are not permitted. Usage: hosts_test.sh ROOT SDRT WEIGHT_SYNC
export SDRT_HOSTS_PREFIX=sdrt-t SDRT_HOSTS_SUBNET=10.214.0
# shellcheck source=tests/scripts/hosts_common.sh
source "$(dirname "$0")/hosts_common.sh"
mkdir "$work/data" "$work/shared"
"$hosts" up 3 --hide "3:$work/data"
"$sdrt" make --arch tiny-llama --seed 3 "$work/data/model.safetensors" >/dev/null
model=$work/data/model.safetensors

json() { python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print($2)" "$1"; }

timeout 120 "$hosts" mpiexec 1:2,2:2 -n 4 "$sdrt" load "$model" --mesh 4 \
  --plan tp --read all --read-once-per-node --timeout 60 --json >"$work/once.json"
[ "$(json "$work/once.json" "r['bit_exact']")" = True ] || { echo "not bit-exact" >&2; exit 1; }
nodes=$(json "$work/once.json" "r['node_of_rank']")
[ "$nodes" = "[0, 0, 1, 1]" ] || { echo "node_of_rank $nodes, not two hosts of 2" >&2; exit 1; }
per_node=$(json "$work/once.json" "r['bytes_read_per_node']")
# One rank alone on one host reads what a node keeps of a tp layout over 2 of its 4 ranks.
timeout 120 "$hosts" mpiexec 1:4 -n 4 "$sdrt" load "$model" --mesh 4 \
  --plan tp --read all --read-once-per-node --timeout 60 --json >"$work/one_host.json"
one_host=$(json "$work/one_host.json" "r['bytes_read_per_node']")
[ "$(json "$work/one_host.json" "r['node_of_rank']")" = "[0, 0, 0, 0]" ] ||
  { echo "4 ranks on one host are not one node" >&2; exit 1; }
python3 - "$per_node" "$one_host" <<'PY'
import ast, sys
two, one = ast.literal_eval(sys.argv[1]), ast.literal_eval(sys.argv[2])
# Each host reads every byte its 2 ranks keep once; together at least the file's bytes read
# once by the one host, and no node more than that.
assert len(two) == 2 and len(one) == 1, (two, one)
assert all(0 < b <= one[0] for b in two), (two, one)
assert sum(two) >= one[0], (two, one)
PY
timeout 120 "$hosts" mpiexec 1:2,2:2 -n 4 "$sdrt" load "$model" --mesh 4 \
  --plan fsdp --read auto --timeout 60 --json >"$work/auto.json"
[ "$(json "$work/auto.json" "r['read']")" = all ] || { echo "read auto did not read all" >&2; exit 1; }
[ "$(json "$work/auto.json" "r['bit_exact']")" = True ] || { echo "auto not bit-exact" >&2; exit 1; }
echo "hosts: 2 test hosts x 2 ranks: node_of_rank $nodes, bytes read per node $per_node (one host: $one_host)"

# Host 3 cannot see the file: auto falls back to the root, names why, and rank 0 checks
# every tensor gathered.
timeout 120 "$hosts" mpiexec 1:2,3:2 -n 4 "$sdrt" load "$model" --mesh 4 --plan tp \
  --timeout 60 --json >"$work/hidden.json"
[ "$(json "$work/hidden.json" "r['read']")" = root ] || fail "hidden: auto did not pick root"
reason=$(json "$work/hidden.json" "r['read_reason']")
[[ $reason == "auto: rank 2 cannot open it ("*"No such file or directory); rank 3 does not"* ]] ||
  fail "hidden: read_reason '$reason'"
[ "$(json "$work/hidden.json" "r['bit_exact']")" = True ] || fail "hidden: not bit-exact"
echo "hosts: hidden on host 3: read root ($reason)"

# Gather and reshard between hosts, from a sharded folder every host sees.
"$sdrt" shard "$model" "$work/shared/fsdp" --mesh 4 --plan fsdp >/dev/null
"$sdrt" shard "$model" "$work/shared/tp_one_host" --mesh 4 --plan tp >/dev/null
timeout 120 "$hosts" mpiexec 1:1,2:2,3:1 -n 4 "$sdrt" gather "$work/shared/fsdp" \
  "$work/shared/gathered.safetensors" --timeout 60 >/dev/null
cmp "$model" "$work/shared/gathered.safetensors" || fail "gather between hosts differs"
for spec in 1:1,2:2,3:1 1:2,2:2; do
  nodes=$(python3 -c "import sys
print([n for n, c in enumerate(sys.argv[1].split(',')) for _ in range(int(c.split(':')[1]))])" \
    "$spec")
  out=$work/shared/tp_$spec
  timeout 120 "$hosts" mpiexec "$spec" -n 4 "$sdrt" reshard "$work/shared/fsdp" "$out" \
    --mesh 4 --plan tp --timeout 60 --json >"$work/reshard.json"
  got=$(json "$work/reshard.json" "r['internode_bytes']")
  read -r once every_rank < <(python3 "$root/tests/scripts/internode_bytes.py" \
    "$work/shared/fsdp/index.json" "$out/index.json" "$nodes")
  [ "$got" = "$once" ] || fail "reshard on $spec: internode bytes $got, predicted $once"
  for f in "$work/shared/tp_one_host"/*.safetensors; do
    cmp "$f" "$out/$(basename "$f")" || fail "reshard on $spec: $(basename "$f") differs"
  done
  echo "hosts: reshard fsdp -> tp on $spec (nodes $nodes): internode bytes $got as predicted" \
    "(each rank by itself: $every_rank)"
done

# The weight sync as two jobs on two hosts.
port=$work/shared/port
timeout 60 "$hosts" mpiexec 1:2 -n 2 "$weight_sync" --accept "$port" --steps 3 --timeout 30 \
  >"$work/trainer.out" 2>&1 &
trainer=$!
timeout 60 "$hosts" mpiexec 2:2 -n 2 "$weight_sync" --connect "$port" --steps 3 --timeout 30 \
  >"$work/engine.out" 2>&1 || { cat "$work/engine.out" >&2; fail "engine job failed"; }
wait "$trainer" || { cat "$work/trainer.out" >&2; fail "trainer job failed"; }
grep -q "step 3: .* engine weights match the trainer's" "$work/trainer.out" "$work/engine.out" ||
  { cat "$work/trainer.out" "$work/engine.out" >&2; fail "two jobs: no matching step 3"; }
echo "hosts: weight sync as two jobs on hosts 1 and 2: 3 steps bit-exact"
