"""Golden data for FP8 destinations of a weight map (issue 30): a Hugging Face Llama layer's
bfloat16 weights quantized into vLLM-style tensor-parallel FP8 buffers, from PyTorch.

Run by hand (never in CI), from the repository root, with a virtualenv holding torch:
    VENV/bin/python tests/golden/make_fp8_map_golden.py
Writes tests/data/fp8_map/expected.json (the torch version that made it is recorded).

The layer: hidden 300 (the column blocks 128, 128, 44), head size 128, 4 query heads and 2
kv heads (q_proj 512 x 300, k_proj and v_proj 256 x 300), intermediate 512 (gate_proj and
up_proj 512 x 300, down_proj 300 x 512), o_proj 300 x 512. Its sources are made by a formula
the C++ test repeats exactly (no data to ship): tensor t (q, k, v, gate, up, o, down = 0..6),
element i (row-major) of a [rows, cols] tensor:
    u = (i * 2654435761 + t * 40503 + 12345) mod 2^32
    m = (u >> 8) - 2^23                       (an integer in [-2^23, 2^23))
    e = ((row // 128) * 3 + (col // 128) * 5 + t) mod 9 - 4
    x = m * 2^(e - 23) as float32 (exact), then .to(bfloat16)
so each 128 x 128 block has its own magnitude, and up_proj's block (0, 0) is all zero (scale
1). "source_fnv" holds the FNV-1a 64 of each source's bfloat16 bytes, so the test checks its
generator first.

Destinations per tp rank r (tp 1, 2, 4; the C++ test runs tp = the world size):
  qkv_proj     [its q heads; its k heads; its v heads] (tp 4: kv head r // 2 replicated)
  gate_up_proj [its rows of gate; its rows of up]
  o_proj, down_proj  their columns [r * 512 / tp, (r + 1) * 512 / tp)  (Shard(1))
each in float8_e4m3fn (or e5m2) with its scales, by the recipe of make_fp8_quant_golden.py
(quantize(), imported): "block" cases quantize each SOURCE tensor by its own global 128 x 128
blocks and the rank's codes and scales are the rows (columns) of blocks its piece holds, in
the fused order; "tensor" cases have one scale per destination tensor: the amax over all of
it (for qkv_proj over q, k and v together), the codes made with it, the scale a [1] tensor.
Per case, rank and destination: "codes_fnv" (FNV-1a 64 of the codes' bytes, hex), "codes_shape",
"scales" (the scales' raw values: float32 bits as integers, or e8m0 bytes) and "scales_shape".

"megatron_fnv": the FNV-1a 64 of the same layer as a Megatron trainer holds it (linear_qkv,
[2 q heads of group g; k head g; v head g] for the 2 groups, and linear_fc1, [gate; up]):
regrouped straight into the FP8 buffers, they give the same codes and scales, since each
128-row block of linear_qkv is one of q, k or v's.

"dequant_cases", the other way: each source quantized alone by the same recipe (an FP8
checkpoint, "inputs": its codes' FNV and its scales, so the test checks what it made), then
dequantized, (q.float() * scale).to(bfloat16), into the same vLLM layouts in bfloat16:
per rank and destination "values_fnv".
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fp8_quant_golden import quantize  # noqa: E402

OUT = os.path.join("tests", "data", "fp8_map")
HIDDEN, HEAD, NQ, NKV, INTER = 300, 128, 4, 2, 512
SHAPES = {
    "q_proj": (NQ * HEAD, HIDDEN), "k_proj": (NKV * HEAD, HIDDEN),
    "v_proj": (NKV * HEAD, HIDDEN), "gate_proj": (INTER, HIDDEN), "up_proj": (INTER, HIDDEN),
    "o_proj": (HIDDEN, NQ * HEAD), "down_proj": (HIDDEN, INTER),
}
ORDER = ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "o_proj", "down_proj"]
FP8 = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
CASES = [("block_f32", "e4m3fn", 128, "f32"), ("block_e8m0", "e4m3fn", 128, "e8m0"),
         ("block_f32_e5m2", "e5m2", 128, "f32"), ("tensor_f32", "e4m3fn", 0, "f32")]


def source(t, rows, cols):
    i = torch.arange(rows * cols, dtype=torch.int64)
    u = (i * 2654435761 + t * 40503 + 12345) % (1 << 32)
    m = (u >> 8) - (1 << 23)
    r, c = i // cols, i % cols
    e = ((r // 128) * 3 + (c // 128) * 5 + t) % 9 - 4
    x = (m.to(torch.float64) * torch.pow(2.0, (e - 23).to(torch.float64))).to(torch.float32)
    x = x.reshape(rows, cols)
    if t == ORDER.index("up_proj"):
        x[:128, :128] = 0
    return x.to(torch.bfloat16)


def fnv(t):
    h = 0xcbf29ce484222325
    for b in t.contiguous().view(torch.uint8).flatten().tolist():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return format(h, "016x")


def raw(scales):
    if scales.dtype == torch.float32:
        return scales.contiguous().view(torch.int32).flatten().tolist()
    return scales.contiguous().view(torch.uint8).flatten().tolist()


def rows_of(tp, r, n_heads):
    """The rows of a component of n_heads heads that rank r holds (kv replication)."""
    if n_heads >= tp:
        per = n_heads // tp
        return r * per * HEAD, (r + 1) * per * HEAD
    head = r // (tp // n_heads)
    return head * HEAD, (head + 1) * HEAD


def entry(codes, scales):
    return {"codes_fnv": fnv(codes), "codes_shape": list(codes.shape),
            "scales": raw(scales), "scales_shape": list(scales.shape)}


def case(src, name, fp8n, block, fmt, tp):
    fp8 = FP8[fp8n]
    fused = {"qkv_proj": [("q_proj", NQ), ("k_proj", NKV), ("v_proj", NKV)],
             "gate_up_proj": [("gate_proj", None), ("up_proj", None)]}
    if block:
        q = {k: quantize(src[k], fp8, block, fmt) for k in ORDER}  # codes, stored scales
    else:
        q = {}
        for dest, parts in fused.items():
            whole = torch.cat([src[k] for k, _ in parts])
            codes, stored, _, _ = quantize(whole, fp8, 0, fmt)
            at = 0
            for k, _ in parts:
                q[k] = (codes[at:at + src[k].shape[0]], stored)
                at += src[k].shape[0]
        for k in ("o_proj", "down_proj"):
            q[k] = quantize(src[k], fp8, 0, fmt)[:2]
    ranks = []
    for r in range(tp):
        mine = {}
        for dest, parts in fused.items():
            codes, scales = [], []
            for k, heads in parts:
                n = src[k].shape[0]
                a, b = rows_of(tp, r, heads) if heads else (r * n // tp, (r + 1) * n // tp)
                codes.append(q[k][0][a:b])
                if block:
                    scales.append(q[k][1][a // block:(b + block - 1) // block])
            scale = torch.cat(scales) if block else q[parts[0][0]][1].reshape(1)
            mine[dest] = entry(torch.cat(codes), scale)
        for k in ("o_proj", "down_proj"):
            n = src[k].shape[1]
            a, b = r * n // tp, (r + 1) * n // tp
            scale = q[k][1][:, a // block:(b + block - 1) // block] if block else q[k][1].reshape(1)
            mine[k] = entry(q[k][0][:, a:b], scale)
        ranks.append(mine)
    return {"name": f"{name}_tp{tp}", "fp8": fp8n, "block": block, "scale_format": fmt,
            "tp": tp, "ranks": ranks}


def dequant_case(src, name, fp8n, block, fmt, tp):
    """An FP8 checkpoint (each source quantized by its own blocks, or per tensor) loaded or
    synced into vLLM's bfloat16 layout: dequantized = (q.float() * scale).to(bfloat16),
    then cut and fused as the bfloat16 layout is."""
    fp8 = FP8[fp8n]
    inputs, deq = {}, {}
    for k in ORDER:
        q, stored, d, _ = quantize(src[k], fp8, block, fmt)
        inputs[k] = {"codes_fnv": fnv(q), "scales": raw(stored), "scales_shape": list(stored.shape)}
        deq[k] = d
    ranks = []
    for r in range(tp):
        mine = {}
        for dest, parts in (("qkv_proj", [("q_proj", NQ), ("k_proj", NKV), ("v_proj", NKV)]),
                            ("gate_up_proj", [("gate_proj", None), ("up_proj", None)])):
            rows = []
            for k, heads in parts:
                n = deq[k].shape[0]
                a, b = rows_of(tp, r, heads) if heads else (r * n // tp, (r + 1) * n // tp)
                rows.append(deq[k][a:b])
            mine[dest] = {"values_fnv": fnv(torch.cat(rows))}
        for k in ("o_proj", "down_proj"):
            n = deq[k].shape[1]
            mine[k] = {"values_fnv": fnv(deq[k][:, r * n // tp:(r + 1) * n // tp])}
        ranks.append(mine)
    return {"name": f"dequant_{name}_tp{tp}", "fp8": fp8n, "block": block, "scale_format": fmt,
            "tp": tp, "inputs": inputs, "ranks": ranks}


def megatron(src):
    """The layer as a Megatron trainer holds it: linear_qkv ([q heads of group g; k head g;
    v head g] for each of the NKV groups) and linear_fc1 ([gate; up])."""
    per = NQ // NKV
    q = src["q_proj"].view(NKV, per * HEAD, HIDDEN)
    k = src["k_proj"].view(NKV, HEAD, HIDDEN)
    v = src["v_proj"].view(NKV, HEAD, HIDDEN)
    qkv = torch.cat([q, k, v], 1).reshape(-1, HIDDEN)
    return {"linear_qkv": qkv, "linear_fc1": torch.cat([src["gate_proj"], src["up_proj"]])}


def main():
    src = {k: source(t, *SHAPES[k]) for t, k in enumerate(ORDER)}
    cases = [case(src, n, f, b, s, tp) for n, f, b, s in CASES for tp in (1, 2, 4)]
    dequant = [dequant_case(src, n, f, b, s, tp) for n, f, b, s in CASES for tp in (1, 2, 4)]
    doc = {"torch_version": torch.__version__, "hidden": HIDDEN, "head_size": HEAD,
           "shapes": {k: list(v) for k, v in SHAPES.items()},
           "source_fnv": {k: fnv(src[k]) for k in ORDER},
           "megatron_fnv": {k: fnv(t) for k, t in megatron(src).items()}, "cases": cases,
           "dequant_cases": dequant}
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "expected.json")
    with open(path, "w") as fh:
        json.dump(doc, fh, separators=(",", ":"))
        fh.write("\n")
    print("wrote", path, os.path.getsize(path), "bytes,", len(cases), "cases, torch",
          torch.__version__)


if __name__ == "__main__":
    main()
