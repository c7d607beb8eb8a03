"""Golden data for sdrt's float conversions (tensor/internal/float_cast.h), from PyTorch.

Run by hand (never in CI), from the repository root, with a virtualenv holding torch:
    VENV/bin/python tests/golden/make_float_cast_golden.py
Writes tests/data/float_cast/expected.json:
  - "inputs": float32 bit patterns (hex) chosen to hit every rounding case of every format:
    signed zeros, infinities, NaNs, float32 subnormals, each format's smallest subnormal,
    largest finite value and overflow threshold, exact ties (which round to even) and the
    values just beside them, and seeded random values over the whole exponent range.
  - "narrow": per dtype, the code PyTorch's `x.to(dtype)` gives for each input (hex).
  - "widen": per dtype, `codes.view(dtype).to(torch.float32)` (every NaN as 0x7fc00000) for
    every code of the 8-bit formats, and for every code of the 16-bit formats as an XXH64 of the 65,536 results
    (little-endian float32 bits) plus the first result of each 256-code row, so that a
    failure shows where.
  - "inputs_f64": float64 bit patterns (hex): signed zeros, infinities, a NaN, float64
    subnormals, float32's overflow threshold and the values beside it, every float32 input
    above as a float64 and beside it by a float32 half-ulp and a little more or less (where a
    narrowing through float32 rounds twice and a direct one would not), and seeded values.
  - "narrow_f64": per dtype (float32 and the formats above), the code PyTorch's
    `x.to(dtype)` gives for each float64 input (hex).
The C++ test (tests/tensor/float_cast_golden_test.cc) compares sdrt's conversions with it.
"""
import json
import os
import random
import struct

import numpy as np
import torch
import xxhash

OUT = os.path.join("tests", "data", "float_cast")

NARROW = {
    "bfloat16": (torch.bfloat16, torch.int16, 16),
    "float16": (torch.float16, torch.int16, 16),
    "float8_e4m3fn": (torch.float8_e4m3fn, torch.uint8, 8),
    "float8_e5m2": (torch.float8_e5m2, torch.uint8, 8),
    "float8_e8m0fnu": (torch.float8_e8m0fnu, torch.uint8, 8),
}


def bits(f):
    return struct.unpack("<I", struct.pack("<f", f))[0]


def from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def inputs():
    out = set()
    for b in (0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
              0x7F800001, 0xFFA00000, 0x7FBFFFFF, 0x00000001, 0x807FFFFF, 0x00400000,
              0x00400001, 0x00600000, 0x00200000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000):
        out.add(b)
    # Every representable value of each format, and the ties and neighbours between them.
    for name, (dtype, view, width) in NARROW.items():
        if width == 16:
            # Every 331st code is enough for its ties; all of them are widened below.
            raw = np.arange(0, 65536, 331, dtype=np.uint32).astype(np.uint16).view(np.int16)
            values = torch.tensor(raw).view(dtype).to(torch.float32)
        else:
            values = torch.arange(0, 256, dtype=torch.int64).to(torch.uint8).view(dtype)
            values = values.to(torch.float32)
        finite = sorted({float(v) for v in values.tolist() if np.isfinite(v)})
        for v in finite:
            b = bits(v)
            for d in (-1, 0, 1):
                out.add((b + d) & 0xFFFFFFFF)
        for lo, hi in zip(finite, finite[1:]):
            if lo >= 0 and hi > 0:
                mid = (lo + hi) / 2  # exact in float64; rounds to float32 only if needed
                m = bits(mid)
                for d in (-1, 0, 1):
                    out.add((m + d) & 0xFFFFFFFF)
                    out.add((m + d) ^ 0x80000000)
    # Overflow thresholds, named.
    for v in (448.0, 449.0, 464.0, 464.0001, 470.0, 480.0, 57344.0, 61439.0, 61440.0, 65504.0,
              65519.0, 65520.0, 3.3895314e38, 1.5, 3.0, 0.75, 1.5 * 2.0 ** -127, 2.0 ** -127,
              2.0 ** 127, 1.5 * 2.0 ** 127, 1.7014118e38):
        out.add(bits(v))
        out.add(bits(-v))
    rng = random.Random(29)
    for _ in range(1500):
        out.add(rng.getrandbits(32))
    for _ in range(500):  # values a model holds: around 1, with long mantissas
        out.add(bits(rng.gauss(0.0, 1.0)))
    return sorted(out)


def double_bits(f):
    return struct.unpack("<Q", struct.pack("<d", f))[0]


def double_from_bits(b):
    return struct.unpack("<d", struct.pack("<Q", b))[0]


def inputs_f64(ins32):
    out = {0x0000000000000000, 0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
           0x7FF8000000000000, 0x0000000000000001, 0x000FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF,
           0x8010000000000000}
    flt_max = 3.4028234663852886e38
    for v in (flt_max, flt_max * (1 + 2.0 ** -25), flt_max * (1 + 2.0 ** -24),
              flt_max * (1 + 2.0 ** -24 - 2.0 ** -40), 2.0 ** -149, 2.0 ** -150,
              2.0 ** -150 * (1 + 2.0 ** -30), 2.0 ** -151):
        out.add(double_bits(v))
        out.add(double_bits(-v))
    for b in ins32[::16]:
        f = from_bits(b)
        if not np.isfinite(f) or f == 0:
            continue
        d = double_bits(f)
        out.add(d)
        # A float32 half-ulp is 2^28 float64 ulps (for a normal float32): the tie between
        # float32 values and the values 2^20 float64 ulps beside it.
        for off in (1 << 28, (1 << 28) + (1 << 20), (1 << 28) - (1 << 20)):
            for sign in (1, -1):
                n = d + sign * off
                if 0 <= n < 0x7FF0000000000000 or 0x8000000000000000 <= n < 0xFFF0000000000000:
                    out.add(n)
    rng = random.Random(64)
    for _ in range(600):
        e = rng.randint(1023 - 160, 1023 + 140)
        out.add((rng.getrandbits(1) << 63) | (e << 52) | rng.getrandbits(52))
    for _ in range(200):
        out.add(double_bits(rng.gauss(0.0, 1.0)))
    return sorted(out)


def main():
    os.makedirs(OUT, exist_ok=True)
    ins = inputs()
    x = torch.tensor(np.array(ins, dtype=np.uint32).view(np.float32))
    narrow = {}
    for name, (dtype, view, width) in NARROW.items():
        y = x.to(dtype)
        codes = y.view(torch.uint8 if width == 8 else torch.int16).numpy()
        if width == 16:
            codes = codes.view(np.uint16)
        narrow[name] = ["%0*x" % (width // 4, int(c)) for c in codes]
    widen = {}
    for name, (dtype, view, width) in NARROW.items():
        if width == 8:
            codes = torch.arange(0, 256, dtype=torch.int64).to(torch.uint8)
        else:
            codes = torch.tensor(np.arange(0, 65536, dtype=np.uint32).astype(np.uint16).view(np.int16))
        widened = codes.view(dtype).to(torch.float32).numpy()
        # A NaN's bits are not part of the contract (PyTorch's differ by format and CPU
        # path): every NaN is written as the quiet NaN 0x7fc00000, and the test does the same.
        f = np.where(np.isnan(widened), np.float32(np.nan), widened).view(np.uint32)
        f = np.where(np.isnan(widened), np.uint32(0x7FC00000), f)
        entry = {}
        if width == 8:
            entry["all"] = ["%08x" % int(v) for v in f]
        else:
            entry["xxh64"] = xxhash.xxh64(f.astype("<u4").tobytes()).hexdigest()
            entry["rows"] = ["%08x" % int(v) for v in f[::256]]
        widen[name] = entry
    ins64 = inputs_f64(ins)
    x64 = torch.tensor(np.array(ins64, dtype=np.uint64).view(np.float64))
    as_f32 = x64.to(torch.float32).numpy().view(np.uint32)
    narrow_f64 = {"float32": ["%08x" % int(c) for c in as_f32]}
    for name, (dtype, view, width) in NARROW.items():
        codes = x64.to(dtype).view(torch.uint8 if width == 8 else torch.int16).numpy()
        if width == 16:
            codes = codes.view(np.uint16)
        narrow_f64[name] = ["%0*x" % (width // 4, int(c)) for c in codes]
    doc = {
        "torch": torch.__version__,
        "inputs": ["%08x" % b for b in ins],
        "narrow": narrow,
        "widen": widen,
        "inputs_f64": ["%016x" % b for b in ins64],
        "narrow_f64": narrow_f64,
    }
    with open(os.path.join(OUT, "expected.json"), "w") as fh:
        json.dump(doc, fh, separators=(",", ":"))
        fh.write("\n")
    print("wrote", len(ins), "inputs with torch", torch.__version__)


if __name__ == "__main__":
    main()
