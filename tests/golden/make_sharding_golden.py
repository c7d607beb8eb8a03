#!/usr/bin/env python3
"""Golden data for sdrt's DTensor sharding arithmetic (tensor/sharding/sharding.h).

Run BY HAND (never in CI) with PyTorch:

    VENV/bin/python tests/golden/make_sharding_golden.py

VENV is a virtualenv with torch (tests/golden/README.md gives the install line).

For every case (global shape, mesh shape, placements) and every rank of the mesh it calls
PyTorch's own `torch.distributed.tensor._utils.compute_local_shape_and_global_offset` and
records what it returns. The mesh is a small stand-in object exposing what that function
reads (`shape`, `_is_current_rank_part_of_mesh()`, `_sym_get_coordinate(dim)`) for the
row-major mesh `arange(N).reshape(mesh_shape)`; no process group is needed. One extra row
per case asks for rank N (not in the mesh): PyTorch returns `((0,), ())`.

The global indices a rank owns along each tensor dim are obtained the way
`distribute_tensor` splits a tensor: starting from `arange(n_d)`, the placements sharding
dim d are applied left to right with PyTorch's `Shard._split_tensor` /
`_StridedShard._split_tensor` (no padding) and this rank's piece is kept. For tensors of up
to 4096 elements the script also distributes `arange(numel).reshape(global_shape)` with the
real placements and checks the local block equals the outer product of those index lists.
It checks that the reported shape and offset agree with the index lists (offset = first
owned index; an empty shard reports the global dim size) and stops if not.

Output: tests/data/sharding/local_shape_golden.json, {"torch_version", "rows": [...]}, one
row per (case, rank): global_shape, mesh_shape, placements (PyTorch's str form, e.g.
"[_S(0, 2), S(0)]"), rank, local_shape, global_offset, source (where the case comes from)
and, only when some dim's owned indices are not one contiguous run, index_lists: per
tensor dim the owned global indices, or null where they are the contiguous run
[offset, offset + local size).
"""
import itertools
import json
import random
from pathlib import Path

import torch
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

OUT = Path(__file__).resolve().parents[1] / "data" / "sharding" / "local_shape_golden.json"
CROSS_CHECK_NUMEL = 4096


class FakeMesh:
    """What compute_local_shape_and_global_offset reads from a DeviceMesh."""

    def __init__(self, shape, coordinate):
        self.shape = tuple(shape)
        self.ndim = len(shape)
        self._coordinate = coordinate

    def _is_current_rank_part_of_mesh(self):
        return self._coordinate is not None

    def _sym_get_coordinate(self, dim):
        return self._coordinate[dim]


def S(d):
    return Shard(d)


def SS(d, sf):
    return _StridedShard(d, split_factor=sf)


R = Replicate()
P = Partial()


def is_shard_like(p):
    return isinstance(p, (Shard, _StridedShard))


def coordinate_of(rank, mesh_shape):
    coord = []
    for size in reversed(mesh_shape):
        coord.append(rank % size)
        rank //= size
    return tuple(reversed(coord))


def on_dim(p, dim):
    """The same placement acting on tensor dim `dim`."""
    if isinstance(p, _StridedShard):
        return _StridedShard(dim, split_factor=p.split_factor)
    return Shard(dim)


def owned_indices(global_shape, mesh_shape, placements, coord):
    """Per tensor dim: the global indices this coordinate owns, split by PyTorch."""
    lists = []
    for d, n in enumerate(global_shape):
        idx = torch.arange(n)
        for mesh_dim, p in enumerate(placements):
            if is_shard_like(p) and p.dim == d:
                pieces, _ = on_dim(p, 0)._split_tensor(
                    idx, mesh_shape[mesh_dim], with_padding=False, contiguous=False)
                idx = pieces[coord[mesh_dim]]
        lists.append(idx.tolist())
    return lists


def cross_check(global_shape, mesh_shape, placements, coord, lists):
    """Distributes an arange with the real placements; compares with the index lists."""
    numel = 1
    for n in global_shape:
        numel *= n
    if not global_shape or numel == 0 or numel > CROSS_CHECK_NUMEL:
        return
    local = torch.arange(numel).reshape(global_shape)
    for mesh_dim, p in enumerate(placements):
        if is_shard_like(p):
            pieces, _ = p._split_tensor(local, mesh_shape[mesh_dim], with_padding=False,
                                        contiguous=False)
            local = pieces[coord[mesh_dim]]
    full = torch.arange(numel).reshape(global_shape)
    expected = full[torch.meshgrid(*[torch.tensor(l, dtype=torch.long) for l in lists],
                                   indexing="ij")]
    assert torch.equal(local, expected), (global_shape, mesh_shape, placements, coord)


def placements_str(placements):
    return "[" + ", ".join(str(p) for p in placements) + "]"


def rows_for_case(global_shape, mesh_shape, placements, source):
    global_shape = tuple(global_shape)
    mesh_shape = tuple(mesh_shape)
    world = 1
    for m in mesh_shape:
        world *= m
    text = placements_str(placements)
    rows = []
    for rank in range(world + 1):
        coord = coordinate_of(rank, mesh_shape) if rank < world else None
        local_shape, offset = compute_local_shape_and_global_offset(
            global_shape, FakeMesh(mesh_shape, coord), placements)
        row = {"global_shape": list(global_shape), "mesh_shape": list(mesh_shape),
               "placements": text, "rank": rank, "local_shape": list(local_shape),
               "global_offset": list(offset), "source": source}
        if coord is not None:
            lists = owned_indices(global_shape, mesh_shape, placements, coord)
            cross_check(global_shape, mesh_shape, placements, coord, lists)
            touched = {p.dim for p in placements if is_shard_like(p)}
            slice_lists = []
            for d, idx in enumerate(lists):
                assert local_shape[d] == len(idx), (row, idx)
                want = idx[0] if idx else (global_shape[d] if d in touched else 0)
                assert offset[d] == want, (row, idx)
                contiguous = idx == list(range(offset[d], offset[d] + len(idx)))
                slice_lists.append(None if contiguous else idx)
            if any(l is not None for l in slice_lists):
                row["index_lists"] = slice_lists
        rows.append(row)
    return rows


def spec_cases():
    """docs/SEMANTICS.md 1.3, 1.4, 1.5 and 9 items 8-24, as (shape, mesh, placements, src)."""
    cases = []
    for k, n in [(4, 10), (4, 3), (4, 5), (4, 6), (8, 9), (4, 0), (8, 0)]:
        cases.append(((n,), (k,), [S(0)], "spec1.3"))
    for n, k, sf in [(8, 4, 2), (9, 4, 2), (5, 2, 2)]:
        cases.append(((n,), (k,), [SS(0, sf)], "spec1.4"))
    cases.append(((2, 4), (2,), [SS(1, 2)], "spec1.4"))
    cases += [((8, 4), (2, 2), [S(0), S(0)], "spec1.5"),
              ((5, 4), (2, 2), [S(0), S(0)], "spec1.5"),
              ((3, 4), (2, 2), [S(0), S(0)], "spec1.5"),
              ((5, 3), (2, 2), [S(0), S(1)], "spec1.5"),
              ((8,), (2, 2), [SS(0, 2), S(0)], "spec1.5"),
              ((15, 5), (4, 2), [SS(0, 2), S(0)], "spec1.5"),
              ((18, 2), (4, 2), [S(0), SS(0, 2)], "spec1.5"),
              ((2, 5), (2, 2), [S(1), S(1)], "pytorch docstring"),
              ((4096, 4096), (30, 8), [SS(0, 8), S(0)], "spec9.8"),
              ((18, 2), (4, 2), [S(0), S(0)], "spec9.9"),
              ((13, 2), (4, 2), [S(0), S(0)], "spec9.10"),
              ((18, 2), (4, 2), [SS(0, 2), S(0)], "spec9.11"),
              ((39, 2), (4, 2), [SS(0, 3), SS(0, 4)], "spec9.12"),
              ((18, 2), (4, 2), [S(0), SS(0, 2)], "spec9.13"),
              ((39, 2), (4, 2, 3), [S(0), SS(0, 2), S(0)], "spec9.14")]
    for n in range(17):
        for p in (S(0), R):
            cases.append(((n,), (8,), [p], "spec9.15"))
    for d0 in range(1, 9):
        for pair in itertools.product([S(0), S(1), R], repeat=2):
            cases.append(((d0, 64 // d0), (2, 4), list(pair), "spec9.16"))
    cases.append(((16, 16), (2, 2, 2), [SS(0, 2), S(0), S(0)], "spec9.17"))
    cases.append(((16, 16), (1, 2, 2, 2), [SS(0, 2), SS(1, 2), S(0), S(1)], "spec9.18"))
    cases.append(((16, 16), (1, 2, 2, 2), [SS(0, 2), SS(1, 2), S(0), S(0)], "spec9.18"))
    for world in (4, 8):
        cases.append(((2 * world, 2), (world // 2, 2), [SS(0, 2), S(0)], "spec9.19"))
        cases.append(((8, 2), (world // 4, 2, 2), [R, SS(0, 2), S(0)], "spec9.21"))
        for n in (2, 3, 5, 11):
            cases.append(((1, n), (world // 2, 2), [SS(1, 2), S(1)], "spec9.23"))
    cases.append(((15, 5), (4, 2), [SS(0, 2), S(0)], "spec9.20"))
    for sf in (1, 2):
        cases.append(((8,), (4,), [SS(0, sf)], "spec9.22"))
        cases.append(((8,), (2, 2), [SS(0, sf), S(0)], "spec9.22"))
    cases.append(((2, 4), (2, 2), [SS(1, 2), S(1)], "spec9.22"))
    cases.append(((4, 2), (2, 2), [SS(0, 2), S(0)], "spec9.24"))
    cases.append(((4, 2), (2, 2), [S(0), S(0)], "spec9.24"))
    cases.append(((5,), (2,), [SS(0, 2)], "case-006"))
    cases.append(((2, 14), (4,), [S(1)], "case-004"))
    cases.append(((5, 10), (4,), [S(0)], "case-001"))
    cases.append(((3, 9), (2,), [S(1)], "case-005"))
    cases.append(((), (2,), [R], "0-dim"))
    cases.append(((), (2, 2), [P, R], "0-dim"))
    return cases


MESHES = [(1,), (2,), (3,), (4,), (5,), (8,), (2, 2), (2, 3), (3, 2), (4, 2), (2, 4), (1, 3),
          (3, 1), (2, 2, 2), (2, 1, 3), (1, 2, 2), (3, 2, 2), (1, 2, 2, 2), (2, 2, 2, 2),
          (2, 1, 2, 3)]
DIM_SIZES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17, 24]


def random_cases(count, seed=20251):
    """Mixed Shard / _StridedShard / Replicate / Partial placements, uneven on purpose."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        mesh = rng.choice(MESHES)
        ndim = rng.choice([1, 1, 2, 2, 2, 3])
        shape = tuple(rng.choice(DIM_SIZES) for _ in range(ndim))
        favourite = rng.randrange(ndim)  # nests shards on one dim more often
        placements = []
        for _ in mesh:
            roll = rng.random()
            d = favourite if rng.random() < 0.6 else rng.randrange(ndim)
            if roll < 0.4:
                placements.append(S(d))
            elif roll < 0.65:
                placements.append(SS(d, rng.choice([1, 2, 3, 4, 5])))
            elif roll < 0.85:
                placements.append(R)
            else:
                placements.append(Partial(rng.choice(["sum", "avg", "max"])))
        cases.append((shape, mesh, placements, "random"))
    return cases


def main():
    cases = spec_cases() + random_cases(320)
    rows = []
    for shape, mesh, placements, source in cases:
        rows += rows_for_case(shape, mesh, placements, source)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w") as f:
        f.write('{"torch_version": %s, "rows": [\n' % json.dumps(torch.__version__))
        f.write(",\n".join(json.dumps(r, separators=(",", ":")) for r in rows))
        f.write("\n]}\n")
    strided = sum(1 for r in rows if "index_lists" in r)
    print(f"{len(cases)} cases, {len(rows)} rows ({strided} not a slice) -> {OUT} "
          f"({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
