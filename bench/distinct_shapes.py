#!/usr/bin/env python3
"""Rewrites a header-only description (`sdrt make --header-only`) so that every tensor's
shape is distinct: dim 0 of tensor i (in file order) grows by i + 1. The planner's worst
case: no two tensors share a layout plan. Used for bench/RESULTS.md, "Planning the whole
world": python3 bench/distinct_shapes.py IN OUT."""
import json
import struct
import sys

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "F8_E4M3": 1, "U8": 1}


def main(src, dst):
    with open(src, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {})
    if meta.get("sdrt.header_only") != "true":
        sys.exit(f"{src}: not a header-only description")
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    offset = 0
    out = {"__metadata__": meta}
    for i, name in enumerate(names):
        entry = dict(header[name])
        shape = list(entry["shape"])
        if shape:
            shape[0] += i + 1
        count = 1
        for s in shape:
            count *= s
        size = count * SIZES[entry["dtype"]]
        entry["shape"] = shape
        entry["data_offsets"] = [offset, offset + size]
        offset += size
        out[name] = entry
    text = json.dumps(out, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
