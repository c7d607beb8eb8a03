#!/usr/bin/env python3
"""Golden safetensors files for sdrt's reader, and a checker for files sdrt wrote.

Run BY HAND (never in CI) with PyTorch and the official safetensors package:

    VENV/bin/python tests/golden/make_safetensors_golden.py
        writes tests/data/safetensors/*.safetensors and expected.json
    VENV/bin/python tests/golden/make_safetensors_golden.py --check DIR
        reads the files sdrt's golden test wrote into DIR (SDRT_TEST_TMP/sdrt_written) with
        the official package and compares them bit-exactly with the tensors defined here

VENV is a virtualenv with torch (tests/golden/README.md gives the install line).

The tensors are defined once (GOLDEN below); expected.json holds, for each file, the header
length, the metadata and each tensor's dtype code, shape, data offsets and bytes as hex.
"""
import argparse
import json
import math
import struct
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

OUT_DIR = Path(__file__).resolve().parents[1] / "data" / "safetensors"
CODES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16",
    torch.int32: "I32", torch.int64: "I64", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float32: "F32", torch.float64: "F64", torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
UNALIGNED_HEADER_BYTES = 42_854  # case-045: not a multiple of 8


def dtypes_file():
    """One tensor of every dtype with known values, two 0-dim tensors, metadata."""
    inf = math.inf
    tensors = {
        "bool": torch.tensor([[True, False, True], [True, False, False]]),
        "uint8": torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8),
        "int8": torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8),
        "int16": torch.tensor([-32768, -2, 0, 3, 32767], dtype=torch.int16),
        "int32": (torch.arange(-6, 6, dtype=torch.int32) * 1000003).reshape(3, 4),
        "int64": torch.tensor([-2**63, -1, 0, 2**40 + 5, 2**63 - 1], dtype=torch.int64),
        "float16": torch.tensor([[-1.5, -0.0, 0.375, 65504.0], [inf, -inf, 6e-8, 1.0]],
                                dtype=torch.float16),
        "bfloat16": (torch.arange(6, dtype=torch.float32) * 1.5 - 3).to(torch.bfloat16).reshape(3, 2),
        "float32": (torch.arange(12, dtype=torch.float32) / 3).reshape(2, 3, 2),
        "float64": torch.tensor([math.pi, -math.e, 1e300, 5e-324], dtype=torch.float64),
        "float8_e4m3fn": torch.tensor([0, 0.5, 1, -2, 448, -448, 0.001953125]).to(
            torch.float8_e4m3fn),
        "float8_e5m2": torch.tensor([0, 1, -2, 57344, -inf, 1.52587890625e-05]).to(
            torch.float8_e5m2),
        "scalar_f32": torch.tensor(3.25, dtype=torch.float32),
        "scalar_i64": torch.tensor(-7, dtype=torch.int64),
    }
    return tensors, {"format": "pt", "producer": "make_safetensors_golden.py"}


def empty_file():
    """case-040: several zero-size tensors sharing offsets, beside one with data."""
    return {
        "A": torch.zeros(0, dtype=torch.float32),
        "B": torch.zeros(0, dtype=torch.float32),
        "t": torch.zeros(2, 0, dtype=torch.float32),
        "t2": torch.zeros(2, 0, dtype=torch.float32),
        "c": torch.zeros(0, 3, 1, dtype=torch.int64),
        "d": torch.zeros(0, dtype=torch.bfloat16),
        "e": torch.tensor([5, -6], dtype=torch.int32),
    }, {}


def unaligned_tensors():
    """case-045: bf16 data behind a 42,854-byte header; the data region starts at byte
    42,862 (2 mod 8), so bf16_aligned is 2-aligned and the others sit at odd addresses."""
    return {
        "bf16_aligned": torch.tensor([1.0, -2.5, 3.140625, 0.0078125]).to(torch.bfloat16),
        "u8_odd": torch.tensor([7, 8, 9], dtype=torch.uint8),
        "bf16_unaligned": torch.tensor([0.5, -1.0, 256.0, -0.0, 1e-3]).to(torch.bfloat16),
        "f32_unaligned": torch.tensor([1.5, -2.25, 1e30], dtype=torch.float32),
        "i64_unaligned": torch.tensor([2**62 + 3, -5], dtype=torch.int64),
    }, {"producer": "hand-built by make_safetensors_golden.py"}


GOLDEN = {
    "dtypes.safetensors": dtypes_file,
    "empty.safetensors": empty_file,
    "metadata_only.safetensors": lambda: ({}, {"key": "value"}),
    "unaligned_bf16.safetensors": unaligned_tensors,
}
# Files only sdrt writes (its golden test); the checker knows what they must hold.
SDRT_ONLY = {
    # A [4, 6] float32 arange sliced [:, ::2]: non-contiguous input to the writer.
    "noncontiguous.safetensors": lambda: (
        {"sliced": torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, ::2].contiguous()},
        {"layout": "strided"}),
}


def raw_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def read_header(path):
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return n, json.loads(data[8:8 + n])


def write_unaligned(path):
    """Lays the tensors out in order behind a header padded to exactly 42,854 bytes."""
    tensors, metadata = unaligned_tensors()
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        blob = raw_bytes(t)
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    meta = dict(metadata, padding="")
    base = len(json.dumps({"__metadata__": meta, **header}, separators=(",", ":")))
    meta["padding"] = "x" * (UNALIGNED_HEADER_BYTES - base)
    text = json.dumps({"__metadata__": meta, **header}, separators=(",", ":")).encode()
    assert len(text) == UNALIGNED_HEADER_BYTES
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return dict(metadata, padding=meta["padding"])


def expectation(path, tensors, metadata):
    n, header = read_header(path)
    entries = {}
    for name, t in tensors.items():
        entries[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape),
                         "data_offsets": header[name]["data_offsets"], "hex": raw_bytes(t).hex()}
    return {"header_size": n, "metadata": metadata, "tensors": entries}


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and raw_bytes(a) == raw_bytes(b)


def generate():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    expected = {}
    for file_name, make in GOLDEN.items():
        path = OUT_DIR / file_name
        tensors, metadata = make()
        if file_name == "unaligned_bf16.safetensors":
            metadata = write_unaligned(path)
        else:
            save_file(tensors, str(path), metadata=metadata or None)
        loaded = load_file(str(path))  # the official reader accepts what we wrote
        assert loaded.keys() == tensors.keys(), file_name
        assert all(same_bits(loaded[k], tensors[k]) for k in tensors), file_name
        expected[file_name] = expectation(path, tensors, metadata)
        print(f"wrote {path.relative_to(OUT_DIR.parents[1])}: {len(tensors)} tensors, "
              f"{path.stat().st_size} bytes, header {expected[file_name]['header_size']}")
    (OUT_DIR / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {(OUT_DIR / 'expected.json').relative_to(OUT_DIR.parents[1])}")


def check(directory):
    """Verifies every file sdrt wrote into `directory` with the official package."""
    failures = 0
    for file_name, make in {**GOLDEN, **SDRT_ONLY}.items():
        path = Path(directory) / file_name
        tensors, metadata = make()
        if file_name == "unaligned_bf16.safetensors":
            metadata = json.loads((OUT_DIR / "expected.json").read_text())[file_name]["metadata"]
        problems = []
        if not path.exists():
            problems.append("missing")
        else:
            n, header = read_header(path)
            if n % 8 != 0:
                problems.append(f"header length {n} is not a multiple of 8")
            with safe_open(str(path), framework="pt") as f:
                if (f.metadata() or {}) != metadata:
                    problems.append(f"metadata {f.metadata()} != {metadata}")
                if set(f.keys()) != set(tensors):
                    problems.append(f"names {sorted(f.keys())} != {sorted(tensors)}")
                for name in set(f.keys()) & set(tensors):
                    if not same_bits(f.get_tensor(name), tensors[name]):
                        problems.append(f"tensor {name} differs")
            if not tensors and path.read_bytes()[8:].rstrip(b" ") != json.dumps(
                    {"__metadata__": metadata}, separators=(",", ":")).encode():
                problems.append("metadata-only header is not the reference's bytes")
        failures += bool(problems)
        print(f"{'FAIL' if problems else 'OK'}   {file_name}: {len(tensors)} tensors"
              + ("".join(f"\n       {p}" for p in problems)))
    print(f"{failures} of {len(GOLDEN) + len(SDRT_ONLY)} files failed")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", metavar="DIR", help="verify the files sdrt wrote in DIR")
    args = parser.parse_args()
    if args.check:
        sys.exit(check(args.check))
    generate()


if __name__ == "__main__":
    main()
