#!/usr/bin/env python3
"""Python peer of bench/load_bench.cc: N processes load their pieces of the same safetensors
file with safetensors' `get_slice`, as a PyTorch job without sdrt would.

Run by hand (not part of the build or the tests), right after the sdrt run on the same file:

    VENV/bin/python bench/peer/load_peer.py --file F --plan fsdp|tp --ranks N [--repeat K]
        [--warmup W] [--json PATH] [--no-clone]

VENV is a virtualenv with torch (the CPU wheel is enough) and safetensors.

Each process, every repetition: opens the file with `safe_open(F, "pt")` (outside the timed
region, so the mapping is fresh, as rank 0's in load_bench's root path), waits at a barrier,
then for every tensor in file order takes its piece, `get_slice(name)[lo:hi]` for Shard(0),
`[:, lo:hi]` for Shard(1), `[:]` for Replicate (lo, hi: torch.chunk's chunk of that dim,
the arithmetic of load_bench's floor), and `.contiguous().clone()` of it (`--no-clone`:
the slice alone). The placements are sdrt's built-in plans on a 1-D mesh of N ranks, mirrored
from core/checkpoint/sharding_plan.cc: fsdp = Shard(0) for every tensor with a dim; tp = the
trailing-name patterns below (column and vocab: Shard(0); row: Shard(1) for weights, Replicate
for biases; the rest Replicate). A repetition's time is the slowest process's. The file is
read whole once before the processes start (page cache). After the timed runs every piece of
the last repetition is compared byte for byte with os.pread of the same runs (#wrong, pieces
summed over processes; must be 0). Each process uses one intra-op thread.
"""

import argparse
import json
import multiprocessing as mp
import os
import re
import statistics
import struct
import sys
import time

import torch
from safetensors import safe_open

# core/checkpoint/sharding_plan.cc TpPatterns, searched in this order.
TP_PATTERNS = [
    (r"(^|\.)(q_proj|k_proj|v_proj|gate_proj|up_proj)\.(weight|bias)$", "column"),
    (r"(^|\.)(o_proj|down_proj)\.(weight|bias)$", "row"),
    (r"(^|\.)(embed_tokens|lm_head)\.weight$", "vocab"),
    (r"(^|\.)attention\.self\.(query|key|value)\.(weight|bias)$", "column"),
    (r"(^|\.)intermediate\.dense\.(weight|bias)$", "column"),
    (r"(^|\.)output\.dense\.(weight|bias)$", "row"),
    (r"(^|\.)word_embeddings\.weight$", "vocab"),
    (r"(^|\.)(c_attn|c_fc)\.(weight|bias)$", "conv1d-column"),
    (r"(^|\.)c_proj\.(weight|bias)$", "conv1d-row"),
    (r"(^|\.)wte\.weight$", "vocab"),
]
TP_REGEXES = [(re.compile(p), role) for p, role in TP_PATTERNS]
ELEMENT_SIZE = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2,
                "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def tp_dim(name, ndim):
    """TpPlacement(TpRoleOf(name), ndim): the sharded dim, or None for Replicate."""
    role = next((r for rx, r in TP_REGEXES if rx.search(name)), "replicate")
    weight = ndim >= 2
    return {"replicate": None, "column": 0, "vocab": 0, "row": 1 if weight else None,
            "conv1d-column": 1 if weight else 0, "conv1d-row": 0 if weight else None}[role]


def shard_dim(plan, name, ndim):
    if ndim == 0:
        return None
    return 0 if plan == "fsdp" else tp_dim(name, ndim)


def chunk(size, n, rank):
    c = (size + n - 1) // n
    begin = min(size, c * rank)
    return begin, max(0, min(c, size - begin))


def read_header(path):
    """(name, shape, element size, absolute offset) in file order."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    entries = [(k, tuple(v["shape"]), ELEMENT_SIZE[v["dtype"]], 8 + n + v["data_offsets"][0])
               for k, v in header.items()]
    return sorted(entries, key=lambda e: e[3])


def kept_runs(entry, d, n, rank):
    """The byte runs of this rank's piece (load_bench's floor arithmetic)."""
    _, shape, es, offset = entry
    numel = 1
    for s in shape:
        numel *= s
    if d is None:
        return [(offset, numel * es)]
    outer, inner = 1, es
    for s in shape[:d]:
        outer *= s
    for s in shape[d + 1:]:
        inner *= s
    begin, length = chunk(shape[d], n, rank)
    return [(offset + (i * shape[d] + begin) * inner, length * inner) for i in range(outer)]


def load_pieces(f, entries, dims, n, rank, clone):
    out = []
    for (name, shape, _, _), d in zip(entries, dims):
        if len(shape) == 0:
            t = f.get_tensor(name)
        else:
            sl = f.get_slice(name)
            if d is None:
                t = sl[:]
            else:
                begin, length = chunk(shape[d], n, rank)
                t = sl[(slice(None),) * d + (slice(begin, begin + length),)]
        out.append(t.contiguous().clone() if clone else t)
    return out


def worker(rank, n, args, barrier, results):
    torch.set_num_threads(1)
    entries = read_header(args.file)
    dims = [shard_dim(args.plan, e[0], len(e[1])) for e in entries]
    times, pieces = [], None
    for _ in range(args.warmup + args.repeat):
        pieces = None
        with safe_open(args.file, "pt") as f:
            barrier.wait()
            start = time.perf_counter()
            pieces = load_pieces(f, entries, dims, n, rank, not args.no_clone)
            times.append(time.perf_counter() - start)
    wrong, kept = 0, 0
    fd = os.open(args.file, os.O_RDONLY)
    for entry, d, t in zip(entries, dims, pieces):
        want = b"".join(os.pread(fd, b, o) for o, b in kept_runs(entry, d, n, rank))
        got = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        wrong += got != want
        kept += len(want)
    os.close(fd)
    results.put((rank, times[args.warmup:], wrong, kept))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", required=True)
    parser.add_argument("--plan", choices=["fsdp", "tp"], default="fsdp")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--no-clone", action="store_true")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    with open(args.file, "rb") as f:  # the page cache
        while f.read(8 << 20):
            pass
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(args.ranks), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args.ranks, args, barrier, results))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    got = sorted(results.get() for _ in procs)
    for p in procs:
        p.join()
    slowest = [max(g[1][k] for g in got) for k in range(args.repeat)]
    wrong, kept = sum(g[2] for g in got), max(g[3] for g in got)
    med = statistics.median(slowest)
    entries = read_header(args.file)
    copy = "get_slice only" if args.no_clone else "get_slice + .contiguous().clone()"
    print(f"# torch {torch.__version__}, {len(entries)} tensors, {args.ranks} processes, plan "
          f"{args.plan}, {copy}; {args.repeat} timed after {args.warmup} warm-up")
    print(f"{'ranks':>5} {'plan':>4} {'kept':>12} {'python ms':>10} {'[min..max]':>17} "
          f"{'#wrong':>6}")
    mm = f"[{min(slowest) * 1e3:.1f}..{max(slowest) * 1e3:.1f}]"
    print(f"{args.ranks:>5} {args.plan:>4} {kept:>12} {med * 1e3:>10.2f} {mm:>17} {wrong:>6}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(file=args.file, ranks=args.ranks, plan=args.plan, clone=not args.no_clone,
                           tensors=len(entries), kept_bytes_max=kept, median_ms=med * 1e3,
                           min_ms=min(slowest) * 1e3, max_ms=max(slowest) * 1e3,
                           runs_ms=[t * 1e3 for t in slowest], wrong_tensors=wrong), f, indent=2)
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
