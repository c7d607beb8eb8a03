#!/usr/bin/env python3
"""Golden data for sdrt's ReshardStateDict (core/distributed/reshard_state_dict.h): PyTorch's
DTensor.redistribute within one mesh.

Run BY HAND (never in CI) with PyTorch, from the repository root:

    VENV/bin/python tests/golden/make_reshard_golden.py

VENV is a virtualenv with torch (tests/golden/README.md gives the install line).

It spawns 4 processes (torch.multiprocessing, one gloo process group over
tcp://127.0.0.1:<free port>, DeviceMeshes on "cpu" of shape (4,) and (2, 2)) and, for each
case of CASES (global shape, dtype, mesh shape, source placements, destination
placements), builds the source DTensor on every rank and calls
`source.redistribute(mesh, dst_placements)`. A Shard / Replicate / _StridedShard source is
`distribute_tensor(full, mesh, placements, src_data_rank=None)` of a full tensor whose values
are a function of the global index (make_distributed_golden.values). A source with Partial
placements is `DTensor.from_local` of per-rank locals: each coordinate of the Partial mesh
dims has its own contribution (small integers, exactly representable in the dtype, so that
the order of the reduction cannot change a bit), which the ranks of that coordinate split by
the source's non-Partial placements. Every
rank's source and result DTensor are recorded in the shared golden encoding
(golden_encode.py, tests/support/golden_codec.h), and each result is checked against what
the semantics say (the destination piece of the full, reduced tensor) before it is written;
a mismatch is a "note" of the case.

A case PyTorch refuses (it raises) is written under "refused" with the exception, not under
"cases". Output: tests/data/reshard/golden_np4.json.
"""
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_encode import encode  # noqa: E402
from make_distributed_golden import free_port, same_bits, values  # noqa: E402

OUT_DIR = Path(__file__).resolve().parents[1] / "data" / "reshard"
WORLD = 4

S0, S1, S2, R = Shard(0), Shard(1), Shard(2), Replicate()
f32, bf16, f16, i32, i64, f64 = (torch.float32, torch.bfloat16, torch.float16, torch.int32,
                                 torch.int64, torch.float64)


def P(op="sum"):
    return Partial(op)


# name, global shape, dtype, mesh shape, source placements, destination placements
CASES = [
    ("s0_to_s1_uneven", (7, 5), f32, (4,), [S0], [S1]),
    ("s1_to_r", (6, 9), f32, (4,), [S1], [R]),
    ("r_to_s0_uneven", (9, 3), f32, (4,), [R], [S0]),
    ("empty_pieces_s0_to_s1", (2, 8), f32, (4,), [S0], [S1]),
    ("bf16_s1_to_s0", (5, 6), bf16, (4,), [S1], [S0]),
    ("f16_s0_to_r", (9, 2), f16, (4,), [S0], [R]),
    ("i32_s0_to_s1", (10, 3), i32, (4,), [S0], [S1]),
    ("i64_r_to_s1", (3, 6), i64, (4,), [R], [S1]),
    ("mesh2d_s0s1_to_s1s0", (6, 5), f32, (2, 2), [S0, S1], [S1, S0]),
    ("mesh2d_s0s0_to_s0s1", (7, 6), f64, (2, 2), [S0, S0], [S0, S1]),
    ("mesh2d_rs0_to_s0r", (7, 4), bf16, (2, 2), [R, S0], [S0, R]),
    ("mesh2d_rr_to_s0s1", (5, 3), i32, (2, 2), [R, R], [S0, S1]),
    ("mesh2d_3d_s2s0_to_s1r", (3, 5, 4), f32, (2, 2), [S2, S0], [S1, R]),
    ("partial_sum_to_r", (5, 3), f32, (4,), [P()], [R]),
    ("partial_sum_to_s0_uneven", (7, 3), f32, (4,), [P()], [S0]),
    ("partial_sum_bf16_to_s1", (3, 6), bf16, (4,), [P()], [S1]),
    ("mesh2d_ps0_to_s0r", (6, 4), bf16, (2, 2), [P(), S0], [S0, R]),
    ("mesh2d_pp_to_rs0", (5, 2), i32, (2, 2), [P(), P()], [R, S0]),
    ("partial_max_to_r", (4, 3), f32, (4,), [P("max")], [R]),
    ("partial_min_to_s0", (6, 2), i32, (4,), [P("min")], [S0]),
    ("partial_product_to_r", (3, 3), f32, (4,), [P("product")], [R]),
    ("partial_avg_to_r", (4, 2), f32, (4,), [P("avg")], [R]),
    ("partial_avg_bf16_to_s1", (3, 6), bf16, (4,), [P("avg")], [S1]),
    ("partial_avg_f16_to_s0_uneven", (7, 3), f16, (4,), [P("avg")], [S0]),
    ("mesh2d_pavg_s0_to_s1r", (6, 4), f64, (2, 2), [P("avg"), S0], [S1, R]),
    ("mesh2d_pavg_pavg_to_rs0", (5, 2), f32, (2, 2), [P("avg"), P("avg")], [R, S0]),
    ("r_to_partial_sum", (3, 4), f32, (4,), [R], [P()]),
    ("s0_to_partial_sum", (5, 4), f32, (4,), [S0], [P()]),
    ("strided_to_r_s1", (8, 6), f32, (2, 2), [_StridedShard(0, split_factor=2), S0], [R, S1]),
    ("strided_uneven_to_s0s1", (7, 3), i32, (2, 2), [_StridedShard(0, split_factor=2), S0],
     [S0, S1]),
    ("s0s0_to_strided", (8, 2), f32, (2, 2), [S0, S0], [_StridedShard(0, split_factor=2), S0]),
]


def contribution(shape, dtype, op, k):
    """Contribution k's addends / factors / candidates: small integers, distinct per k."""
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.int64)
    if op == "product":
        v = torch.tensor([1, 2, -1, 1, -2, 1, 1])[(i + k * 3) % 7]  # |product| <= 16
    else:
        v = (i * 7 + k * 5 + 3) % 23 - 11  # in [-11, 11]: sums of 4 stay exact in bf16
    return v.to(dtype).reshape(shape)


def reduce_all(parts, op):
    acc = parts[0].to(torch.float64)
    for p in parts[1:]:
        q = p.to(torch.float64)
        acc = {"sum": acc + q, "avg": acc + q, "product": acc * q,
               "max": torch.maximum(acc, q), "min": torch.minimum(acc, q)}[op]
    if op == "avg":
        acc = acc / len(parts)
    return acc.to(parts[0].dtype)


def without_partial(placements):
    return [R if p.is_partial() else p for p in placements]


def source_dtensor(shape, dtype, mesh, placements):
    """The source DTensor and the full tensor it stands for."""
    partial_ops = {p.reduce_op for p in placements if p.is_partial()}
    if not partial_ops:
        full = values(shape, dtype, 1)
        return distribute_tensor(full, mesh, placements, src_data_rank=None), full
    (op,) = partial_ops
    # The contribution depends on the rank's coordinates on the Partial mesh dims only (k
    # below), so ranks that differ on the other dims hold pieces of the same tensor; each
    # splits it by the non-Partial placements itself (src_data_rank=None: no communication).
    pdims = [d for d, p in enumerate(placements) if p.is_partial()]
    coord = mesh.get_coordinate()

    def index_of(c):
        k = 0
        for d in pdims:
            k = k * mesh.size(d) + c[d]
        return k

    count = 1
    for d in pdims:
        count *= mesh.size(d)
    local = distribute_tensor(contribution(shape, dtype, op, index_of(coord)), mesh,
                              without_partial(placements), src_data_rank=None).to_local()
    src = DTensor.from_local(local, mesh, placements, run_check=False, shape=torch.Size(shape),
                             stride=torch.empty(shape).stride())
    full = reduce_all([contribution(shape, dtype, op, k) for k in range(count)], op)
    return src, full


def expected_local(full, mesh, dst_placements, rank):
    if any(p.is_partial() for p in dst_placements):
        return None  # Replicate -> Partial: checked by reducing the results instead
    return distribute_tensor(full, mesh, dst_placements, src_data_rank=None).to_local()


def run_case(case, meshes, rank):
    name, shape, dtype, mesh_shape, src_pl, dst_pl = case
    mesh = meshes[mesh_shape]
    src, full = source_dtensor(shape, dtype, mesh, src_pl)
    entry = {"name": name, "global_shape": list(shape),
             "dtype": str(dtype).replace("torch.", ""), "mesh_shape": list(mesh_shape),
             "src_placements": encode(src)["placements"],
             "dst_placements": "[" + ", ".join(str(p) for p in dst_pl) + "]"}
    try:
        out = src.redistribute(mesh, dst_pl)
        local = out.to_local()
    except Exception as e:  # noqa: BLE001 -- recorded as PyTorch's refusal
        entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return entry
    entry["source"] = encode(src)
    entry["result"] = encode(out)
    notes = []
    want = expected_local(full, mesh, dst_pl, rank)
    if want is not None and not same_bits(local, want):
        notes.append(f"rank {rank}: torch's local is not the destination piece of the full "
                     "tensor")
    if want is None and not same_bits(out.full_tensor(), full):
        notes.append(f"rank {rank}: reducing torch's Partial result is not the full tensor")
    entry["notes"] = notes
    return entry


def run_rank(rank, port, tmp):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            init_method=f"tcp://127.0.0.1:{port}")
    meshes = {(4,): DeviceMesh("cpu", torch.arange(WORLD)),
              (2, 2): DeviceMesh("cpu", torch.arange(WORLD).reshape(2, 2))}
    entries = []
    for case in CASES:
        entries.append(run_case(case, meshes, rank))
        dist.barrier()
    dist.destroy_process_group()
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(entries))


def main():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run_rank, args=(free_port(), tmp), nprocs=WORLD)
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(WORLD)]
    cases, refused = [], []
    for per_rank in zip(*ranks):
        head = {k: v for k, v in per_rank[0].items() if k not in ("source", "result", "notes")}
        errors = sorted({e.get("error", "") for e in per_rank} - {""})
        if errors:
            refused.append(dict(head, error=errors[0]))
            continue
        head.pop("error", None)
        cases.append(dict(head, notes=[n for e in per_rank for n in e["notes"]],
                          ranks=[{"source": e["source"], "result": e["result"]}
                                 for e in per_rank]))
    golden = {"world_size": WORLD, "torch_version": torch.__version__, "cases": cases,
              "refused": refused}
    path = OUT_DIR / f"golden_np{WORLD}.json"
    path.write_text(json.dumps(golden, indent=None, separators=(",", ":")) + "\n")
    notes = sum(len(c["notes"]) for c in cases)
    print(f"wrote {path} ({path.stat().st_size} bytes): {len(cases)} cases, {notes} notes, "
          f"{len(refused)} refused by torch {torch.__version__}")
    for c in refused:
        print(f"  refused {c['name']}: {c['error']}")
    for c in cases:
        for n in c["notes"]:
            print(f"  note {c['name']}: {n}")


if __name__ == "__main__":
    main()
