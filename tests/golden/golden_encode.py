"""The shared golden encoding (tests/support/golden_codec.h) for the golden scripts here.

Imported by make_iterate_golden.py and make_state_dict_golden.py, which are run BY HAND
from the repository root (`VENV/bin/python tests/golden/<script>.py`, where VENV is a virtualenv
with torch: tests/golden/README.md); Python puts this folder on the import path.
"""
import math

import torch
from torch.distributed.tensor import DTensor


def encode_tensor(t):
    out = {"type": "tensor", "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
    if t.device.type == "meta":
        out["device"] = "meta"
        return out
    out["hex"] = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes().hex()
    return out


def encode(v):
    if v is None:
        return {"type": "none"}
    if isinstance(v, bool):
        return {"type": "bool", "value": v}
    if isinstance(v, int):
        return {"type": "int", "value": v}
    if isinstance(v, float):
        if math.isnan(v):
            return {"type": "float", "value": "nan"}
        if math.isinf(v):
            return {"type": "float", "value": "inf" if v > 0 else "-inf"}
        return {"type": "float", "value": v}
    if isinstance(v, str):
        return {"type": "str", "value": v}
    if isinstance(v, bytes):
        return {"type": "bytes", "hex": v.hex()}
    if isinstance(v, DTensor):
        return {
            "type": "dtensor",
            "mesh_shape": list(v.device_mesh.shape),
            "placements": "[" + ", ".join(str(p) for p in v.placements) + "]",
            "global_shape": list(v.shape),
            "global_stride": list(v.stride()),
            "local": encode_tensor(v.to_local()),
        }
    if isinstance(v, torch.Tensor):
        return encode_tensor(v)
    if isinstance(v, list):
        return {"type": "list", "items": [encode(x) for x in v]}
    if isinstance(v, tuple):
        return {"type": "tuple", "items": [encode(x) for x in v]}
    if isinstance(v, dict):
        for k in v:
            assert type(k) in (str, int), f"golden dict keys are str or int, not {k!r}"
        return {"type": "dict", "items": [[k, encode(x)] for k, x in v.items()]}
    return {"type": "object", "name": type(v).__name__}


def arange_tensor(*shape, dtype=torch.float32, start=0):
    """start, start + 1, ... in `shape`, computed in float64 and converted to `dtype`."""
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float64) + start).to(dtype).reshape(shape)
