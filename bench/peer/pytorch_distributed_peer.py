#!/usr/bin/env python3
"""PyTorch peer of `sdrt bench` (tools/sdrt/bench.cc): the same workloads, ranks, rows,
header lines, columns and JSON keys, timed through torch.distributed._state_dict_utils on
the gloo backend (CPU).

Run by hand (not part of the build or the tests), right after the sdrt runs:

    mpiexec -n 2 build/bin/sdrt bench --workload llama
    VENV/bin/python bench/peer/pytorch_distributed_peer.py --ranks 2 --workload llama

VENV is a virtualenv with torch (the CPU wheel is enough), safetensors and numpy:
`python3 -m venv VENV && VENV/bin/pip install torch safetensors numpy`.

Rows (each against a flat gloo collective of the same bytes, timed in the same run, taking
turns with sdrt's rotation):
  gather         `_gather_state_dict` of DTensors [Shard(0)] on a 1-D CPU mesh of all ranks
                 (0-dim tensors Replicate) vs one `all_gather` of every rank's packed shard
                 bytes (a list of equal uint8 tensors: ranks with fewer bytes pad to the
                 largest, as gloo's all_gather needs equal sizes);
  gather_r0_off  the same with cpu_offload=True, ranks_only=(0,);
  broadcast      `_broadcast_state_dict` from rank 0's full state dict into meta DTensor
                 locals (device cpu) vs one `broadcast` of the full bytes;
  distribute     `_distribute_state_dict` (every rank holds the full state dict, meta
                 DTensor locals) vs a copy of this rank's shard bytes into one flat buffer.
flat: the baseline into a warm buffer; fresh: into a new, untouched one (torch.empty inside
the timed call). A run's time is the slowest rank's (barrier before, MAX all-reduce after);
the table gives the median and [min..max] of the timed runs, in ms. Every byte of the last
result and of the flat buffer is checked against the source (#wrong, summed over ranks).
The source bytes are sdrt's (splitmix64 per tensor and word), and `digest` is the same
fingerprint sdrt bench prints, so equal digests and #wrong = 0 on both sides mean the
outputs are bit-identical. The ratio columns are torch / flat and torch / fresh (sdrt
prints sdrt / flat and sdrt / fresh in the same places); `collectives` is what PyTorch's
code path issues per call (one per tensor; broadcast one more for the skeleton), not a
count taken at run time. Each process uses one intra-op thread.
"""

import argparse
import json
import os
import resource
import socket
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed._state_dict_utils import (
    _broadcast_state_dict,
    _distribute_state_dict,
    _gather_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
OPS = ("gather", "gather_r0_off", "broadcast", "distribute")


# ------------------------------------------------------------------------------------------
# Workloads (sdrt bench's, name for name, shape for shape, byte for byte).


def llama_specs():
    hidden, kv, inter, vocab, layers = 512, 128, 1792, 16032, 32  # Llama-3-8B / 8
    bf16 = torch.bfloat16
    specs = [("model.embed_tokens.weight", (vocab, hidden), bf16)]
    for i in range(layers):
        p = f"model.layers.{i}."
        specs += [
            (p + "self_attn.q_proj.weight", (hidden, hidden), bf16),
            (p + "self_attn.k_proj.weight", (kv, hidden), bf16),
            (p + "self_attn.v_proj.weight", (kv, hidden), bf16),
            (p + "self_attn.o_proj.weight", (hidden, hidden), bf16),
            (p + "mlp.gate_proj.weight", (inter, hidden), bf16),
            (p + "mlp.up_proj.weight", (inter, hidden), bf16),
            (p + "mlp.down_proj.weight", (hidden, inter), bf16),
            (p + "input_layernorm.weight", (hidden,), bf16),
            (p + "post_attention_layernorm.weight", (hidden,), bf16),
        ]
    specs += [("model.norm.weight", (hidden,), bf16), ("lm_head.weight", (vocab, hidden), bf16)]
    return specs


def small_specs():
    return [(f"block.{i // 100}.param{i % 100}", (64 + (i * 7919) % 961,), torch.float32)
            for i in range(10000)]


def splitmix64(x):
    x = x + np.uint64(GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def make_tensor(index, shape, dtype):
    nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty(0, dtype=dtype).element_size()
    words = (nbytes + 7) // 8
    seed = np.uint64(((index + 1) * GOLDEN) & MASK)
    with np.errstate(over="ignore"):
        w = splitmix64(seed + np.arange(words, dtype=np.uint64))
    raw = w.view(np.uint8)[:nbytes].copy()
    return torch.from_numpy(raw).view(dtype).reshape(shape)


def minilm_path():
    # Where scripts/fetch-model.sh puts the file, as sdrt bench looks for it.
    cache = os.environ.get("SDRT_CACHE_DIR") or (
        os.path.join(os.environ["XDG_CACHE_HOME"], "sdrt") if os.environ.get("XDG_CACHE_HOME")
        else os.path.join(os.environ.get("HOME", ""), ".cache", "sdrt"))
    return os.path.join(cache, "all-MiniLM-L6-v2", "model.safetensors")


def file_order(path):
    """Tensor names of one safetensors file in data order, as sdrt's reader orders them."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return sorted(header, key=lambda k: tuple(header[k]["data_offsets"]))


def load_checkpoint(path):
    """A safetensors file or folder, in sdrt's CheckpointSource order: files by name, then
    each file's data order."""
    from safetensors.torch import load_file

    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                names = sorted(set(json.load(f)["weight_map"].values()))
        else:
            names = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
        files = [os.path.join(path, n) for n in names]
    else:
        files = [path]
    out = []
    for f in files:
        tensors = load_file(f)
        out += [(k, tensors[k].contiguous()) for k in file_order(f)]
    return out


def make_workload(name, max_tensors):
    if name == "minilm":
        path = minilm_path()
        if not os.path.exists(path):
            sys.exit(f"--workload minilm: {path} is absent; run scripts/fetch-model.sh")
        fulls = load_checkpoint(path)
    elif name in ("llama", "small"):
        specs = llama_specs() if name == "llama" else small_specs()
        if max_tensors:
            specs = specs[:max_tensors]
        fulls = [(n, make_tensor(i, s, d)) for i, (n, s, d) in enumerate(specs)]
    else:
        fulls = load_checkpoint(name)
    return fulls[:max_tensors] if max_tensors else fulls


def as_bytes(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def digest(fulls):
    total = 0
    for t, (_, full) in enumerate(fulls):
        b = as_bytes(full).numpy()
        pad = (-len(b)) % 8
        if pad:
            b = np.concatenate([b, np.zeros(pad, np.uint8)])
        w = b.view(np.uint64)
        with np.errstate(over="ignore"):
            s = int(np.sum(w * (np.arange(len(w), dtype=np.uint64) * np.uint64(2) + np.uint64(1)),
                           dtype=np.uint64))
        total = (total + s * (t + 1)) & MASK
    return total


def piece(t, n, rank):
    """Rows [begin, begin + rows) of dim 0 that `rank` holds (torch.chunk); a 0-dim tensor
    is held whole."""
    if t.dim() == 0:
        return None
    dim0 = t.shape[0]
    chunk = (dim0 + n - 1) // n
    begin = min(dim0, chunk * rank)
    return begin, max(0, min(chunk, dim0 - begin))


def piece_of(t, p):
    return t if p is None else t[p[0]:p[0] + p[1]]


def wrong_bytes(got, want):
    if got is None or got.is_meta or got.shape != want.shape or got.dtype != want.dtype:
        return want.numel() * want.element_size()
    return int((as_bytes(got) != as_bytes(want)).sum())


def differing(got_bytes, want_bytes):
    return int((got_bytes != want_bytes).sum())


# ------------------------------------------------------------------------------------------
# One rank.


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(fn):
    dist.barrier()
    faults = minor_faults()
    start = time.perf_counter()
    fn()
    t = torch.tensor([time.perf_counter() - start, minor_faults() - faults], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t[0].item(), t[1].item()


def measure(args, prepare, op, flat, fresh):
    """sdrt bench's MeasureRow: the three take turns, which goes first rotating."""
    runs = {"op": [], "flat": [], "fresh": [], "faults": []}
    for it in range(args.warmup + args.iters):
        keep = it >= args.warmup
        for k in range(3):
            which = (k + it) % 3
            if which == 0:
                prepare()
                t, faults = timed(op)
                if keep:
                    runs["op"].append(t)
                    runs["faults"].append(faults)
            elif which == 1:
                t, _ = timed(flat)
                if keep:
                    runs["flat"].append(t)
            else:
                t, _ = timed(fresh)
                state_free()
                if keep:
                    runs["fresh"].append(t)
    return runs


FRESH = {}


def state_free():
    FRESH.clear()


def sum_over_ranks(value):
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t.item())


def worker(rank, n, args, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=n)
    mesh = init_device_mesh("cpu", (n,))
    fulls = make_workload(args.workload, args.tensors)
    total = sum(t.numel() * t.element_size() for _, t in fulls)
    dig = digest(fulls)
    pieces = {k: [piece(t, n, q) for q in range(n)] for k, t in fulls}

    sharded, meta = {}, {}
    for k, full in fulls:
        placement = [Replicate()] if full.dim() == 0 else [Shard(0)]
        local = piece_of(full, pieces[k][rank]).clone()
        sharded[k] = DTensor.from_local(local, mesh, placement, run_check=False,
                                        shape=full.shape, stride=full.stride())
        meta[k] = DTensor.from_local(torch.empty(local.shape, dtype=full.dtype, device="meta"),
                                     mesh, placement, run_check=False, shape=full.shape,
                                     stride=full.stride())

    def shard_bytes(q, sharded_only):
        return [as_bytes(piece_of(t, pieces[k][q])) for k, t in fulls
                if not (sharded_only and t.dim() == 0)]

    gather_bytes = [sum(b.numel() for b in shard_bytes(q, True)) for q in range(n)]
    local_bytes = [sum(b.numel() for b in shard_bytes(q, False)) for q in range(n)]
    largest = max(gather_bytes)
    mine_gather = shard_bytes(rank, True)
    mine_local = shard_bytes(rank, False)
    flat_send = torch.zeros(largest, dtype=torch.uint8)
    if mine_gather:
        packed = torch.cat(mine_gather)
        flat_send[:packed.numel()] = packed
    flat_recv = [torch.zeros(largest, dtype=torch.uint8) for _ in range(n)]
    flat_bcast = torch.zeros(total, dtype=torch.uint8)
    if rank == 0 and fulls:
        flat_bcast.copy_(torch.cat([as_bytes(t) for _, t in fulls]))
    flat_local = torch.zeros(local_bytes[rank], dtype=torch.uint8)

    def copy_shards(out):
        at = 0
        for s in mine_local:
            out[at:at + s.numel()].copy_(s)
            at += s.numel()

    def all_gather_fresh():
        FRESH["out"] = [torch.empty(largest, dtype=torch.uint8) for _ in range(n)]
        dist.all_gather(FRESH["out"], flat_send)

    def bcast_fresh():
        buffer = flat_bcast
        if rank != 0:
            buffer = FRESH["out"] = torch.empty(total, dtype=torch.uint8)
        dist.broadcast(buffer, src=0)

    def distribute_fresh():
        FRESH["out"] = torch.empty(local_bytes[rank], dtype=torch.uint8)
        copy_shards(FRESH["out"])

    def check_local(local):
        wrong = 0
        for k, full in fulls:
            want = piece_of(full, pieces[k][rank])
            v = local.get(k)
            got = v.to_local() if isinstance(v, DTensor) else (
                v if isinstance(v, torch.Tensor) and full.dim() == 0 else None)
            wrong += wrong_bytes(got, want)
        return sum_over_ranks(wrong)

    rows = []
    state = {}
    ops = [op for op in OPS if op in args.ops.split(",")]
    for name in ("gather", "gather_r0_off"):
        if name not in ops:
            continue
        kw = dict(cpu_offload=True, ranks_only=(0,)) if name == "gather_r0_off" else {}

        def op():
            state["result"] = _gather_state_dict(sharded, **kw)

        runs = measure(args, lambda: state.pop("result", None), op,
                       lambda: dist.all_gather(flat_recv, flat_send), all_gather_fresh)
        keep = name == "gather" or rank == 0
        res = state["result"]
        wrong = sum(wrong_bytes(res.get(k), full) for k, full in fulls) if keep else (
            0 if not res else total)
        flat_wrong = sum(differing(flat_recv[q][:gather_bytes[q]],
                                   torch.cat(shard_bytes(q, True)) if gather_bytes[q] else
                                   torch.zeros(0, dtype=torch.uint8)) for q in range(n))
        rows.append((name, -1, runs, sum_over_ranks(wrong), sum_over_ranks(flat_wrong),
                     len(fulls)))

    if "broadcast" in ops:
        full_sd = dict(fulls) if rank == 0 else {}

        def prepare():
            state["local"] = dict(meta)

        def op():
            _broadcast_state_dict(full_sd, state["local"], device=torch.device("cpu"))

        runs = measure(args, prepare, op, lambda: dist.broadcast(flat_bcast, src=0), bcast_fresh)
        want = torch.cat([as_bytes(t) for _, t in fulls]) if fulls else flat_bcast
        rows.append(("broadcast", 0, runs, check_local(state["local"]),
                     sum_over_ranks(differing(flat_bcast, want)), len(fulls) + 1))

    if "distribute" in ops:
        full_sd = dict(fulls)

        def prepare():
            state["local"] = dict(meta)

        def op():
            _distribute_state_dict(full_sd, state["local"], device=torch.device("cpu"))

        runs = measure(args, prepare, op, lambda: copy_shards(flat_local), distribute_fresh)
        want = torch.cat(mine_local) if mine_local else flat_local
        rows.append(("distribute", -1, runs, check_local(state["local"]),
                     sum_over_ranks(differing(flat_local, want)), 0))

    if rank == 0:
        report(args, fulls, total, dig, n, local_bytes[0], rows)
    dist.barrier()
    dist.destroy_process_group()


# ------------------------------------------------------------------------------------------
# Output: sdrt bench's header lines, columns and JSON keys.


def summarize(runs):
    return (statistics.median(runs), min(runs), max(runs)) if runs else (0.0, 0.0, 0.0)


def table(header, right, rows):
    """sdrt's Table::Print: columns two spaces apart, a rule of dashes under the header."""
    width = [max(len(r[c]) for r in [header] + rows) for c in range(len(header))]

    def line(row):
        cells = []
        for c, cell in enumerate(row):
            pad = " " * (width[c] - len(cell))
            cells.append(pad + cell if right[c] else cell + (pad if c + 1 < len(row) else ""))
        return "  ".join(cells)

    out = [line(header), line(["-" * w for w in width])]
    return "\n".join(out + [line(r) for r in rows])


def report(args, fulls, total, dig, n, rank0_local_bytes, rows):
    dtypes = {str(t.dtype).replace("torch.", "") for _, t in fulls}
    dtype = dtypes.pop() if len(dtypes) == 1 else ("mixed" if dtypes else "none")
    cores, affinity = os.cpu_count(), len(os.sched_getaffinity(0))
    out, text_rows = [], []
    for name, root, runs, wrong, flat_wrong, colls in rows:
        med, lo, hi = summarize(runs["op"])
        flat, fresh = summarize(runs["flat"]), summarize(runs["fresh"])
        algbw = total / med / 1e9 if med else 0.0
        busbw = (algbw if name == "broadcast" else
                 rank0_local_bytes / med / 1e9 if name == "distribute" and med else
                 algbw * (n - 1) / n)
        ratio = med / flat[0] if flat[0] else 0.0
        ratio_fresh = med / fresh[0] if fresh[0] else 0.0
        text_rows.append([name, str(total), str(len(fulls)), dtype, str(root), f"{med * 1e3:.2f}",
                          f"[{lo * 1e3:.2f}..{hi * 1e3:.2f}]", f"{algbw:.2f}", f"{busbw:.2f}",
                          str(wrong), f"{ratio:.2f}", f"{ratio_fresh:.2f}", str(colls)])
        ms = lambda xs: [x * 1e3 for x in xs]  # noqa: E731
        out.append(dict(
            workload=args.workload, op=name, ratio=ratio, ratio_fresh=ratio_fresh,
            impl="pytorch", size=total, count=len(fulls), type=dtype, root=root,
            time_ms=med * 1e3, time_min_ms=lo * 1e3, time_max_ms=hi * 1e3,
            time_runs_ms=ms(runs["op"]), flat_ms=flat[0] * 1e3, flat_min_ms=flat[1] * 1e3,
            flat_max_ms=flat[2] * 1e3, flat_runs_ms=ms(runs["flat"]), fresh_ms=fresh[0] * 1e3,
            fresh_min_ms=fresh[1] * 1e3, fresh_max_ms=fresh[2] * 1e3,
            fresh_runs_ms=ms(runs["fresh"]), algbw=algbw, busbw=busbw, wrong=wrong,
            flat_wrong=flat_wrong, collectives=colls, data_collectives=colls, buckets=None,
            fault_mib=statistics.median(runs["faults"]) * 4096 / 2**20 if runs["faults"] else 0,
            digest=f"{dig:016x}", tensors=len(fulls), ranks=n, cores=cores,
            affinity_cores=affinity, backend="gloo", device="cpu", mpi_library=None,
            version=torch.__version__, bucket_bytes=None, warmup=args.warmup, iters=args.iters))
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"# pytorch peer: workload {args.workload}: {len(fulls)} tensors, {total:,} bytes "
          f"({total / 2**20:.4g} MiB), {dtype}, digest {dig:016x}")
    print(f"# machine: {cores} cores ({affinity} in this rank's affinity), {n} ranks, backend "
          f"gloo (torch.distributed), device cpu; torch {torch.__version__}; bucket none (one "
          f"collective per tensor)")
    print(f"# {args.iters} timed runs after {args.warmup} warm-up; time: ms, the median over "
          f"runs of the slowest rank, [min..max]; algbw, busbw: GB/s (1e9 B/s)")
    print("# flat: one gloo collective of the same bytes in one buffer (all_gather: padded to "
          "the largest rank's; distribute: a copy of the rank's bytes), warm; fresh: the same "
          "into a new, untouched buffer")
    print(table(["op", "size", "count", "type", "root", "time", "[min..max]", "algbw", "busbw",
                 "#wrong", "torch/flat", "torch/fresh", "collectives"],
                [False, True, True, False] + [True] * 9, text_rows))
    for name, _, _, _, flat_wrong, _ in rows:
        if flat_wrong:
            print(f"# {name}: the flat baseline's buffer differs from the source in "
                  f"{flat_wrong} bytes")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--workload", default="llama",
                        help="llama, small, minilm, or a safetensors file or folder")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--tensors", type=int, default=0,
                        help="keep only the first T tensors (0: all), as sdrt bench --tensors")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--json", action="store_true",
                        help="print one JSON list, an object per row (sdrt bench's keys)")
    args = parser.parse_args()
    if args.iters < 1 or args.warmup < 0 or args.ranks < 1 or args.tensors < 0:
        parser.error("--iters >= 1, --warmup >= 0, --ranks >= 1, --tensors >= 0")
    unknown = set(args.ops.split(",")) - set(OPS)
    if unknown:
        parser.error(f"--ops: unknown {sorted(unknown)} (known: {','.join(OPS)})")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.ranks, args, port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
