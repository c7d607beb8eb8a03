"""The Python module (tools/python/sdrt) without MPI or a model: one process, a safetensors
file this script writes itself (the format by hand: an 8-byte little-endian header length,
the JSON header, the data).

Usage: python3 module_test.py (CTest sets SDRT_LIBRARY to the shared library and PYTHONPATH
to tools/python).

It checks that:
  * a bfloat16 tensor loads into a NumPy uint16 buffer, whole and as a Shard(0) piece, with
    the file's bits, and into a float32 buffer converted; a uint16 buffer is not taken for a
    tensor of another dtype;
  * a path or a tensor name (or placements) with an embedded NUL is refused with ValueError,
    not cut at the NUL (the names cut there exist);
  * a file whose tensor name holds a NUL byte is refused (SdrtError), not listed cut;
  * a local load defaults to rank 0; strict=True names the tensors the file lacks (KeyError)
    and loads nothing; wrong types are TypeError and integers a C field cannot hold
    ValueError, never an AttributeError or a value wrapped around;
  * `import sdrt` without a shared library raises ImportError saying how to get one;
  * place() gives a Megatron layout's homes (tp 2 x pp 2 over 4 ranks: a stage's tensors on
    its ranks, column- and row-parallel pieces), and each rank, loading alone, fills only
    the pieces it holds with the file's values at their global offsets; a layout that does
    not fit the world is SdrtError INVALID_ARGUMENT naming it.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import sdrt

# bfloat16 values exactly representable, as the high 16 bits of their float32.
_BF16_VALUES = np.array([[1.0, -2.5, 0.15625], [32768.0, -0.0, 7.0]], np.float32)
_BF16_BITS = (_BF16_VALUES.view(np.uint32) >> 16).astype(np.uint16)
_F32 = np.arange(4, dtype=np.float32) * 0.5 + 1
_U16 = np.array([1, 65535, 7], np.uint16)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype name, shape, bytes), written in order."""
    header, offset = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, data in tensors.values():
            f.write(data)


class ModuleTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="sdrt_python_")
        cls.path = os.path.join(cls.dir.name, "model.safetensors")
        write_safetensors(cls.path, {
            "w": ("BF16", _BF16_BITS.shape, _BF16_BITS.tobytes()),
            "b": ("F32", _F32.shape, _F32.tobytes()),
            "u": ("U16", _U16.shape, _U16.tobytes()),
        })

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def load(self, tensors, **kwargs):
        return sdrt.load(self.path, tensors, **kwargs)

    def test_inspect_names_bfloat16(self):
        listed = {t["name"]: (t["dtype"], tuple(t["shape"])) for t in sdrt.inspect(self.path)}
        self.assertEqual(listed, {"w": ("bfloat16", (2, 3)), "b": ("float32", (4,)),
                                  "u": ("uint16", (3,))})

    def test_bfloat16_loads_into_uint16(self):
        w = np.full((2, 3), 0xDEAD, np.uint16)
        b = np.zeros(4, np.float32)
        u = np.zeros(3, np.uint16)
        stats = self.load({"w": w, "b": b, "u": u}, rank=0)
        np.testing.assert_array_equal(w, _BF16_BITS)
        np.testing.assert_array_equal(w.view(np.uint16).astype(np.uint32) << 16,
                                      _BF16_VALUES.view(np.uint32))
        np.testing.assert_array_equal(b, _F32)
        np.testing.assert_array_equal(u, _U16)
        self.assertEqual(stats["bytes_kept"], w.nbytes + b.nbytes + u.nbytes)

    def test_bfloat16_shard_into_uint16(self):
        piece = np.full((1, 3), 0xDEAD, np.uint16)
        self.load({"w": sdrt.DTensor(piece, "S(0)", (2, 3), mesh_shape=(2,))}, rank=1)
        np.testing.assert_array_equal(piece, _BF16_BITS[1:])

    def test_float32_buffer_takes_a_bfloat16_tensor_converted(self):
        # A float buffer of another float dtype is a cast (as Tensor.to()), read all.
        for dtype in (np.float32, np.float64):
            with self.subTest(dtype=dtype.__name__):
                w = np.full((2, 3), -1, dtype)
                self.load({"w": w}, rank=0)
                np.testing.assert_array_equal(w, _BF16_VALUES.astype(dtype))

    def test_dtypes_still_checked(self):
        cases = [({"b": np.zeros(4, np.uint16)},  # uint16 stands for bfloat16 only
                  "'b': the local DTensor is uint16[4] but the checkpoint holds float32[4]")]
        for tensors, message in cases:
            with self.subTest(tensors=list(tensors)):
                try:
                    sdrt.load(self.path, tensors, rank=0)
                except sdrt.SdrtError as e:
                    self.assertEqual(e.code, "INVALID_ARGUMENT", e)
                    self.assertIn(message, str(e))
                else:
                    self.fail("a buffer of another dtype was accepted")

    def test_embedded_nul_refused_not_cut(self):
        buffers = {"w": np.zeros((2, 3), np.uint16)}
        cases = [
            ("path", lambda: sdrt.inspect(self.path + "\0.ignored")),
            ("path", lambda: sdrt.inspect(os.fsencode(self.path) + b"\0")),
            ("path", lambda: sdrt.load(self.path + "\0", buffers, rank=0)),
            ("tensor name", lambda: sdrt.load(self.path, {"w\0x": buffers["w"]}, rank=0)),
            ("placements", lambda: sdrt.load(
                self.path, {"w": sdrt.DTensor(buffers["w"], "R\0S(0)", (2, 3))}, rank=0)),
        ]
        for what, call in cases:
            with self.subTest(what=what):
                with self.assertRaisesRegex(ValueError, f"^{what} .* has an embedded NUL byte"):
                    call()
        self.assertFalse(buffers["w"].any(), "a refused call wrote the buffer")

    def test_a_nul_byte_in_a_file_s_name_is_refused(self):
        # "w\u0000x" is valid JSON: the name is refused, not cut to "w" (which would shadow
        # or stand in for another tensor).
        path = os.path.join(self.dir.name, "nul.safetensors")
        write_safetensors(path, {"w\0x": ("F32", (2,), np.ones(2, np.float32).tobytes())})
        with self.assertRaisesRegex(sdrt.SdrtError, "its name holds a NUL byte"):
            sdrt.inspect(path)

    def test_local_load_defaults_to_rank_0_and_strict_names_what_is_missing(self):
        b = np.zeros(4, np.float32)
        self.load({"b": b})
        np.testing.assert_array_equal(b, _F32)
        typo = np.zeros(4, np.float32)
        with self.assertRaisesRegex(KeyError, "no tensor b_typo"):
            self.load({"b_typo": typo}, strict=True)
        self.load({"b_typo": typo})  # not strict: left as it is
        self.assertFalse(typo.any())

    def test_wrong_types_and_integers_out_of_range_are_refused(self):
        b = np.zeros(4, np.float32)
        cases = [
            (ValueError, "rank 4294967297 is outside a 32-bit integer",
             lambda: self.load({"b": b}, rank=2**32 + 1)),
            (TypeError, "rank must be an integer", lambda: self.load({"b": b}, rank="0")),
            (TypeError, "a tensor name must be a str", lambda: self.load({1: b})),
            (TypeError, "must have __dlpack__", lambda: self.load({"b": [0.0] * 4})),
            (TypeError, "comm must be a Comm", lambda: self.load({"b": b}, comm=object())),
            (TypeError, "comm must be a Comm", lambda: sdrt.gather({"b": b}, None)),
            (TypeError, "placements must be a str",
             lambda: self.load({"b": sdrt.DTensor(b, None, (4,))})),
            (ValueError, "world_size 18446744073709551616 is outside",
             lambda: sdrt.place("fsdp:dp=4", 2**64, {"a": (8, 3)})),
            (ValueError, "a's shape .* is outside",
             lambda: sdrt.place("fsdp:dp=4", 4, {"a": (2**64 + 8, 3)})),
        ]
        for error, message, call in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(error, message):
                    call()
        self.assertFalse(b.any(), "a refused call wrote the buffer")

    def test_import_without_library_says_how_to_get_one(self):
        missing = os.path.join(self.dir.name, "no", "libsdrt.so")
        env = dict(os.environ, SDRT_LIBRARY=missing)
        run = subprocess.run([sys.executable, "-c", "import sdrt"], env=env,
                             capture_output=True, text=True, timeout=60)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("ImportError: sdrt: cannot load the shared library", run.stderr)
        for text in (f"SDRT_LIBRARY={missing}", "-DBUILD_SHARED_LIBS=ON",
                     "set SDRT_LIBRARY"):
            self.assertIn(text, run.stderr)

    def test_each_pipeline_stage_loads_its_own_pieces(self):
        full = {"model.embed_tokens.weight": np.arange(12, dtype=np.float32).reshape(6, 2)}
        for layer in range(2):
            at = f"model.layers.{layer}."
            full[at + "self_attn.q_proj.weight"] = np.arange(16, dtype=np.float32).reshape(
                4, 4) + 100 * (layer + 1)
            full[at + "self_attn.o_proj.weight"] = np.arange(16, dtype=np.float32).reshape(
                4, 4) + 1000 * (layer + 1)
        full["lm_head.weight"] = np.arange(12, dtype=np.float32).reshape(6, 2) + 5000
        path = os.path.join(self.dir.name, "pipelined.safetensors")
        write_safetensors(path, {name: ("F32", a.shape, a.tobytes()) for name, a in full.items()})
        homes = sdrt.place("megatron:tp=2,pp=2", 4, {n: a.shape for n, a in full.items()})
        self.assertEqual(homes["model.embed_tokens.weight"].mesh_ranks, (0, 1))
        self.assertEqual(homes["model.layers.1.self_attn.q_proj.weight"].mesh_ranks, (2, 3))
        self.assertEqual(homes["lm_head.weight"].mesh_ranks, (2, 3))
        self.assertEqual(homes["model.layers.0.self_attn.o_proj.weight"].local_piece(1),
                         ((4, 2), (0, 2)))  # row parallel: S(1) over tp
        held = 0
        for rank in range(4):
            mine = {}
            for name, home in homes.items():
                if home.holds(rank):
                    shape, offset = home.local_piece(rank)
                    mine[name] = (np.full(shape, -1, np.float32), offset)
            sdrt.load(path, {n: homes[n].dtensor(piece) for n, (piece, _) in mine.items()},
                      rank=rank)
            for name, (piece, offset) in mine.items():
                box = tuple(slice(o, o + n) for o, n in zip(offset, piece.shape))
                np.testing.assert_array_equal(piece, full[name][box], err_msg=name)
            held += len(mine)
        self.assertEqual(held, 2 * len(full))  # tp 2: each tensor on its stage's two ranks
        with self.assertRaisesRegex(sdrt.SdrtError, "INVALID_ARGUMENT: .*megatron:tp=3"):
            sdrt.place("megatron:tp=3", 4, {n: a.shape for n, a in full.items()})
        # A mesh's ranks are one per place of its shape; read is one of sdrt_read_t's.
        piece = np.zeros((3, 2), np.float32)
        for ranks, shape in (((0,), (2,)), ((0, 1, 2), (2,))):
            with self.assertRaisesRegex(ValueError, "^mesh_ranks .* ranks, mesh_shape"):
                sdrt.load(path, {"lm_head.weight": sdrt.DTensor(
                    piece, "S(0)", (6, 2), mesh_shape=shape, mesh_ranks=ranks)}, rank=0)
        with self.assertRaisesRegex(ValueError, "^read 'every' is not one of"):
            sdrt.load(path, {"lm_head.weight": piece}, rank=0, read="every")
        # mesh_ranks alone make a 1-D mesh of them.
        sdrt.load(path, {"lm_head.weight": sdrt.DTensor(piece, "S(0)", (6, 2),
                                                        mesh_ranks=(5, 9))}, rank=9, read="all")
        np.testing.assert_array_equal(piece, full["lm_head.weight"][3:])


if __name__ == "__main__":
    unittest.main()
