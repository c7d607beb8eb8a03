"""Records what the official safetensors package reports for all-MiniLM-L6-v2.

Run by hand, never in CI (VENV: a virtualenv with torch; tests/golden/README.md):
    VENV/bin/python tests/golden/record_minilm.py "$(scripts/fetch-model.sh | tail -1)"
Writes tests/data/minilm_expected.json: tensor count, parameter total, byte total, and
each tensor's dtype and shape, which `sdrt inspect` must reproduce.
"""
import json
import os
import sys

from safetensors import safe_open

path = sys.argv[1]
tensors = []
with safe_open(path, framework="pt") as f:
    metadata = f.metadata() or {}
    for name in f.keys():
        sl = f.get_slice(name)
        shape = list(sl.get_shape())
        numel = 1
        for s in shape:
            numel *= s
        t = f.get_tensor(name)
        tensors.append({"name": name, "dtype": sl.get_dtype(), "shape": shape,
                        "numel": numel, "nbytes": t.element_size() * numel})
tensors.sort(key=lambda t: t["name"])
out = {
    "file_size": os.path.getsize(path),
    "tensors": len(tensors),
    "parameters": sum(t["numel"] for t in tensors),
    "bytes": sum(t["nbytes"] for t in tensors),
    "metadata": metadata,
    "entries": tensors,
}
dest = os.path.join(os.path.dirname(__file__), "..", "data", "minilm_expected.json")
with open(dest, "w") as fh:
    json.dump(out, fh, indent=1, sort_keys=True)
    fh.write("\n")
print(f"{out['tensors']} tensors, {out['parameters']} parameters, {out['bytes']} bytes -> {dest}")
