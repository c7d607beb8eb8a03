"""The Python module (tools/python/sdrt) on all-MiniLM-L6-v2, under mpiexec -n N.

Usage: mpiexec -n N python3 minilm_mpi_test.py MINILM_PATH_FILE
(CTest runs it at N = 2 with SDRT_LIBRARY set to the shared library and PYTHONPATH to
tools/python; MINILM_PATH_FILE is the file the fetch_minilm fixture writes the model's
path into: exit 3, a skip, when it has none.)

It checks, against the file as this script reads it itself (the JSON header and
numpy.frombuffer: a reader that shares nothing with sdrt):
  * inspect() lists every tensor with its dtype and shape;
  * load() into NumPy buffers, tensor-parallel (row-parallel output projections Shard(1),
    other matrices Shard(0), vectors replicated; uneven slices at N = 3), fills every
    element of every rank's slices;
  * gather() of those slices on rank 0 gives the whole tensors back, bit for bit, and the
    other ranks get nothing;
  * a buffer of the wrong shape is refused with INVALID_ARGUMENT on every rank.
"""

import json
import os
import struct
import sys

import numpy as np

import sdrt

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_file(path):
    """name -> whole NumPy array, straight from the safetensors bytes."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        out[name] = np.frombuffer(data, _DTYPES[e["dtype"]], offset=8 + n + begin,
                                  count=(end - begin) // np.dtype(_DTYPES[e["dtype"]]).itemsize
                                  ).reshape(e["shape"])
    return out


def shard_dim(name, ndim):
    if ndim != 2:
        return None
    return 1 if "output.dense" in name else 0


def piece(full, dim, rank, ranks):
    """This rank's slice as torch.chunk cuts it (ceil(n / ranks), the last ones short)."""
    if dim is None:
        return full
    n = full.shape[dim]
    chunk = -(-n // ranks)
    start = min(chunk * rank, n)
    stop = min(start + chunk, n)
    return full[start:stop] if dim == 0 else full[:, start:stop]


def main():
    with open(sys.argv[1]) as f:
        path = f.read().strip()
    if not path or not os.path.isfile(path):
        print("skipped: all-MiniLM-L6-v2 is not available (the fetch_minilm fixture wrote no path)")
        return 3
    comm = sdrt.world(timeout=120)
    rank, ranks = comm.rank, comm.size
    expected = read_file(path)

    listed = sdrt.inspect(path)
    assert sorted(t["name"] for t in listed) == sorted(expected), "inspect: names"
    for t in listed:
        assert tuple(t["shape"]) == expected[t["name"]].shape, t["name"]
    dtypes = {t["name"]: t["dtype"] for t in listed}
    assert dtypes["embeddings.word_embeddings.weight"] == "float32", dtypes
    assert dtypes["embeddings.position_ids"] == "int64", dtypes

    buffers, layout = {}, {}
    for name, full in expected.items():
        dim = shard_dim(name, full.ndim)
        local = np.full(piece(full, dim, rank, ranks).shape, -7, full.dtype)  # poisoned
        buffers[name] = local
        layout[name] = sdrt.DTensor(local, "R" if dim is None else f"S({dim})", full.shape)
    stats = sdrt.load(path, layout, comm=comm)
    wrong = [n for n, b in buffers.items()
             if not np.array_equal(b, piece(expected[n], shard_dim(n, b.ndim), rank, ranks))]
    assert not wrong, f"rank {rank}: load: {wrong[:5]}"
    assert stats["bytes_kept"] == sum(b.nbytes for b in buffers.values()), stats

    gathered = sdrt.gather(layout, comm, ranks_only=[0])
    if rank == 0:
        assert sorted(gathered) == sorted(expected), "gather: names"
        wrong = [n for n, a in gathered.items() if not np.array_equal(a, expected[n])]
        assert not wrong, f"gather: {wrong[:5]}"
    else:
        assert gathered == {}, "gather: a rank outside ranks_only got tensors"

    name = "encoder.layer.0.attention.self.query.weight"
    bad = {name: sdrt.DTensor(np.zeros((3, 3), np.float32), "S(0)", expected[name].shape)}
    try:
        sdrt.load(path, bad, comm=comm)
        raise AssertionError("a buffer of the wrong shape was accepted")
    except sdrt.SdrtError as e:
        assert e.code == "INVALID_ARGUMENT", e

    if rank == 0:
        print(f"python: sdrt {sdrt.version()}, {ranks} ranks: loaded {len(buffers)} tensors "
              f"of all-MiniLM-L6-v2 tensor-parallel ({stats['bytes_read']} bytes read on rank 0), "
              f"every element checked; gathered to rank 0, bit-identical")
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
