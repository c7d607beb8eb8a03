#!/usr/bin/env python3
"""PyTorch peer of bench/distributed_state_dict_bench.cc: the same workloads, ranks and rows,
timed through torch.distributed._state_dict_utils on the gloo backend (CPU).

Run by hand (not part of the build or the tests), right after the sdrt runs:

    VENV/bin/python bench/peer/pytorch_distributed_peer.py --ranks 2 --workload llama
    VENV/bin/python bench/peer/pytorch_distributed_peer.py --ranks 4 --workload small

VENV is a virtualenv with torch (the CPU wheel is enough), safetensors and numpy:
`python3 -m venv VENV && VENV/bin/pip install torch safetensors numpy`.

Rows (as the sdrt benchmark; each against a flat gloo collective of the same bytes, timed in
the same run, alternating which goes first):
  gather         `_gather_state_dict` of DTensors [Shard(0)] on a 1-D CPU mesh of all ranks
                 vs one `all_gather` of every rank's packed shard bytes (a list of equal
                 uint8 tensors; ranks with fewer bytes pad to the largest, as gloo's all_gather
                 needs equal sizes);
  gather_r0_off  the same with cpu_offload=True, ranks_only=(0,);
  broadcast      `_broadcast_state_dict` from rank 0's full state dict into meta DTensor locals
                 (device cpu) vs one `broadcast` of the full bytes;
  distribute     `_distribute_state_dict` (every rank holds the full state dict, meta DTensor
                 locals) vs a copy of this rank's shard bytes into one flat buffer.
A run's time is the slowest rank's (barrier before, MAX all-reduce after); the table gives the
median and [min..max] of the timed runs. Every byte of the last result is checked against the
source (#wrong, summed over ranks). The source bytes are the sdrt benchmark's (splitmix64 per
tensor and word); `digest` is the same fingerprint that program prints, so equal digests and
#wrong = 0 on both sides mean the outputs are bit-identical. Each process uses one intra-op
thread (two ranks share a 2-core VM).
"""

import argparse
import json
import os
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
from torch.distributed.tensor import DTensor, Shard

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# ------------------------------------------------------------------------------------------
# Workloads (the sdrt benchmark's, name for name, shape for shape, byte for byte).


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


def load_minilm():
    from safetensors.torch import load_file

    # Where scripts/fetch-model.sh puts the file by default, as the sdrt benchmark looks for it.
    path = os.path.join(os.environ["HOME"], ".cache/sdrt/all-MiniLM-L6-v2/model.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])  # file order, as sdrt
    tensors = load_file(path)
    return [(k, tensors[k].contiguous()) for k in names]


def make_workload(name):
    if name == "minilm":
        return load_minilm()
    specs = llama_specs() if name == "llama" else small_specs()
    return [(n, make_tensor(i, s, d)) for i, (n, s, d) in enumerate(specs)]


def as_bytes(t):
    return t.detach().contiguous().view(-1).view(torch.uint8)


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


def shard0(dim0, n, rank):
    chunk = (dim0 + n - 1) // n
    begin = min(dim0, chunk * rank)
    return begin, max(0, min(chunk, dim0 - begin))


def row_bytes(t):
    return t.numel() // t.shape[0] * t.element_size() if t.shape[0] else 0


def wrong_bytes(got, want):
    if got is None or got.is_meta or got.shape != want.shape or got.dtype != want.dtype:
        return want.numel() * want.element_size()
    return int((as_bytes(got) != as_bytes(want)).sum())


# ------------------------------------------------------------------------------------------
# One rank.


def timed(fn):
    dist.barrier()
    start = time.perf_counter()
    fn()
    t = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def measure(args, prepare, op, base):
    op_runs, base_runs = [], []
    for it in range(args.warmup + args.iters):
        for k in range(2):
            if (k == 0) == (it % 2 == 0):
                prepare()
                t = timed(op)
                if it >= args.warmup:
                    op_runs.append(t)
            else:
                t = timed(base)
                if it >= args.warmup:
                    base_runs.append(t)
    return op_runs, base_runs


def sum_over_ranks(value):
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t.item())


def worker(rank, n, args, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                           world_size=n)
    mesh = init_device_mesh("cpu", (n,))
    fulls = make_workload(args.workload)
    total = sum(t.numel() * t.element_size() for _, t in fulls)
    dig = digest(fulls)
    ranges = {k: [shard0(t.shape[0], n, q) for q in range(n)] for k, t in fulls}

    sharded, meta = {}, {}
    for k, full in fulls:
        begin, rows = ranges[k][rank]
        local = full[begin:begin + rows].clone()
        sharded[k] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                        shape=full.shape, stride=full.stride())
        meta[k] = DTensor.from_local(torch.empty(local.shape, dtype=full.dtype, device="meta"),
                                     mesh, [Shard(0)], run_check=False, shape=full.shape,
                                     stride=full.stride())

    my_shards = [as_bytes(full[ranges[k][rank][0]:sum(ranges[k][rank])]) for k, full in fulls]
    rank_bytes = [sum(ranges[k][q][1] * row_bytes(t) for k, t in fulls) for q in range(n)]
    largest = max(rank_bytes)
    flat_send = torch.zeros(largest, dtype=torch.uint8)
    if my_shards:
        packed = torch.cat(my_shards)
        flat_send[:packed.numel()] = packed
    flat_recv = [torch.zeros(largest, dtype=torch.uint8) for _ in range(n)]
    flat_bcast = torch.zeros(total, dtype=torch.uint8)
    if rank == 0:
        flat_bcast.copy_(torch.cat([as_bytes(t) for _, t in fulls]))
    flat_local = torch.zeros(rank_bytes[rank], dtype=torch.uint8)

    def all_gather():
        dist.all_gather(flat_recv, flat_send)

    def bcast():
        dist.broadcast(flat_bcast, src=0)

    def copy_shards():
        at = 0
        for s in my_shards:
            flat_local[at:at + s.numel()].copy_(s)
            at += s.numel()

    rows = []
    state = {}

    def check_local(local):
        wrong = 0
        for k, full in fulls:
            begin, nrows = ranges[k][rank]
            v = local.get(k)
            if not isinstance(v, DTensor):
                wrong += nrows * row_bytes(full)
                continue
            wrong += wrong_bytes(v.to_local(), full[begin:begin + nrows])
        return sum_over_ranks(wrong)

    ops = args.ops.split(",")
    for name in ("gather", "gather_r0_off"):
        if name not in ops:
            continue
        kw = dict(cpu_offload=True, ranks_only=(0,)) if name == "gather_r0_off" else {}

        def op():
            state["result"] = _gather_state_dict(sharded, **kw)

        op_runs, base_runs = measure(args, lambda: state.pop("result", None), op, all_gather)
        keep = name == "gather" or rank == 0
        res = state["result"]
        wrong = sum(wrong_bytes(res.get(k), full) for k, full in fulls) if keep else (
            0 if not res else total)
        rows.append((name, -1, op_runs, base_runs, sum_over_ranks(wrong)))

    if "broadcast" in ops:
        full_sd = {k: t for k, t in fulls} if rank == 0 else {}

        def prepare():
            state["local"] = dict(meta)

        def op():
            _broadcast_state_dict(full_sd, state["local"], device=torch.device("cpu"))

        op_runs, base_runs = measure(args, prepare, op, bcast)
        rows.append(("broadcast", 0, op_runs, base_runs, check_local(state["local"])))

    if "distribute" in ops:
        full_sd = {k: t for k, t in fulls}

        def prepare():
            state["local"] = dict(meta)

        def op():
            _distribute_state_dict(full_sd, state["local"], device=torch.device("cpu"))

        op_runs, base_runs = measure(args, prepare, op, copy_shards)
        rows.append(("distribute", -1, op_runs, base_runs, check_local(state["local"])))

    if rank == 0:
        dtypes = "+".join(sorted({str(t.dtype).replace("torch.", "") for _, t in fulls}))
        print(f"# PyTorch {torch.__version__} gloo peer: workload {args.workload}: {len(fulls)} "
              f"tensors, {total} bytes ({total / 2**20:.1f} MiB) {dtypes}, digest {dig:016x}; "
              f"ranks {n}; {args.iters} timed runs after {args.warmup} warm-up")
        print("# time: median [min..max] over runs of the slowest rank, ms; base: one flat gloo "
              "collective (distribute: a copy) of the same bytes")
        print(f"{'op':<13} {'size':>10} {'count':>6} {'root':>4} {'torch':>9} {'[min..max]':>19} "
              f"{'base':>9} {'[min..max]':>17} {'ratio':>6} {'algbw':>7} {'busbw':>7} "
              f"{'colls':>6} {'#wrong':>6}")
        out = []
        for name, root, op_runs, base_runs, wrong in rows:
            med, bmed = statistics.median(op_runs), statistics.median(base_runs)
            algbw = total / med / 1e9
            busbw = algbw if name == "broadcast" else (
                rank_bytes[rank] / med / 1e9 if name == "distribute" else algbw * (n - 1) / n)
            # Collectives PyTorch issues (data ones): one per tensor for gather (DTensor
            # full_tensor), one per tensor for broadcast (plus one broadcast_object_list);
            # distribute: none.
            colls = {"gather": len(fulls), "gather_r0_off": len(fulls),
                     "broadcast": len(fulls) + 1, "distribute": 0}[name]
            mm = f"[{min(op_runs) * 1e3:.2f}..{max(op_runs) * 1e3:.2f}]"
            bmm = f"[{min(base_runs) * 1e3:.2f}..{max(base_runs) * 1e3:.2f}]"
            print(f"{name:<13} {total:>10} {len(fulls):>6} {root:>4} {med * 1e3:>9.2f} {mm:>19} "
                  f"{bmed * 1e3:>9.2f} {bmm:>17} {med / bmed:>6.2f} {algbw:>7.2f} {busbw:>7.2f} "
                  f"{colls:>6} {wrong:>6}")
            out.append(dict(op=name, workload=args.workload, ranks=n, size=total,
                            count=len(fulls), root=root, torch_ms=med * 1e3,
                            torch_runs_ms=[t * 1e3 for t in op_runs], base_ms=bmed * 1e3,
                            base_runs_ms=[t * 1e3 for t in base_runs], ratio=med / bmed,
                            algbw=algbw, busbw=busbw, wrong=wrong, digest=f"{dig:016x}"))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--workload", choices=["llama", "small", "minilm"], default="llama")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--ops", default="gather,gather_r0_off,broadcast,distribute")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.ranks, args, port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
