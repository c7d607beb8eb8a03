#!/usr/bin/env python3
"""Golden data for sdrt's distributed state-dict operations (core/distributed/distributed_state_dict.h).

Run BY HAND (never in CI) with PyTorch, from the repository root:

    VENV/bin/python tests/golden/make_distributed_golden.py

VENV is a virtualenv with torch (tests/golden/README.md gives the install line).

For world sizes 1, 2, 3 and 4 it spawns that many processes (torch.multiprocessing, one
gloo process group per world size over tcp://127.0.0.1:<free port>, DeviceMeshes on
"cpu"), builds on every rank a nested state dict whose DTensors torch itself makes with
`distribute_tensor` from full tensors whose values are a function of the global index, and
records per rank, in the shared golden encoding (golden_encode.py,
tests/support/golden_codec.h):

  input                   the rank's local state dict (DTensors with their local tensors)
  gathered                torch's `_gather_state_dict(input)`
  gathered_rank0_offload  torch's `_gather_state_dict(input, cpu_offload=True, ranks_only=(0,))`
  broadcast               per case: torch's `_broadcast_state_dict(full, local,
                          device=cpu, strict=...)`: `full` (flat; rank 0 only, the other
                          ranks pass {}), `local_before`, `local_after`, and the key sets
                          missing_keys / unexpected_keys derived from the inputs

into tests/data/distributed/golden_np{N}.json. Where torch's result differs from sdrt's
documented semantics (docs/SEMANTICS.md section 11) the case carries "notes" naming the key,
why, and (when it can be stated) "expected_by_spec", the value sdrt must give instead; tests
compare those keys with that value, never with torch's.

gloo cannot move int16, float8_e4m3fn or float8_e5m2 ("Invalid scalar type"): tensors and
DTensors of those dtypes are gathered and broadcast by torch as same-width views (int16 as
float16, float8 as uint8: the collectives only copy bytes), and the results are viewed
back. DTensors are made with distribute_tensor(..., src_data_rank=None) (every rank holds
the full tensor and splits it locally). Every gathered DTensor is checked against its full
tensor bit for bit.
"""
import argparse
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed._state_dict_utils import _broadcast_state_dict, _gather_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import _StridedShard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_encode import encode  # noqa: E402

OUT_DIR = Path(__file__).resolve().parents[1] / "data" / "distributed"

DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
}
# gloo refuses these dtypes; torch moves them as same-width views.
GLOO_VIEW = {torch.int16: torch.float16, torch.float8_e4m3fn: torch.uint8,
             torch.float8_e5m2: torch.uint8}


def values(shape, dtype, start=0):
    """A tensor whose element i (row-major) is an exactly representable function of i."""
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.int64) + start
    if dtype == torch.bool:
        t = i % 3 == 0
    elif dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = (i % 120).to(torch.uint8).view(dtype)  # bytes 0..119: finite in both formats
    elif dtype == torch.uint8:
        t = (i % 256).to(torch.uint8)
    elif dtype == torch.int8:
        t = (i % 256 - 128).to(torch.int8)
    elif dtype == torch.int16:
        t = (i * 257 - 1000).to(torch.int16)
    elif dtype == torch.int32:
        t = (i * 65537 - 70000).to(torch.int32)
    elif dtype == torch.int64:
        t = i * (1 << 33) - 5
    elif dtype == torch.float16:
        t = ((i % 2048) - 1024).to(torch.float16)
    elif dtype == torch.bfloat16:
        t = ((i % 256) - 128).to(torch.bfloat16)
    elif dtype == torch.float32:
        t = i.to(torch.float64).mul(0.5).sub(10).to(torch.float32)
    elif dtype == torch.float64:
        t = i.to(torch.float64).mul(0.25).add(1e10)
    else:
        raise AssertionError(dtype)
    return t.reshape(shape)


def contiguous_stride(shape):
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                       b.contiguous().reshape(-1).view(torch.uint8))


def relabel_dtensor(d, dtype):
    return DTensor.from_local(d.to_local().view(dtype), d.device_mesh, d.placements,
                              shape=d.shape, stride=d.stride(), run_check=False)


def make_dtensor(full, mesh, placements):
    """torch's distribute_tensor. Every rank holds `full`, so src_data_rank=None (each rank
    splits locally, no scatter): the same pieces, and it also works for uneven
    _StridedShard, where torch 2.15's scatter path raises AssertionError (padded pieces of
    unequal shapes)."""
    return distribute_tensor(full, mesh, placements, src_data_rank=None)


def meta_dtensor(shape, dtype, mesh, placements):
    local_shape, _ = compute_local_shape_and_global_offset(shape, mesh, placements)
    return DTensor.from_local(torch.empty(local_shape, dtype=dtype, device="meta"), mesh,
                              placements, shape=torch.Size(shape),
                              stride=contiguous_stride(shape), run_check=False)


def zeros_dtensor(shape, dtype, mesh, placements):
    local_shape, _ = compute_local_shape_and_global_offset(shape, mesh, placements)
    local = torch.zeros(local_shape, dtype=torch.uint8).view(dtype) if dtype.itemsize == 1 \
        else torch.zeros(local_shape, dtype=dtype)
    return DTensor.from_local(local, mesh, placements, shape=torch.Size(shape),
                              stride=contiguous_stride(shape), run_check=False)


def to_gloo(v):
    """The tree with DTensors / tensors of gloo-refused dtypes as same-width views."""
    if isinstance(v, DTensor):
        alt = GLOO_VIEW.get(v.dtype)
        return v if alt is None else relabel_dtensor(v, alt)
    if isinstance(v, torch.Tensor):
        alt = GLOO_VIEW.get(v.dtype)
        return v if alt is None or v.dim() == 0 else v.view(alt)
    if isinstance(v, dict):
        return {k: to_gloo(x) for k, x in v.items()}
    if isinstance(v, list):
        return [to_gloo(x) for x in v]
    if isinstance(v, tuple):
        return tuple(to_gloo(x) for x in v)
    return v


def from_gloo(result, original):
    """Views `result`'s tensors back to the dtypes of `original` (same structure)."""
    if isinstance(result, DTensor):
        return relabel_dtensor(result, original.dtype) if result.dtype != original.dtype \
            else result
    if isinstance(result, torch.Tensor):
        return result.view(original.dtype) if result.dtype != original.dtype else result
    if isinstance(result, dict):
        return {k: from_gloo(x, original[k]) for k, x in result.items()}
    if isinstance(result, (list, tuple)):
        out = [from_gloo(x, o) for x, o in zip(result, original)]
        return tuple(out) if isinstance(result, tuple) else out
    return result


class Builder:
    """Makes DTensors and remembers each one's full tensor, by path, for the checks."""

    def __init__(self):
        self.fulls = {}

    def dt(self, path, shape, dtype, mesh, placements, start=0):
        full = values(shape, dtype, start)
        self.fulls[path] = full
        return make_dtensor(full, mesh, placements)


def input_state_dict(n, mesh1, mesh2):
    b = Builder()
    S0, S1, R = Shard(0), Shard(1), Replicate()
    fsdp = {
        "case001": b.dt("model.fsdp.case001", (5, 10), torch.float32, mesh1, [S0]),
        "dim0_small": b.dt("model.fsdp.dim0_small", (2, 3), torch.int64, mesh1, [S0], 7),
        "shard1_uneven": b.dt("model.fsdp.shard1_uneven", (3, 9), torch.float64, mesh1, [S1]),
        "empty": b.dt("model.fsdp.empty", (0, 4), torch.float32, mesh1, [S0]),
        "replicated": b.dt("model.fsdp.replicated", (4,), torch.bfloat16, mesh1, [R], 3),
        "scalar": b.dt("model.fsdp.scalar", (), torch.float32, mesh1, [R], 5),
    }
    dtypes = {name: b.dt(f"model.dtypes.{name}", (7, 3), dt, mesh1, [S0], 11 * k)
              for k, (name, dt) in enumerate(DTYPES.items())}
    model = {"fsdp": fsdp, "dtypes": dtypes, "plain": values((2, 3), torch.float32, 100),
             "plain_int": values((4,), torch.int64, 3), "step": torch.tensor(7),
             "zero_dim_f": torch.tensor(0.5), "empty_plain": torch.zeros(0, 2)}
    if mesh2 is not None:
        model["mesh2d"] = {
            "hsdp": b.dt("model.mesh2d.hsdp", (5, 3), torch.bfloat16, mesh2, [R, S0]),
            "2d": b.dt("model.mesh2d.2d", (5, 3), torch.float16, mesh2, [S0, S1], 1),
            "shard00": b.dt("model.mesh2d.shard00", (5, 4), torch.float64, mesh2, [S0, S0], 2),
            "fsdp_tp": b.dt("model.mesh2d.fsdp_tp", (8, 6), torch.float32, mesh2,
                            [_StridedShard(0, split_factor=2), S0], 3),
            "fsdp_tp_uneven": b.dt("model.mesh2d.fsdp_tp_uneven", (7, 3), torch.int32, mesh2,
                                   [_StridedShard(0, split_factor=2), S0], 4),
            "strided_noncontiguous": b.dt("model.mesh2d.strided_noncontiguous", (8, 2),
                                          torch.float8_e4m3fn, mesh2,
                                          [S0, _StridedShard(0, split_factor=2)], 5),
        }
    sd = {
        "model": model,
        "optim": {
            "state": {
                0: {"exp_avg": b.dt("optim.state.0.exp_avg", (5, 10), torch.float32, mesh1,
                                    [S0], 1000),
                    "step": torch.tensor(3.0)},
                1: {"exp_avg": b.dt("optim.state.1.exp_avg", (3, 9), torch.float64, mesh1,
                                    [S1], 2000),
                    "step": torch.tensor(3.0)},
            },
            "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "params": [0, 1],
                              "name": "g0", "foreach": None, "amsgrad": False}],
        },
        "list": [b.dt("list.0", (6,), torch.int16, mesh1, [S0], 9), 1, "s", None,
                 [values((2,), torch.float16), 2.5]],
        "tuple": (b.dt("tuple.0", (3, 2), torch.uint8, mesh1, [S0], 250), 3,
                  values((1,), torch.int8)),
        "epoch": 3, "lr": 1e-3, "name": "ckpt", "none": None, "flag": True,
        "blob": b"\x00\xffab",
    }
    return sd, b.fulls


def walk_leaves(v, path=()):
    if isinstance(v, dict):
        for k, x in v.items():
            yield from walk_leaves(x, path + (str(k),))
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            yield from walk_leaves(x, path + (str(i),))
    else:
        yield ".".join(path), v


def gather_checks(gathered, fulls, rank):
    """Every gathered DTensor must be its full tensor; returns notes where it is not."""
    notes = []
    leaves = dict(walk_leaves(gathered))
    for path, full in fulls.items():
        got = leaves.get(path)
        if not isinstance(got, torch.Tensor) or not same_bits(got, full):
            notes.append({"key": path, "note": f"rank {rank}: torch's gather is not the full "
                          "tensor", "expected_by_spec": encode(full)})
    return notes


def broadcast_cases(n, mesh1, mesh2):
    """The specs by key, a maker of the flat full dict, and (name, strict, local maker) per
    case; flat dicts only (torch's broadcast handles no nesting)."""
    S0, S1, R = Shard(0), Shard(1), Replicate()
    specs = [  # key, shape, dtype, mesh, placements, start
        ("w_case001", (5, 10), torch.float32, mesh1, [S0], 0),
        ("w_dim0_small", (2, 3), torch.int64, mesh1, [S0], 7),
        ("w_shard1_uneven", (3, 9), torch.float64, mesh1, [S1], 0),
        ("w_empty", (0, 4), torch.float32, mesh1, [S0], 0),
        ("w_replicated", (4,), torch.bfloat16, mesh1, [R], 3),
    ]
    specs += [(f"dt_{name}", (7, 3), dt, mesh1, [S0], 11 * k)
              for k, (name, dt) in enumerate(DTYPES.items())]
    if mesh2 is not None:
        specs += [
            ("hsdp", (5, 3), torch.bfloat16, mesh2, [R, S0], 0),
            ("2d", (5, 3), torch.float16, mesh2, [S0, S1], 1),
            ("shard00", (5, 4), torch.float64, mesh2, [S0, S0], 2),
            ("fsdp_tp", (8, 6), torch.float32, mesh2, [_StridedShard(0, split_factor=2), S0], 3),
            ("fsdp_tp_uneven", (7, 3), torch.int32, mesh2,
             [_StridedShard(0, split_factor=2), S0], 4),
            ("strided_noncontiguous", (8, 2), torch.float8_e4m3fn, mesh2,
             [S0, _StridedShard(0, split_factor=2)], 5),
        ]
    spec_of = {s[0]: s for s in specs}
    fulls = {key: values(shape, dt, start) for key, shape, dt, _, _, start in specs}

    def full_dict():
        d = {}
        for i, (key, *_rest) in enumerate(specs):
            d[key] = fulls[key]
            if i == 2:  # non-tensor leaves and a 0-dim tensor in the middle of the order
                d.update({"step": torch.tensor(7), "epoch": 5, "lr": 0.01, "name": "ckpt",
                          "none_val": None, "only_in_full_scalar": 11,
                          "plain": values((2, 3), torch.float32, 100)})
        d["only_in_full"] = values((4,), torch.float32, 50)
        d["plain_int16"] = values((3,), torch.int16, 1)
        return d

    def meta_local(with_only_in_local):
        d = {}
        for i, (key, shape, dt, mesh, pl, _) in enumerate(specs):
            d[key] = meta_dtensor(shape, dt, mesh, pl)
            if i == 1:
                d.update({"step": torch.tensor(0), "epoch": 0, "lr": 0.0, "name": "",
                          "none_val": "not none", "plain": torch.zeros(2, 3)})
                if with_only_in_local:
                    d["only_in_local"] = values((3,), torch.float32)
                    d["only_in_local_dt"] = meta_dtensor((6, 2), torch.float32, mesh1, [S0])
        d["plain_int16"] = torch.zeros(3, dtype=torch.int16)
        return d

    def inplace_local():
        keys = ["w_case001", "w_shard1_uneven", "dt_float8_e5m2", "dt_int16", "dt_bool"]
        if mesh2 is not None:
            keys += ["2d", "fsdp_tp_uneven"]
        d = {}
        for key in keys:
            _, shape, dt, mesh, pl, _ = spec_of[key]
            d[key] = zeros_dtensor(shape, dt, mesh, pl)
        d["plain"] = values((2, 3), torch.float32, 900)
        return d

    def none_local():
        return {"w_case001": None, "plain": None,
                "w_shard1_uneven": meta_dtensor((3, 9), torch.float64, mesh1, [S1])}

    return spec_of, full_dict, [
        ("meta_dtensors", False, lambda: meta_local(True)),
        ("meta_dtensors_strict", True, lambda: meta_local(True)),
        ("in_place_dtensors", False, inplace_local),
        ("none_locals", True, none_local),
    ]


def broadcast_notes(local_before, local_after, full, spec_of):
    notes = []
    for key, before in local_before.items():
        after = local_after.get(key)
        if key in spec_of and isinstance(before, DTensor):
            _, shape, dt, mesh, pl, _ = spec_of[key]
            expected = make_dtensor(full[key], mesh, pl)
            if not (isinstance(after, DTensor) and same_bits(after.to_local(),
                                                              expected.to_local())):
                notes.append({"key": key, "note": "torch's _distribute_tensors slices "
                              "full[offset:offset+local_shape] (docs/SEMANTICS.md 11.1); "
                              "this rank's owned index set is not that slice, so torch's "
                              "local is wrong here; "
                              "sdrt places by the owned index set",
                              "expected_by_spec": encode(expected)})
    return notes


def run_rank(rank, n, port, tmp):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n,
                            init_method=f"tcp://127.0.0.1:{port}")
    mesh1 = DeviceMesh("cpu", torch.arange(n))
    mesh2 = DeviceMesh("cpu", torch.arange(n).reshape(2, 2)) if n == 4 else None
    cpu = torch.device("cpu")

    sd, fulls = input_state_dict(n, mesh1, mesh2)
    out = {"rank": rank, "input": encode(sd)}
    gathered = from_gloo(_gather_state_dict(to_gloo(sd)), sd)
    out["gathered"] = encode(gathered)
    notes = gather_checks(gathered, fulls, rank)
    offloaded = _gather_state_dict(to_gloo(sd), cpu_offload=True, ranks_only=(0,))
    if rank == 0:
        offloaded = from_gloo(offloaded, sd)
        notes += gather_checks(offloaded, fulls, rank)
    else:
        assert offloaded == {}, offloaded
    out["gathered_rank0_offload"] = encode(offloaded)
    out["gather_notes"] = notes

    spec_of, full_dict, cases = broadcast_cases(n, mesh1, mesh2)
    out["broadcast"] = []
    for name, strict, make_local in cases:
        full = full_dict() if rank == 0 else {}
        full_keys = list(full_dict().keys())
        local = make_local()
        before = dict(local)
        entry = {"name": name, "strict": strict, "full": encode(full),
                 "local_before": encode(local),
                 "missing_keys": [k for k in local if k not in full_keys],
                 "unexpected_keys": [k for k in full_keys if k not in local]}
        gloo_local = to_gloo(local)
        _broadcast_state_dict(to_gloo(full), gloo_local, device=cpu, strict=strict)
        after = {k: from_gloo(v, before[k]) if isinstance(v, torch.Tensor) and k in before
                 and isinstance(before[k], torch.Tensor) else v for k, v in gloo_local.items()}
        entry["local_after"] = encode(after)
        entry["notes"] = broadcast_notes(before, after, full_dict(), spec_of)
        out["broadcast"].append(entry)
        dist.barrier()

    dist.destroy_process_group()
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(out))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world-sizes", default="1,2,3,4")
    args = parser.parse_args()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for n in (int(x) for x in args.world_sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(run_rank, args=(n, free_port(), tmp), nprocs=n)
            ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(n)]
        golden = {"world_size": n, "torch_version": torch.__version__,
                  "gloo_views": {str(k).replace("torch.", ""): str(v).replace("torch.", "")
                                 for k, v in GLOO_VIEW.items()},
                  "ranks": ranks}
        path = OUT_DIR / f"golden_np{n}.json"
        path.write_text(json.dumps(golden, indent=None, separators=(",", ":")) + "\n")
        notes = sum(len(r["gather_notes"]) + sum(len(c["notes"]) for c in r["broadcast"])
                    for r in ranks)
        print(f"wrote {path} ({path.stat().st_size} bytes, {notes} notes)")


if __name__ == "__main__":
    main()
