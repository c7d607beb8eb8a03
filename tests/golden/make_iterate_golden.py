#!/usr/bin/env python3
"""Golden data for sdrt's state-dict operations (core/state_dict/state_dict_ops.h).

Run BY HAND (never in CI) with PyTorch:

    VENV/bin/python tests/golden/make_iterate_golden.py

VENV is a virtualenv with torch (tests/golden/README.md gives the install line).

It runs PyTorch's own `_copy_state_dict`, `_check_state_dict_similarity`,
`_offload_state_dict_to_cpu` (with `ranks_only`) and `_create_cpu_state_dict` from
torch/distributed/_state_dict_utils.py on small inputs, in a one-rank gloo process group
(ranks_only needs a rank; DTensors need a mesh), and writes what they return or raise to
tests/data/state_dict/iterate_golden.json. Values use the shared golden encoding
(tests/support/golden_codec.h, written by golden_encode.py). Sections:

  companion   src/dst pairs: whether `_copy_state_dict` raises (and the exception type) or
              its result; whether `_check_state_dict_similarity` returns True/False or
              raises, and whether it wrote into its second argument.
  ranks_only  `_offload_state_dict_to_cpu(sd, ranks_only=...)` as rank 0.
  offload     `_offload_state_dict_to_cpu(sd)` results (tuples, lists, scalars kept).
  create_cpu  `_create_cpu_state_dict(sd, share_memory=...)` (CPU inputs; pin_memory needs
              CUDA): per flattened key, kind, dtype, shape, device, contiguity, shared
              memory, the 0-dim value and whether the object is the input itself.
"""
import copy
import io
import json
import socket
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed._state_dict_utils import (
    _check_state_dict_similarity,
    _copy_state_dict,
    _create_cpu_state_dict,
    _offload_state_dict_to_cpu,
)
from torch.distributed.tensor import DTensor, Replicate, Shard, init_device_mesh

from golden_encode import arange_tensor as t
from golden_encode import encode

OUT = Path(__file__).resolve().parents[1] / "data" / "state_dict" / "iterate_golden.json"


def outcome(fn):
    """(result, None) or (None, exception type name)."""
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - recording which exception PyTorch raises
        return None, type(e).__name__


def companion_cases(mesh):
    def dt(local):
        return DTensor.from_local(local, mesh, [Shard(0)], run_check=False)

    return [
        ("same_structure", {"a": t(2, 3), "n": {"l": [t(2), 5], "s": "x"}, "tp": (t(1), 2.5)},
         {"a": t(2, 3, start=100), "n": {"l": [t(2, start=100), 6], "s": "y"},
          "tp": (t(1, start=100), 0.5)}),
        ("key_missing_from_dst", {"layers": [{}, {"weight": t(2), "bias": t(2)}]},
         {"layers": [{}, {"weight": t(2)}]}),
        ("key_only_in_dst", {"layers": [{}, {"weight": t(2)}]},
         {"layers": [{}, {"weight": t(2), "bias": t(2)}]}),
        ("key_order_differs", {"a": t(1), "b": t(2)}, {"b": t(2, start=7), "a": t(1, start=7)}),
        ("list_longer_than_dst", {"l": [t(1), t(1)]}, {"l": [t(1)]}),
        ("list_shorter_than_dst", {"l": [t(1)]}, {"l": [t(1), t(1)]}),
        ("dict_vs_list", {"x": {"a": t(1)}}, {"x": [t(1)]}),
        ("list_vs_dict", {"x": [t(1)]}, {"x": {"0": t(1)}}),
        ("list_vs_tensor", {"x": [t(1)]}, {"x": t(1)}),
        ("tensor_vs_dict", {"x": t(1)}, {"x": {"a": t(1)}}),
        ("tensor_vs_int", {"x": t(1)}, {"x": 3}),
        ("tensor_vs_none", {"x": t(2)}, {"x": None}),
        ("dict_vs_none", {"x": {"a": t(2)}}, {"x": None}),
        ("tuple_src_list_dst", {"x": (t(2), 1)}, {"x": [t(2, start=9), 2]}),
        ("int_vs_tensor", {"x": 1}, {"x": t(1)}),
        ("shape_mismatch", {"x": t(2, 3)}, {"x": t(3, 2)}),
        ("dtype_mismatch", {"x": t(2, 3)}, {"x": t(2, 3, dtype=torch.float64)}),
        ("broadcastable_shape", {"x": t(3)}, {"x": t(2, 3)}),
        ("case030_list_vs_empty", {"my_key": [{"key_1": 1}, {"key_2": 2}]}, {"my_key": []}),
        ("case030_empty_vs_list", {"my_key": []}, {"my_key": [{"key_1": 1}, {"key_2": 2}]}),
        ("dtensor_same_local_shape", {"d": dt(t(4, 2))}, {"d": dt(t(4, 2, start=50))}),
        ("dtensor_local_shape_differs", {"d": dt(t(4, 2))}, {"d": dt(t(2, 2))}),
        ("dtensor_local_dtype_differs", {"d": dt(t(4, 2))},
         {"d": dt(t(4, 2, dtype=torch.float64))}),
        ("dtensor_vs_none", {"d": dt(t(4, 2))}, {"d": None}),
        ("dtensor_vs_tensor", {"d": dt(t(4, 2))}, {"d": t(4, 2)}),
        ("tensor_vs_dtensor", {"d": t(4, 2)}, {"d": dt(t(4, 2))}),
    ]


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")
    mesh = init_device_mesh("cpu", (1,))
    golden = {"torch_version": torch.__version__}

    companion = []
    for name, src, dst in companion_cases(mesh):
        entry = {"name": name, "src": encode(src), "dst": encode(dst)}
        dst_copy = copy.deepcopy(dst)
        result, error = outcome(lambda: _copy_state_dict(src, dst_copy))
        entry["copy_raises"] = error
        if error is None:
            entry["copy_result"] = encode(result)
        probe = copy.deepcopy(dst)
        similar, error = outcome(lambda: _check_state_dict_similarity(src, probe))
        entry["similar"] = similar
        entry["similar_raises"] = error
        entry["similarity_wrote_into_b"] = encode(probe) != encode(dst)
        companion.append(entry)
    golden["companion"] = companion

    sd = {"tensor1": t(10), "tensor2": torch.ones(10), "nested": {"l": [t(2), (t(1), 3)]}, "n": 7}
    golden["ranks_only"] = [
        {"rank": 0, "ranks_only": list(ranks), "input": encode(sd),
         "result": encode(_offload_state_dict_to_cpu(sd, ranks_only=ranks))}
        for ranks in [(), (0,), (1,), (0, 2), (1, 3)]
    ]

    offload_in = {"t": (t(2), 20), "l": [None, 5], "b": b"\x00\x01", "s": "str", "f": 1.5,
                  "io": io.BytesIO(b"abc"), "d": DTensor.from_local(t(4, 2), mesh, [Shard(0)])}
    offload_out = _offload_state_dict_to_cpu(offload_in)
    golden["offload"] = [{"input": encode(offload_in), "result": encode(offload_out),
                          "tensor_aliases_input": offload_out["t"][0] is offload_in["t"][0],
                          "bytesio_is_input": offload_out["io"] is offload_in["io"]}]

    create_in = {
        "a": torch.zeros(0), "b": torch.zeros(4, 0), "c": torch.tensor(3.5),
        "d": t(2, 3), "e": t(3, dtype=torch.int64), "g": t(5, dtype=torch.bfloat16),
        "strided": t(3, 9)[:, 2:6], "meta": torch.empty(2, 2, device="meta"),
        "dt": DTensor.from_local(t(4, 2), mesh, [Shard(0)]),
        "dt0": DTensor.from_local(torch.tensor(2.5), mesh, [Replicate()]),
        "nested": {"x": [t(2), 1], "tp": (t(1), "s")}, "io": io.BytesIO(b"abc"),
    }
    golden["create_cpu"] = []
    for share in (False, True):
        out = _create_cpu_state_dict(create_in, share_memory=share)
        leaves = []

        def walk(path, v, src):
            if isinstance(v, dict):
                for k in v:
                    walk(path + [k], v[k], src[k])
            elif isinstance(v, (list, tuple)):
                for i, x in enumerate(v):
                    walk(path + [str(i)], x, src[i])
            elif isinstance(v, torch.Tensor):
                local = v.to_local() if isinstance(v, DTensor) else v
                leaves.append({
                    "path": ".".join(path),
                    "kind": "dtensor" if isinstance(v, DTensor) else "tensor",
                    "dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape),
                    "local_shape": list(local.shape), "device": str(local.device),
                    "contiguous": local.is_contiguous(), "is_shared": local.is_shared(),
                    "value": local.item() if local.dim() == 0 else None,
                    "is_input": v is src})
            else:
                leaves.append({"path": ".".join(path), "kind": type(v).__name__,
                               "is_input": v is src})

        walk([], out, create_in)
        golden["create_cpu"].append({"share_memory": share, "input": encode(create_in),
                                     "leaves": leaves})

    dist.destroy_process_group()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
