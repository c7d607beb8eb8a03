#!/usr/bin/env python3
"""PyTorch's peak host memory in `_broadcast_state_dict`, the reference for sdrt's memory test.

Run BY HAND (never in CI), alone on the machine (it needs about 3 GB), from the repository
root:

    VENV/bin/python tests/golden/measure_broadcast_memory.py

VENV is a virtualenv with torch (tests/golden/README.md gives the install line).

Four gloo processes (tcp://127.0.0.1:<free port>, a 1-D "cpu" DeviceMesh of 4). Rank 0
holds a full state dict of 64 float32 tensors of 1024 x 4096 (1 GiB in all); every rank's
local state dict holds, under the same keys, meta DTensors [Shard(0)] of that global shape.
Each rank calls `_broadcast_state_dict(full, local, device=torch.device("cpu"))` and
reports its peak resident set size (`resource.getrusage(RUSAGE_SELF).ru_maxrss`) before and
after the call, the increase, and its current resident set size (/proc/self/statm) before
and after, in MiB. The result goes to tests/data/distributed/pytorch_broadcast_memory.json.

ru_maxrss is a high-water mark: on rank 0 the "before" already includes building the 1 GiB
full state dict, so its increase only shows what the call adds on top of that peak.
"""
import json
import os
import resource
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed._state_dict_utils import _broadcast_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard

OUT = Path(__file__).resolve().parents[1] / "data" / "distributed" / "pytorch_broadcast_memory.json"
WORLD = 4
NUM_TENSORS = 64
SHAPE = (1024, 4096)


def maxrss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2.0**20


def run_rank(rank, port, tmp):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            init_method=f"tcp://127.0.0.1:{port}")
    mesh = DeviceMesh("cpu", torch.arange(WORLD))
    out = {"rank": rank, "maxrss_after_init_mib": maxrss_mib()}
    full = {}
    if rank == 0:
        for i in range(NUM_TENSORS):
            full[f"layer{i}.weight"] = torch.full(SHAPE, float(i), dtype=torch.float32)
    rows = SHAPE[0] // WORLD
    local = {
        f"layer{i}.weight": DTensor.from_local(
            torch.empty((rows, SHAPE[1]), dtype=torch.float32, device="meta"), mesh,
            [Shard(0)], shape=torch.Size(SHAPE), stride=(SHAPE[1], 1), run_check=False)
        for i in range(NUM_TENSORS)
    }
    dist.barrier()
    out["maxrss_before_mib"] = maxrss_mib()
    out["rss_before_mib"] = rss_mib()
    _broadcast_state_dict(full, local, device=torch.device("cpu"))
    out["maxrss_after_mib"] = maxrss_mib()
    out["rss_after_mib"] = rss_mib()
    out["maxrss_increase_mib"] = out["maxrss_after_mib"] - out["maxrss_before_mib"]
    # Every local is this rank's rows of the full tensor (the value i).
    for i in range(NUM_TENSORS):
        loc = local[f"layer{i}.weight"].to_local()
        assert loc.shape == (rows, SHAPE[1]) and bool((loc == float(i)).all()), i
    out["local_bytes_mib"] = NUM_TENSORS * rows * SHAPE[1] * 4 / 2.0**20
    dist.barrier()
    dist.destroy_process_group()
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(out))


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run_rank, args=(port, tmp), nprocs=WORLD)
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(WORLD)]
    for r in ranks:
        for k, v in r.items():
            if k.endswith("_mib"):
                r[k] = round(v, 1)
    result = {
        "torch_version": torch.__version__, "backend": "gloo", "world_size": WORLD,
        "full_state_dict": f"{NUM_TENSORS} float32 tensors of {SHAPE[0]} x {SHAPE[1]} "
                           "(1 GiB) on rank 0",
        "local_state_dict": "meta DTensors [Shard(0)] on a 1-D mesh of 4, same keys",
        "call": '_broadcast_state_dict(full, local, device=torch.device("cpu"))',
        "measure": "resource.getrusage(RUSAGE_SELF).ru_maxrss (peak) and /proc/self/statm "
                   "(current), MiB",
        "ranks": ranks,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
