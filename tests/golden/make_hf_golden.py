#!/usr/bin/env python3
"""A Hugging Face checkpoint folder made by huggingface_hub for sdrt's reader, what
huggingface_hub makes of the same tensors in the order sdrt reads them, and a checker for
folders `sdrt gather` wrote.

Run BY HAND (never in CI) with PyTorch, safetensors, huggingface_hub and xxhash:

    VENV/bin/python tests/golden/make_hf_golden.py
        writes tests/data/hf/golden/ (save_torch_state_dict, max_shard_size="4KB": three
        files and model.safetensors.index.json) and tests/data/hf/expected.json
    VENV/bin/python tests/golden/make_hf_golden.py --check DIR
        reads DIR, written by `mpiexec -n N sdrt gather CKPT DIR/ --max-shard-size 4KB`
        from a sharded checkpoint of tests/data/hf/golden, with safe_open (as transformers
        reads an index) and with huggingface_hub.load_torch_model, and compares every tensor
        bit-exactly with the ones defined here, the file names and the index with
        expected.json's "gathered" (without --max-shard-size: the one model.safetensors)

VENV is a virtualenv (tests/golden/README.md gives the install line).

expected.json holds, per tensor (in the state dict's order), its safetensors dtype code,
shape, xxh64 (seed 0, of the contiguous little-endian bytes: what sdrt's index.json
records) and sha256; the golden folder's file names; "sdrt_order", the tensors as sdrt
reads the folder (files by name, each file's tensors by data offset); and "gathered": what
huggingface_hub's save_torch_state_dict writes for the state dict in sdrt_order with the
same max_shard_size (its file names, each file's tensors, the index text byte for byte),
which is what `sdrt gather` must write.
"""
import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import huggingface_hub
import safetensors
import torch
import xxhash
from huggingface_hub import load_torch_model, save_torch_state_dict
from safetensors import safe_open

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "hf"
GOLDEN_DIR = DATA_DIR / "golden"
MAX_SHARD_SIZE = "4KB"  # 4,000 bytes: three files, and lm_head.weight (5,120 bytes) alone
INDEX = "model.safetensors.index.json"
CODES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int64: "I64",
    torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64",
}


def values(shape, dtype, salt):
    """Deterministic values: an affine function of the element index, reduced."""
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        t = (i * 7 + salt) % 3 == 0
    elif dtype in (torch.uint8, torch.int8, torch.int64):
        lo, hi = {torch.uint8: (0, 256), torch.int8: (-128, 128), torch.int64: (-2**40, 2**40)}[dtype]
        t = ((i * 2654435761 + salt * 97) % (hi - lo) + lo).to(dtype)
    else:
        t = (((i * 37 + salt * 11) % 1001).to(torch.float64) / 250.0 - 2.0).to(dtype)
    return t.reshape(shape)


def golden_state_dict():
    """KB-sized tensors of eight dtypes, a 0-dim and an empty one."""
    spec = [
        ("embed.weight", (32, 16), torch.float32),
        ("layers.0.attn.q.weight", (16, 16), torch.bfloat16),
        ("layers.0.attn.q.bias", (16,), torch.bfloat16),
        ("layers.0.mlp.up.weight", (40, 16), torch.float16),
        ("layers.0.mlp.down.weight", (16, 40), torch.float32),
        ("layers.0.norm.weight", (16,), torch.float32),
        ("lm_head.weight", (80, 16), torch.float32),
        ("position_ids", (1, 32), torch.int64),
        ("mask", (4, 8), torch.bool),
        ("scale", (), torch.float64),
        ("quant.weight", (24, 16), torch.int8),
        ("empty.bias", (0,), torch.float32),
        ("layers.0.attn.k.codes", (8, 8), torch.uint8),
    ]
    return {name: values(shape, dtype, salt) for salt, (name, shape, dtype) in enumerate(spec)}


def tensor_bytes(t):
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def describe(t):
    data = tensor_bytes(t)
    return {"dtype": CODES[t.dtype], "shape": list(t.shape),
            "xxh64": xxhash.xxh64(data, seed=0).hexdigest(),
            "sha256": hashlib.sha256(data).hexdigest()}


def read_order(folder):
    """The tensor names as sdrt reads `folder`: files by name, tensors by data offset."""
    names = []
    for path in sorted(Path(folder).glob("*.safetensors")):
        raw = path.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        header.pop("__metadata__", None)
        # Stable: tensors sharing an offset (empty ones) keep the header order, as in sdrt.
        names += sorted(header, key=lambda k: header[k]["data_offsets"][0])
    return names


def saved_layout(folder):
    """(file names, {file: tensors in order}, index text or None) of a saved folder."""
    files = sorted(p.name for p in Path(folder).glob("*.safetensors"))
    index = Path(folder) / INDEX
    text = index.read_text() if index.exists() else None
    per_file = {f: [] for f in files}
    if text is not None:
        for tensor, f in json.loads(text)["weight_map"].items():
            per_file[f].append(tensor)
    else:
        per_file[files[0]] = read_order(folder)
    return files, per_file, text


def make():
    state_dict = golden_state_dict()
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for p in GOLDEN_DIR.iterdir():
        p.unlink()
    save_torch_state_dict(state_dict, GOLDEN_DIR, max_shard_size=MAX_SHARD_SIZE)
    golden_files, _, _ = saved_layout(GOLDEN_DIR)
    order = read_order(GOLDEN_DIR)
    with tempfile.TemporaryDirectory() as tmp:
        save_torch_state_dict({k: state_dict[k] for k in order}, tmp, max_shard_size=MAX_SHARD_SIZE)
        files, per_file, text = saved_layout(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        save_torch_state_dict(state_dict, tmp)  # the default 5GB: one file, no index
        one_file = sorted(p.name for p in Path(tmp).iterdir())
    expected = {
        "generator": "tests/golden/make_hf_golden.py",
        "versions": {"torch": torch.__version__, "safetensors": safetensors.__version__,
                     "huggingface_hub": huggingface_hub.__version__},
        "max_shard_size": MAX_SHARD_SIZE,
        "tensors": [{"name": k, **describe(t)} for k, t in state_dict.items()],
        "total_size": sum(t.numel() * t.element_size() for t in state_dict.values()),
        "golden_files": golden_files,
        "sdrt_order": order,
        "gathered": {"files": files, "file_tensors": per_file, "index": text},
        "one_file": one_file,
    }
    (DATA_DIR / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {GOLDEN_DIR} ({', '.join(golden_files)}) and {DATA_DIR / 'expected.json'}")
    print(f"gathered layout: {files}")


def module_for(state_dict):
    """A torch.nn.Module whose state dict has exactly these names, shapes and dtypes
    (buffers in nested submodules), zero-filled."""
    root = torch.nn.Module()
    for name, t in state_dict.items():
        *path, leaf = name.split(".")
        m = root
        for part in path:
            if not hasattr(m, part):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        m.register_buffer(leaf, torch.zeros(t.shape, dtype=t.dtype))
    return root


def check(folder):
    expected = json.loads((DATA_DIR / "expected.json").read_text())
    want = golden_state_dict()
    failures = []

    def expect(ok, what):
        print(("OK   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    files, per_file, text = saved_layout(folder)
    if text is None:  # gathered with the default 5GB: huggingface_hub's one file, no index
        expect(files == expected["one_file"], f"file names {files}, no index")
        shard_files = files
    else:
        expect(files == expected["gathered"]["files"], f"file names {files}")
        expect(per_file == expected["gathered"]["file_tensors"], "each file's tensors")
        expect(text == expected["gathered"]["index"], f"{INDEX} byte for byte as huggingface_hub's")
        # As transformers reads a sharded checkpoint: the index, then safe_open per file.
        index = json.loads(text)
        expect(index["metadata"]["total_size"] == expected["total_size"], "metadata.total_size")
        shard_files = sorted(set(index["weight_map"].values()))
    got = {}
    for name in shard_files:
        with safe_open(str(Path(folder) / name), framework="pt") as f:
            expect((f.metadata() or {}).get("format") == "pt", f"{name}: __metadata__ format pt")
            for k in f.keys():
                got[k] = f.get_tensor(k)
    expect(sorted(got) == sorted(want), f"safe_open: {len(got)} tensors, the names")
    bad = [k for k in want if k in got and (got[k].dtype != want[k].dtype or
                                            got[k].shape != want[k].shape or
                                            tensor_bytes(got[k]) != tensor_bytes(want[k]))]
    expect(not bad, "safe_open: every tensor bit-exact" + (f" {bad}" if bad else ""))
    # huggingface_hub's own loader, strict: every name of the model is in the checkpoint.
    model = module_for(want)
    result = load_torch_model(model, folder, strict=True)
    loaded = model.state_dict()
    expect(not result.missing_keys and not result.unexpected_keys, "load_torch_model strict")
    bad = [k for k in want if tensor_bytes(loaded[k]) != tensor_bytes(want[k])]
    expect(not bad, "load_torch_model: every tensor bit-exact" + (f" {bad}" if bad else ""))
    print(f"{len(failures)} check(s) failed")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", metavar="DIR", help="a folder written by sdrt gather")
    args = parser.parse_args()
    if args.check:
        sys.exit(check(args.check))
    make()


if __name__ == "__main__":
    main()
