#!/usr/bin/env python3
"""Golden data for sdrt's inference-engine weight layouts: how a vLLM-style tensor-parallel
rank and a Megatron-style checkpoint arrange the weights of a Hugging Face Llama, written
with plain PyTorch tensor ops.

Run BY HAND (never in CI) with PyTorch, from the repository root:

    VENV/bin/python tests/golden/make_weight_map_golden.py

VENV is a virtualenv with torch (tests/golden/README.md gives the install line).

A tiny Llama: hidden 8, head size 4, 24 query heads, intermediate 48, vocab 70 padded to a
multiple of 64 (128 rows). Each case has its own seed (the CRC-32 of its name) and the six
Hugging Face source tensors q_proj, k_proj, v_proj, gate_proj, up_proj and embed_tokens.
Every element of a case's sources is distinct in the dtype the layouts are built in, so a
row taken from the wrong place cannot match by chance: bfloat16 sources are a seeded draw
without repetition from the 4,096 bfloat16 values of magnitude in [2^-8, 2^8); the float32
sources of the "_cast" cases are those values each nudged by a random relative amount under
2^-10 (so they are long-mantissa float32 numbers, distinct, that round both up and down, to
the nearest bfloat16 which is again a distinct value).

Kinds of case:
  - "vllm", for tp in {1, 2, 3, 4, 8} and 1, 2 or 8 KV heads where one divides the other:
    per rank r its local qkv_proj (cat of its query heads, then its key and value heads:
    its share of the KV heads when there are at least tp of them, else the one KV head
    r // (tp // num_kv_heads), several ranks holding the same one), gate_up_proj (its
    chunk of gate_proj, then its chunk of up_proj) and embed_tokens (the table padded with
    zero rows to 128, then torch.chunk's piece r, DTensor Shard(0)'s cut: 43, 43, 42 rows
    for tp 3). Two "_cast" cases have float32 sources, their layouts built in float32 and
    then cast with .to(torch.bfloat16). Every vllm case's sources also hold its weights as a
    Megatron trainer does, linear_qkv and linear_fc1 (as the "megatron" cases below), for the
    regroup straight from those into the vLLM layouts.
  - "megatron", for 1, 2 or 8 KV heads: the whole linear_qkv (per query group g: the group's
    query heads, key head g, value head g; the groups in order) and linear_fc1 (gate_proj,
    then up_proj).

Output: tests/data/weight_map/expected.json, compact JSON: the model dims, torch_version and
"cases"; tensors as {"type": "tensor", "dtype", "shape", "hex"} (golden_encode.encode_tensor,
the format tests/support/golden_codec.h decodes). Before writing, the script checks each
layout against a second construction by row indices and stops if they differ. The output is
the same bytes on every run.
"""
import json
import sys
import zlib
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_encode import encode_tensor  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "data" / "weight_map" / "expected.json"

HIDDEN = 8
HEAD = 4
NQ = 24
INTER = 48
VOCAB = 70
PAD_MULTIPLE = 64
VOCAB_PADDED = -(-VOCAB // PAD_MULTIPLE) * PAD_MULTIPLE  # 128

TPS = (1, 2, 3, 4, 8)
KVS = (1, 2, 8)
CAST_CASES = ((2, 2), (4, 1))  # (tp, num_kv_heads) with float32 sources

SOURCE_NAMES = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "embed_tokens")


def source_shapes(nkv):
    return {
        "q_proj": (NQ * HEAD, HIDDEN),
        "k_proj": (nkv * HEAD, HIDDEN),
        "v_proj": (nkv * HEAD, HIDDEN),
        "gate_proj": (INTER, HIDDEN),
        "up_proj": (INTER, HIDDEN),
        "embed_tokens": (VOCAB, HIDDEN),
    }


def distinct_bf16_pool():
    """Every bfloat16 value with magnitude in [2^-8, 2^8), ascending, as float32."""
    # bfloat16 codes 0x3b80 (2^-8) up to 0x437f (just under 2^8), both signs.
    pos = torch.arange(0x3B80, 0x4380, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    pos = pos.to(torch.float32)
    return torch.cat([-pos.flip(0), pos])


def make_sources(name, nkv, source_dtype):
    """The case's six source tensors in source_dtype, every element distinct (see above)."""
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    shapes = source_shapes(nkv)
    total = sum(r * c for r, c in shapes.values())
    pool = distinct_bf16_pool()
    assert total <= pool.numel()
    flat = pool[torch.randperm(pool.numel(), generator=gen)[:total]]  # float32, exact bf16
    if source_dtype == torch.float32:
        u = torch.rand(total, generator=gen, dtype=torch.float64) * 2 - 1
        nudged = (flat.double() * (1 + u * 2.0 ** -10)).to(torch.float32)
        # Each still rounds to its own bfloat16 value.
        assert torch.equal(nudged.to(torch.bfloat16).to(torch.float32), flat)
        flat = nudged
    else:
        flat = flat.to(source_dtype)
    out, at = {}, 0
    for key in SOURCE_NAMES:
        r, c = shapes[key]
        out[key] = flat[at:at + r * c].reshape(r, c).clone()
        at += r * c
    return out


def by_heads(w, heads):
    """[heads * HEAD, HIDDEN] -> [heads, HEAD, HIDDEN]."""
    return w.view(heads, HEAD, HIDDEN)


def rows(w3):
    """[n, HEAD, HIDDEN] -> [n * HEAD, HIDDEN]."""
    return w3.reshape(-1, HIDDEN)


def vllm_rank(src, tp, nkv, r):
    q = by_heads(src["q_proj"], NQ).chunk(tp, 0)[r]
    if nkv % tp == 0:
        k = by_heads(src["k_proj"], nkv).chunk(tp, 0)[r]
        v = by_heads(src["v_proj"], nkv).chunk(tp, 0)[r]
    else:
        assert tp % nkv == 0
        head = r // (tp // nkv)
        k = by_heads(src["k_proj"], nkv).narrow(0, head, 1)
        v = by_heads(src["v_proj"], nkv).narrow(0, head, 1)
    qkv = torch.cat([rows(q), rows(k), rows(v)], 0)
    gate_up = torch.cat([src["gate_proj"].chunk(tp, 0)[r], src["up_proj"].chunk(tp, 0)[r]], 0)
    padded = F.pad(src["embed_tokens"], (0, 0, 0, VOCAB_PADDED - VOCAB))
    embed = torch.chunk(padded, tp, 0)[r]
    return {"qkv_proj": qkv, "gate_up_proj": gate_up, "embed_tokens": embed}


def megatron_fused(src, nkv):
    per_group = NQ // nkv
    q = by_heads(src["q_proj"], NQ).view(nkv, per_group, HEAD, HIDDEN)
    k = by_heads(src["k_proj"], nkv).unsqueeze(1)
    v = by_heads(src["v_proj"], nkv).unsqueeze(1)
    qkv = torch.cat([q, k, v], 1).reshape(-1, HIDDEN)
    fc1 = torch.cat([src["gate_proj"], src["up_proj"]], 0)
    return {"linear_qkv": qkv, "linear_fc1": fc1}


# ---- A second construction, by row indices, that the layouts above must equal. ----

def ceil_pieces(n, parts):
    size = -(-n // parts)
    return [(min(i * size, n), min((i + 1) * size, n)) for i in range(parts)]


def check_vllm(src, tp, nkv, ranks):
    qh, kvh = NQ // tp, max(nkv // tp, 1)
    pieces = ceil_pieces(VOCAB_PADDED, tp)
    for r, got in enumerate(ranks):
        q_rows = list(range(r * qh * HEAD, (r + 1) * qh * HEAD))
        first_kv = r * kvh if nkv >= tp else r // (tp // nkv)
        kv_rows = list(range(first_kv * HEAD, (first_kv + kvh) * HEAD))
        want = torch.cat([src["q_proj"][q_rows], src["k_proj"][kv_rows], src["v_proj"][kv_rows]])
        assert torch.equal(got["qkv_proj"], want), (tp, nkv, r, "qkv")
        n = INTER // tp
        want = torch.cat([src["gate_proj"][r * n:(r + 1) * n], src["up_proj"][r * n:(r + 1) * n]])
        assert torch.equal(got["gate_up_proj"], want), (tp, nkv, r, "gate_up")
        lo, hi = pieces[r]
        want = torch.zeros(hi - lo, HIDDEN, dtype=src["embed_tokens"].dtype)
        real = max(min(hi, VOCAB) - lo, 0)
        want[:real] = src["embed_tokens"][lo:lo + real]
        assert torch.equal(got["embed_tokens"], want), (tp, nkv, r, "embed")


def check_megatron(src, nkv, fused):
    g_rows = NQ // nkv * HEAD
    parts = []
    for g in range(nkv):
        parts += [src["q_proj"][g * g_rows:(g + 1) * g_rows],
                  src["k_proj"][g * HEAD:(g + 1) * HEAD], src["v_proj"][g * HEAD:(g + 1) * HEAD]]
    assert torch.equal(fused["linear_qkv"], torch.cat(parts)), (nkv, "linear_qkv")
    assert fused["linear_qkv"].shape == ((NQ + 2 * nkv) * HEAD, HIDDEN)
    assert torch.equal(fused["linear_fc1"], torch.cat([src["gate_proj"], src["up_proj"]]))


def vllm_case(tp, nkv, cast):
    name = f"vllm_tp{tp}_kv{nkv}" + ("_cast" if cast else "")
    source_dtype = torch.float32 if cast else torch.bfloat16
    src = make_sources(name, nkv, source_dtype)
    ranks = [vllm_rank(src, tp, nkv, r) for r in range(tp)]
    check_vllm(src, tp, nkv, ranks)
    if cast:
        ranks = [{k: t.to(torch.bfloat16) for k, t in rank.items()} for rank in ranks]
        src16 = {k: t.to(torch.bfloat16) for k, t in src.items()}
        check_vllm(src16, tp, nkv, ranks)  # casting commutes with moving rows
    # The same weights as a Megatron trainer holds them, for the regroup into these layouts.
    fused = megatron_fused(src, nkv)
    check_megatron(src, nkv, fused)
    src = dict(src, **fused)
    return {
        "name": name, "kind": "vllm", "tp": tp, "num_kv_heads": nkv,
        "source_dtype": str(source_dtype).replace("torch.", ""), "dtype": "bfloat16",
        "embed_padded_rows": VOCAB_PADDED,
        "sources": {k: encode_tensor(t) for k, t in src.items()},
        "ranks": [{k: encode_tensor(t) for k, t in rank.items()} for rank in ranks],
    }


def megatron_case(nkv):
    name = f"megatron_kv{nkv}"
    src = make_sources(name, nkv, torch.bfloat16)
    fused = megatron_fused(src, nkv)
    check_megatron(src, nkv, fused)
    return {
        "name": name, "kind": "megatron", "num_kv_heads": nkv,
        "source_dtype": "bfloat16", "dtype": "bfloat16",
        "sources": {k: encode_tensor(t) for k, t in src.items()},
        "fused": {k: encode_tensor(t) for k, t in fused.items()},
    }


def main():
    cases = []
    for tp in TPS:
        for nkv in KVS:
            if nkv % tp == 0 or tp % nkv == 0:
                assert NQ % tp == 0
                cases.append(vllm_case(tp, nkv, cast=False))
    for tp, nkv in CAST_CASES:
        cases.append(vllm_case(tp, nkv, cast=True))
    for nkv in KVS:
        cases.append(megatron_case(nkv))
    golden = {
        "torch_version": torch.__version__, "hidden": HIDDEN, "head_size": HEAD,
        "num_heads": NQ, "intermediate": INTER, "vocab": VOCAB, "pad_multiple": PAD_MULTIPLE,
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {len(cases)} cases with torch "
          f"{torch.__version__}")
    for c in cases:
        print("  " + c["name"])


if __name__ == "__main__":
    main()
