"""The ctypes declarations of sdrt/c_api.h that the sdrt package uses, and DLPack glue.

Struct layouts follow the header field by field; each starts with struct_size, which the
library checks, so a layout that drifted from the header is refused, not misread."""

import ctypes
import ctypes.util
import numbers
import os

import numpy as np


def _find_library():
    """The shared library to load, and the places looked at (for the error)."""
    path = os.environ.get("SDRT_LIBRARY")
    if path:
        return path, [f"SDRT_LIBRARY={path}"]
    here = os.path.dirname(os.path.abspath(__file__))
    # <prefix>/lib/sdrt/python/sdrt -> <prefix>/lib/libsdrt.so
    installed = os.path.normpath(os.path.join(here, "..", "..", "..", "libsdrt.so"))
    if os.path.exists(installed):
        return installed, [installed]
    return (ctypes.util.find_library("sdrt") or "libsdrt.so",
            [installed, "the loader's search path (LD_LIBRARY_PATH, ldconfig)"])


def _load_library():
    path, looked = _find_library()
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"sdrt: cannot load the shared library libsdrt.so (looked at: {'; '.join(looked)}): "
            f"{e}. Build sdrt with -DBUILD_SHARED_LIBS=ON (the default build makes only the "
            f"static libsdrt.a) and install it, or set SDRT_LIBRARY to the path of its "
            f"libsdrt.so.") from e


lib = _load_library()

c_int64_p = ctypes.POINTER(ctypes.c_int64)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", c_int64_p), ("strides", c_int64_p),
                ("byte_offset", ctypes.c_uint64)]


class TensorInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("name", ctypes.c_char_p),
                ("dtype", DLDataType), ("dtype_name", ctypes.c_char_p),
                ("ndim", ctypes.c_int32), ("shape", c_int64_p), ("nbytes", ctypes.c_int64)]


class CommOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("timeout_seconds", ctypes.c_double)]


class DTensorSpec(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("mesh_ndim", ctypes.c_int32),
                ("mesh_shape", c_int64_p), ("mesh_ranks", c_int64_p),
                ("placements", ctypes.c_char_p), ("global_ndim", ctypes.c_int32),
                ("global_shape", c_int64_p)]


class LocalShard(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("ndim", ctypes.c_int32),
                ("local_shape", c_int64_p), ("global_offset", c_int64_p),
                ("is_box", ctypes.c_int32), ("placements", ctypes.c_char_p)]


class Stats(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t)] + [
        (f, ctypes.c_int64) for f in ("bytes_read", "bytes_kept", "reads", "bytes_sent",
                                      "bytes_received", "bytes_written", "collectives",
                                      "data_collectives")] + [("seconds", ctypes.c_double)]


class LoadOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("comm", ctypes.c_void_p),
                ("rank", ctypes.c_int32), ("strict", ctypes.c_int32),
                ("timeout_seconds", ctypes.c_double), ("staging_buffers", ctypes.c_int32),
                ("staging_bytes", ctypes.c_int64), ("direct_io", ctypes.c_int32),
                ("max_gap_bytes", ctypes.c_int64), ("stream", ctypes.c_void_p),
                ("num_missing", c_int64_p), ("num_unexpected", c_int64_p),
                ("read", ctypes.c_int32), ("bucket_bytes", ctypes.c_int64),
                ("weight_map", ctypes.c_void_p), ("readers", ctypes.c_int32),
                ("share_reads", ctypes.c_int32)]


class GatherOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("comm", ctypes.c_void_p),
                ("timeout_seconds", ctypes.c_double),
                ("ranks_only", ctypes.POINTER(ctypes.c_int32)), ("num_ranks_only", ctypes.c_int32),
                ("cpu_offload", ctypes.c_int32), ("bucket_bytes", ctypes.c_int64),
                ("stream", ctypes.c_void_p)]


def _declare(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype, f.argtypes = restype, list(argtypes)


_P = ctypes.c_void_p
_S = ctypes.c_int  # sdrt_status_t
_declare("sdrt_status_string", ctypes.c_char_p, _S)
_declare("sdrt_last_error", ctypes.c_char_p)
_declare("sdrt_get_version", ctypes.c_char_p)
_declare("sdrt_comm_create_world", _S, ctypes.POINTER(CommOptions), ctypes.POINTER(_P))
_declare("sdrt_comm_rank", _S, _P, ctypes.POINTER(ctypes.c_int))
_declare("sdrt_comm_size", _S, _P, ctypes.POINTER(ctypes.c_int))
_declare("sdrt_comm_destroy", _S, _P)
_declare("sdrt_checkpoint_open", _S, ctypes.c_char_p, ctypes.POINTER(_P))
_declare("sdrt_checkpoint_num_tensors", _S, _P, c_int64_p)
_declare("sdrt_checkpoint_tensor_info", _S, _P, ctypes.c_int64, ctypes.POINTER(TensorInfo))
_declare("sdrt_checkpoint_close", _S, _P)
_declare("sdrt_parallel_layout_place", _S, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64,
         ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int32),
         ctypes.POINTER(c_int64_p), ctypes.POINTER(DTensorSpec))
_declare("sdrt_compute_local_shape_and_global_offset", _S, ctypes.POINTER(DTensorSpec),
         ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(LocalShard))
_declare("sdrt_state_dict_create", _S, ctypes.POINTER(_P))
_declare("sdrt_state_dict_add", _S, _P, ctypes.c_char_p, ctypes.POINTER(DLTensor),
         ctypes.POINTER(DTensorSpec))
_declare("sdrt_state_dict_count", _S, _P, c_int64_p)
_declare("sdrt_state_dict_get", _S, _P, ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p),
         ctypes.POINTER(ctypes.POINTER(DLTensor)), ctypes.POINTER(ctypes.c_int))
_declare("sdrt_state_dict_destroy", _S, _P)
_declare("sdrt_get_last_stats", _S, ctypes.POINTER(Stats))
_declare("sdrt_load", _S, _P, _P, ctypes.POINTER(LoadOptions))
_declare("sdrt_gather", _S, _P, ctypes.POINTER(GatherOptions), ctypes.POINTER(_P))
_declare("sdrt_gather_write", _S, _P, ctypes.c_char_p, ctypes.POINTER(GatherOptions))


class SdrtError(RuntimeError):
    """A C call failed: `code` is the sdrt_status_t's name, the message is sdrt's."""

    def __init__(self, call, code, message):
        super().__init__(f"{call}: {code}: {message}")
        self.code = code


def _check(call, status):
    if status != 0:
        raise SdrtError(call, lib.sdrt_status_string(status).decode(),
                        (lib.sdrt_last_error() or b"").decode(errors="replace"))


def c_string(data, what):
    """`data` (bytes) for a const char* argument; ValueError naming `what` when it holds a
    NUL byte, where C would end the string (ctypes would pass it cut there)."""
    if b"\0" in data:
        raise ValueError(f"{what} {data!r} has an embedded NUL byte")
    return data


def c_int(value, bits, what):
    """`value` for a C integer of `bits` bits (signed): TypeError for a non-integer,
    ValueError out of range (ctypes would wrap it around without a word)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}")
    if not -(1 << (bits - 1)) <= int(value) < (1 << (bits - 1)):
        raise ValueError(f"{what} {value} is outside a {bits}-bit integer")
    return int(value)


def c_handle(comm, what="comm"):
    """The handle of `comm` (a Comm from world()): TypeError for anything else."""
    handle = getattr(comm, "_handle", None)
    if handle is None:
        raise TypeError(f"{what} must be a Comm from sdrt.world(), got {type(comm).__name__}")
    return handle


def c_path(path):
    """A path (str, bytes or os.PathLike) for a const char* argument (c_string's check)."""
    return c_string(os.fsencode(path), "path")


class Checkpoint:
    """An open sdrt_checkpoint_t (a context manager)."""

    def __init__(self, path):
        self.handle = _P()
        _check("sdrt_checkpoint_open",
               lib.sdrt_checkpoint_open(c_path(path), ctypes.byref(self.handle)))

    def infos(self):
        count = ctypes.c_int64()
        _check("sdrt_checkpoint_num_tensors",
               lib.sdrt_checkpoint_num_tensors(self.handle, ctypes.byref(count)))
        for i in range(count.value):
            info = TensorInfo()
            info.struct_size = ctypes.sizeof(TensorInfo)
            _check("sdrt_checkpoint_tensor_info",
                   lib.sdrt_checkpoint_tensor_info(self.handle, i, ctypes.byref(info)))
            yield _Info(info.name.decode(), info.dtype_name.decode(),
                        [info.shape[d] for d in range(info.ndim)], info.nbytes)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        lib.sdrt_checkpoint_close(self.handle)


class _Info:
    def __init__(self, name, dtype_name, shape, nbytes):
        self.name, self.dtype_name, self.shape, self.nbytes = name, dtype_name, shape, nbytes


_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def borrow(array, alive):
    """The DLTensor of `array` (anything with __dlpack__), its capsule kept in `alive`.

    The capsule is not consumed: when it is dropped its deleter runs, as DLPack says for an
    unconsumed capsule, and the producer's memory stays the producer's."""
    if not hasattr(array, "__dlpack__"):
        raise TypeError(f"a tensor must have __dlpack__ (a NumPy array, a torch tensor), got "
                        f"{type(array).__name__}")
    capsule = array.__dlpack__()
    alive.append((array, capsule))
    managed = _PyCapsule_GetPointer(capsule, b"dltensor")
    return ctypes.cast(managed, ctypes.POINTER(DLTensor))  # dl_tensor is the first field


def dtensor_spec(mesh_shape, placements, global_shape, alive, mesh_ranks=None):
    """The spec of a DTensor (its arrays kept in `alive`); mesh_ranks None: 0, 1, ...; else
    one rank per place of the mesh (ValueError otherwise: C reads product(mesh_shape))."""
    size = 1
    for m in mesh_shape:
        size *= m
    if mesh_ranks is not None and len(mesh_ranks) != size:
        raise ValueError(f"mesh_ranks {tuple(mesh_ranks)} has {len(mesh_ranks)} ranks, "
                         f"mesh_shape {tuple(mesh_shape)} {size}")
    mesh = (ctypes.c_int64 * len(mesh_shape))(*[c_int(m, 64, "mesh size") for m in mesh_shape])
    ranks = None if mesh_ranks is None else (ctypes.c_int64 * len(mesh_ranks))(
        *[c_int(r, 64, "mesh rank") for r in mesh_ranks])
    shape = (ctypes.c_int64 * max(len(global_shape), 1))(
        *[c_int(d, 64, "global shape size") for d in global_shape])
    if not isinstance(placements, str):
        raise TypeError(f"placements must be a str such as \"S(0),R\", got "
                        f"{type(placements).__name__}")
    text = c_string(placements.encode(), "placements")
    alive.extend([mesh, ranks, shape, text])
    return DTensorSpec(ctypes.sizeof(DTensorSpec), len(mesh_shape), mesh, ranks, text,
                       len(global_shape), shape)


_BFLOAT16 = DLDataType(4, 16, 1)  # kDLBfloat


def as_bfloat16(dl, alive):
    """`dl` (a DLTensor pointer) retyped bfloat16 when it is uint16, holding the same bits: a
    copy (kept in `alive`) of the struct; any other dtype is returned as it is."""
    t = dl.contents
    if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (1, 16, 1):
        return dl
    retyped = DLTensor.from_buffer_copy(t)
    retyped.dtype = _BFLOAT16
    alive.append(retyped)
    return ctypes.pointer(retyped)


_NUMPY = {(0, 8): np.int8, (0, 16): np.int16, (0, 32): np.int32, (0, 64): np.int64,
          (1, 8): np.uint8, (1, 16): np.uint16, (1, 32): np.uint32, (1, 64): np.uint64,
          (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64,
          (4, 16): np.uint16,  # bfloat16: the bits, as uint16
          (5, 64): np.complex64, (6, 8): np.bool_}


def to_numpy(dl):
    """A new NumPy array with a copy of the CPU tensor `dl` (contiguous, as sdrt's results)."""
    key = (dl.dtype.code, dl.dtype.bits)
    if key not in _NUMPY or dl.device.device_type not in (1, 3):  # kDLCPU, kDLCUDAHost
        raise TypeError(f"no NumPy array for DLPack dtype {key} on device {dl.device.device_type}")
    shape = tuple(dl.shape[d] for d in range(dl.ndim))
    dtype = np.dtype(_NUMPY[key])
    count = int(np.prod(shape, dtype=np.int64))
    out = np.empty(shape, dtype)
    if count:
        ctypes.memmove(out.ctypes.data, dl.data + dl.byte_offset, count * dtype.itemsize)
    return out


_READS = {"auto": 0, "all": 1, "root": 2}  # sdrt_read_t


def load_options(comm, rank, strict, read="auto"):
    if read not in _READS:
        raise ValueError(f"read {read!r} is not one of {sorted(_READS)}")
    o = LoadOptions()
    o.struct_size = ctypes.sizeof(LoadOptions)
    o.comm = c_handle(comm) if comm is not None else None
    o.rank = -1 if rank is None else c_int(rank, 32, "rank")
    o.strict = 1 if strict else 0
    o.staging_buffers, o.staging_bytes, o.max_gap_bytes = 2, 256 << 20, 1 << 20
    o.read, o.bucket_bytes = _READS[read], 256 << 20
    o.readers, o.share_reads = 0, 0
    return o


def gather_options(comm, ranks_only):
    o = GatherOptions()
    o.struct_size = ctypes.sizeof(GatherOptions)
    o.comm = c_handle(comm)
    o.cpu_offload, o.bucket_bytes = 1, 256 << 20
    if ranks_only is not None:
        o._ranks = (ctypes.c_int32 * max(len(ranks_only), 1))(
            *[c_int(r, 32, "ranks_only entry") for r in ranks_only])
        o.ranks_only, o.num_ranks_only = o._ranks, len(ranks_only)
    return o


def last_stats():
    s = Stats()
    s.struct_size = ctypes.sizeof(Stats)
    _check("sdrt_get_last_stats", lib.sdrt_get_last_stats(ctypes.byref(s)))
    return {f: getattr(s, f) for f, _ in Stats._fields_[1:]}
