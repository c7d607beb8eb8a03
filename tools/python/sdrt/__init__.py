"""sdrt from Python: load, gather and inspect checkpoints through sdrt's C API (ctypes).

For Python-side engines and benchmarks that want sdrt's parallel load (every rank reads its
own bytes) and its gather without PyTorch's distributed stack. The module is a thin layer
over ``sdrt/c_api.h``: every call here is one C call, documented there.

Tensors go in as any object with ``__dlpack__`` (NumPy arrays, torch tensors): sdrt borrows
their memory and writes into it in place (load); they must stay alive during the call.
Results (gather) come back as new NumPy arrays, copied out of sdrt's memory (bfloat16
becomes uint16 holding the same bits; NumPy has no bfloat16), and load() fills uint16
buffers from bfloat16 tensors the same way. Paths and names are C strings: one holding a
NUL byte is refused (ValueError), never cut there.

The shared library is found from ``SDRT_LIBRARY`` (a path), else beside this package when
installed (``<prefix>/lib/sdrt/python/sdrt`` -> ``<prefix>/lib/libsdrt.so``), else by the
loader's search path. It needs a build with ``-DBUILD_SHARED_LIBS=ON``; ``import sdrt``
raises ImportError saying so when there is none.

place() gives each tensor's home under a parallel layout (Megatron, vLLM, FSDP: its mesh of
global ranks and its placements), so that a pipelined engine allocates and loads only the
pieces of its own stage and experts.

Under ``mpiexec -n N python3 prog.py``, ``world()`` is the communicator of all N ranks (MPI is
initialized by the library; no mpi4py needed).
"""

import ctypes

from sdrt import _c
from sdrt._c import SdrtError, _check

__all__ = ["Comm", "DTensor", "Home", "SdrtError", "world", "inspect", "place", "load",
           "gather", "gather_write", "version"]


def _name(name):
    """A tensor name as bytes: TypeError for anything but a str."""
    if not isinstance(name, str):
        raise TypeError(f"a tensor name must be a str, got {type(name).__name__}")
    return name.encode()


def version():
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return _c.lib.sdrt_get_version().decode()


class Comm:
    """A communicator (sdrt_comm_t). Made by world(); close() or garbage collection frees it."""

    def __init__(self, handle):
        self._handle = handle
        r, s = ctypes.c_int(), ctypes.c_int()
        _check("sdrt_comm_rank", _c.lib.sdrt_comm_rank(handle, ctypes.byref(r)))
        _check("sdrt_comm_size", _c.lib.sdrt_comm_size(handle, ctypes.byref(s)))
        self.rank, self.size = r.value, s.value

    def close(self):
        if self._handle:
            _c.lib.sdrt_comm_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()


def world(timeout=600.0):
    """All ranks of the MPI job (collective: every rank calls it). timeout: seconds, the
    deadline of every collective over it."""
    options = _c.CommOptions(ctypes.sizeof(_c.CommOptions), float(timeout))
    handle = ctypes.c_void_p()
    _check("sdrt_comm_create_world",
           _c.lib.sdrt_comm_create_world(ctypes.byref(options), ctypes.byref(handle)))
    return Comm(handle)


class DTensor:
    """A local tensor laid out on a device mesh: ``placements`` as PyTorch prints them
    ("S(0)", "R", "S(0),R" for 2-D meshes), ``global_shape`` the full tensor's shape,
    ``mesh_shape`` the mesh (default: one dimension over every rank of the call's comm),
    ``mesh_ranks`` its ranks in row-major order (default: 0, 1, ...; a pipeline stage's
    ranks, as place() gives them)."""

    def __init__(self, local, placements, global_shape, mesh_shape=None, mesh_ranks=None):
        self.local, self.placements = local, placements
        self.global_shape, self.mesh_shape = tuple(global_shape), mesh_shape
        self.mesh_ranks = None if mesh_ranks is None else tuple(mesh_ranks)


class Home:
    """Where one tensor lives under a parallel layout (place()): ``mesh_shape`` and
    ``mesh_ranks`` (the global ranks holding it, row-major), ``placements`` as PyTorch
    prints them, ``global_shape``."""

    def __init__(self, mesh_shape, mesh_ranks, placements, global_shape):
        self.mesh_shape, self.mesh_ranks = tuple(mesh_shape), tuple(mesh_ranks)
        self.placements, self.global_shape = placements, tuple(global_shape)

    def holds(self, rank):
        """Whether global ``rank`` holds a piece of the tensor."""
        return rank in self.mesh_ranks

    def local_piece(self, rank):
        """``rank``'s piece: (local shape, global offset), as PyTorch's
        compute_local_shape_and_global_offset gives them (one C call, local)."""
        alive = []
        spec = _c.dtensor_spec(self.mesh_shape, self.placements, self.global_shape, alive,
                               self.mesh_ranks)
        out = _c.LocalShard(ctypes.sizeof(_c.LocalShard))
        _check("sdrt_compute_local_shape_and_global_offset",
               _c.lib.sdrt_compute_local_shape_and_global_offset(
                   ctypes.byref(spec), None, None, _c.c_int(rank, 64, "rank"),
                   ctypes.byref(out)))
        n = len(self.global_shape)
        offset = tuple(out.global_offset[i] for i in range(n)) if out.global_offset else ()
        return tuple(out.local_shape[i] for i in range(out.ndim)), offset

    def dtensor(self, local):
        """``local`` (this rank's piece) as a DTensor on this home."""
        return DTensor(local, self.placements, self.global_shape, self.mesh_shape,
                       self.mesh_ranks)


def place(description, world_size, tensors, first_rank=0):
    """Where each of a model's ``tensors`` (name -> shape, in the model's order: layer and
    expert indices in the names decide pipeline stages and expert owners) lives when a
    framework lays the model out: ``description`` as "megatron:tp=4,pp=8,ep=16",
    "vllm:tp=8,dp=16", "fsdp:dp=64" or "fsdp-tp:dp=8,tp=8" over ``world_size`` ranks from
    global rank ``first_rank`` (sdrt_parallel_layout_place; docs/LAYOUTS.md). Returns name ->
    Home. Local; no data."""
    if not isinstance(description, str) or not isinstance(tensors, dict):
        raise TypeError("place(description: str, world_size: int, tensors: dict name -> shape)")
    names = [_c.c_string(_name(name), "tensor name") for name in tensors]
    shapes = [(ctypes.c_int64 * max(len(s), 1))(*[_c.c_int(d, 64, f"{n}'s shape") for d in s])
              for n, s in tensors.items()]
    n = len(names)
    specs = (_c.DTensorSpec * max(n, 1))()
    for spec in specs:
        spec.struct_size = ctypes.sizeof(_c.DTensorSpec)
    _check("sdrt_parallel_layout_place", _c.lib.sdrt_parallel_layout_place(
        _c.c_string(description.encode(), "description"), _c.c_int(world_size, 64, "world_size"),
        _c.c_int(first_rank, 64, "first_rank"), n,
        (ctypes.c_char_p * max(n, 1))(*names),
        (ctypes.c_int32 * max(n, 1))(*[len(s) for s in tensors.values()]),
        (_c.c_int64_p * max(n, 1))(*[ctypes.cast(s, _c.c_int64_p) for s in shapes]),
        specs))
    homes = {}
    for (name, shape), spec in zip(tensors.items(), specs):
        mesh = [spec.mesh_shape[d] for d in range(spec.mesh_ndim)]
        size = 1
        for m in mesh:
            size *= m
        ranks = [spec.mesh_ranks[k] for k in range(size)]
        homes[name] = Home(mesh, ranks, spec.placements.decode(), shape)
    return homes


def inspect(path):
    """The tensors of a checkpoint (a .safetensors file, a Hugging Face folder or an sdrt
    sharded folder), in file order: a list of dicts with name, dtype (PyTorch's name),
    shape (global) and nbytes. Local; no tensor byte is read."""
    with _c.Checkpoint(path) as ckpt:
        return [{"name": i.name, "dtype": i.dtype_name, "shape": i.shape, "nbytes": i.nbytes}
                for i in ckpt.infos()]


class _StateDict:
    """An sdrt_state_dict_t over borrowed tensors; keeps their DLPack capsules alive. Entries
    named in ``bfloat16`` that are uint16 arrays are handed to sdrt as bfloat16."""

    def __init__(self, tensors, comm, bfloat16=frozenset()):
        self.handle = ctypes.c_void_p()
        _check("sdrt_state_dict_create", _c.lib.sdrt_state_dict_create(ctypes.byref(self.handle)))
        self._alive = []
        try:
            for name, value in tensors.items():
                self._add(name, value, comm, name in bfloat16)
        except BaseException:
            self.close()
            raise

    def _add(self, name, value, comm, bfloat16):
        c_name = _c.c_string(_name(name), "tensor name")
        spec = None
        if isinstance(value, DTensor):
            ranks = value.mesh_ranks
            mesh = value.mesh_shape
            if mesh is None:  # an empty tuple is a mesh too (and refused by the library)
                mesh = ((len(ranks),) if ranks is not None
                        else (comm.size,) if comm is not None else (1,))
            spec = _c.dtensor_spec(mesh, value.placements, value.global_shape, self._alive,
                                   value.mesh_ranks)
            value = value.local
        dl = _c.borrow(value, self._alive)
        if bfloat16:
            dl = _c.as_bfloat16(dl, self._alive)
        _check(f"sdrt_state_dict_add({name!r})",
               _c.lib.sdrt_state_dict_add(self.handle, c_name, dl,
                                          ctypes.byref(spec) if spec else None))

    def arrays(self):
        """Every entry as a new NumPy array (a copy)."""
        count = ctypes.c_int64()
        _check("sdrt_state_dict_count",
               _c.lib.sdrt_state_dict_count(self.handle, ctypes.byref(count)))
        out = {}
        for i in range(count.value):
            name, dl = ctypes.c_char_p(), ctypes.POINTER(_c.DLTensor)()
            _check("sdrt_state_dict_get", _c.lib.sdrt_state_dict_get(
                self.handle, i, ctypes.byref(name), ctypes.byref(dl), None))
            out[name.value.decode()] = _c.to_numpy(dl.contents)
        return out

    def close(self):
        if self.handle:
            _c.lib.sdrt_state_dict_destroy(self.handle)
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def load(path, tensors, comm=None, rank=None, strict=False, read="auto"):
    """Fills ``tensors`` (name -> array or DTensor of arrays) from the checkpoint at
    ``path`` in place: each rank reads only its own pieces' bytes (sdrt_load). With
    ``comm`` the call is collective over it; without, it is local and ``rank`` is this
    process's rank in the meshes (default 0). ``strict``: a name of ``tensors`` that the
    checkpoint lacks raises KeyError naming them, before anything is read (as PyTorch's
    load_state_dict(strict=True)); otherwise such tensors are left as they are. ``read``:
    "all" (every rank reads its own bytes: the one for a layout whose ranks hold different
    tensors, as place() gives), "root" (rank 0 reads and broadcasts) or "auto" (all when
    every rank sees the same files). A bfloat16 tensor loads into a uint16 array (its bits,
    as gather() returns bfloat16). Returns the call's figures (bytes_read, bytes_kept,
    reads, seconds). A wrong type is TypeError, an integer a C field cannot hold ValueError,
    what the library refuses SdrtError."""
    if comm is None and rank is None:
        rank = 0
    with _c.Checkpoint(path) as ckpt:
        infos = list(ckpt.infos())
        if strict:
            missing = sorted(set(tensors) - {i.name for i in infos})
            if missing:
                raise KeyError(f"{path}: the checkpoint has no tensor {', '.join(missing)}")
        bfloat16 = {i.name for i in infos if i.dtype_name == "bfloat16"}
        with _StateDict(tensors, comm, bfloat16) as sd:
            options = _c.load_options(comm, rank, strict, read)
            _check("sdrt_load", _c.lib.sdrt_load(ckpt.handle, sd.handle, ctypes.byref(options)))
            return _c.last_stats()


def gather(tensors, comm, ranks_only=None):
    """Every DTensor of ``tensors`` gathered into its full tensor (sdrt_gather with
    cpu_offload; mirrors torch's _gather_state_dict). Collective over ``comm``. Returns a
    dict of new NumPy arrays on the ranks in ``ranks_only`` (None or empty: every rank, as
    PyTorch's empty tuple), {} on the others."""
    with _StateDict(tensors, comm) as sd:
        options = _c.gather_options(comm, ranks_only)
        out = _StateDict({}, comm)
        try:
            _check("sdrt_gather", _c.lib.sdrt_gather(sd.handle, ctypes.byref(options),
                                                     ctypes.byref(out.handle)))
            return out.arrays()
        finally:
            out.close()


def gather_write(tensors, path, comm):
    """Gathers as gather() does and writes the full tensors to the safetensors file
    ``path`` on rank 0 (sdrt_gather_write; one bucket of full data at a time). Collective."""
    with _StateDict(tensors, comm) as sd:
        options = _c.gather_options(comm, None)
        _check("sdrt_gather_write",
               _c.lib.sdrt_gather_write(sd.handle, _c.c_path(path), ctypes.byref(options)))
