#!/usr/bin/env python3
"""Golden safetensors files of the packed and microscaling dtypes, written by PyTorch.

Run BY HAND (never in CI) with PyTorch and the official safetensors package:

    VENV/bin/python tests/golden/make_subbyte_golden.py

writes into tests/data/subbyte/:

  case055.safetensors  "scale": float8_e8m0fnu [4, 3] and "w": float4_e2m1fn_x2, torch
                       shape [4, 4], which safetensors writes as F4 with header shape [4, 8]
                       (the header counts 4-bit elements: torch's last dim doubled)
  mxfp4.safetensors    gpt-oss's MXFP4 layout for two expert weights: "*.blocks" uint8
                       [E, R, G, 16] (32 packed 4-bit values per block) and "*.scales"
                       [E, R, G] (one exponent per block), uint8 in block.0 and float8_e8m0fnu
                       in block.1, plus a bfloat16 bias
  expected.json        per file and tensor: the header's dtype code and shape, torch's dtype
                       and shape after safetensors.torch.load_file, and the bytes as hex

The bytes are a fixed function of the index (no randomness), so a rerun writes the same files.
"""
import json
import struct
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

OUT_DIR = Path(__file__).resolve().parents[1] / "data" / "subbyte"
E, R, G = 4, 6, 3  # experts, rows, blocks per row: small, and uneven over 4 ranks


def pattern(n, salt):
    """n bytes, byte i = (37 i + salt) mod 256."""
    return torch.tensor([(37 * i + salt) % 256 for i in range(n)], dtype=torch.uint8)


def case055():
    scale = pattern(12, 3).view(torch.float8_e8m0fnu).reshape(4, 3)
    w = pattern(16, 11).view(torch.float4_e2m1fn_x2).reshape(4, 4)
    return {"scale": scale, "w": w}


def mxfp4():
    tensors = {}
    for layer, scale_dtype in ((0, torch.uint8), (1, torch.float8_e8m0fnu)):
        prefix = f"block.{layer}.mlp.mlp1_weight"
        tensors[f"{prefix}.blocks"] = pattern(E * R * G * 16, 5 + layer).reshape(E, R, G, 16)
        scales = pattern(E * R * G, 120 + layer)
        tensors[f"{prefix}.scales"] = scales.view(scale_dtype).reshape(E, R, G)
        tensors[f"block.{layer}.mlp.mlp1_bias"] = (
            torch.arange(E * R, dtype=torch.float32).reshape(E, R) / 4).to(torch.bfloat16)
    return tensors


def describe(path):
    """The header's entries, and what torch loads back, per tensor."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    loaded = load_file(str(path))
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = {
            "dtype": entry["dtype"],
            "shape": entry["shape"],
            "torch_dtype": str(loaded[name].dtype).removeprefix("torch."),
            "torch_shape": list(loaded[name].shape),
            "hex": data[begin:end].hex(),
        }
    return out


def main():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    expected = {"torch": torch.__version__}
    for name, tensors in (("case055.safetensors", case055()), ("mxfp4.safetensors", mxfp4())):
        path = OUT_DIR / name
        save_file(tensors, str(path), metadata={"producer": "make_subbyte_golden.py"})
        expected[name] = describe(path)
        for key, t in tensors.items():  # the bytes torch holds are the bytes written
            assert bytes.fromhex(expected[name][key]["hex"]) == t.view(torch.uint8).numpy().tobytes()
    (OUT_DIR / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {OUT_DIR}")


if __name__ == "__main__":
    main()
