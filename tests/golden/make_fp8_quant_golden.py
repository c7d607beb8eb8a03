"""Golden data for sdrt's block FP8 quantization (tensor/internal/fp8_scale.h), from PyTorch.

Run by hand (never in CI), from the repository root, with a virtualenv holding torch:
    VENV/bin/python tests/golden/make_fp8_quant_golden.py
Writes tests/data/fp8_quant/expected.json (the torch version that made it is recorded):
  {"torch_version": ..., "cases": [{"name", "dtype", "fp8", "block", "scale_format",
   "x", "q", "scales", "dequantized"}]}
with the tensors in the shared golden encoding (golden_encode.encode_tensor). The recipe
(DeepSeek-V3 style block FP8, issue 30), in plain torch ops:
  - x is a 2-D [rows, cols] tensor of bfloat16, float16 or float32; "block" is 128 (tiles of
    128 x 128, smaller at the right and bottom edges) or 0 (one tile: the whole tensor).
  - per tile: amax = tile.float().abs().amax(); scale = amax / finfo(fp8).max in float32;
    an all-zero tile gets scale 1.
  - scale_format "f32": that scale. "e8m0": the scale rounded UP to a power of two (the
    smallest 2^k >= scale, exactly, from the float32 bits via torch.frexp; a power of two
    stays; below e8m0's smallest value 2^-127 it becomes 2^-127), stored as float8_e8m0fnu,
    and the codes are made with that rounded scale. (torch's own `.to(float8_e8m0fnu)`
    rounds to nearest instead, so it is not used for the rounding.)
  - q = (tile.float() / scale).to(fp8), fp8 float8_e4m3fn or float8_e5m2.
  - dequantized = (q.float() * scale).to(x.dtype).
"scales" is float32 [ceil(rows / 128), ceil(cols / 128)] ([1, 1] per tensor), or that
shape of float8_e8m0fnu for "e8m0". The inputs are seeded randn with a different magnitude
per tile and per row (so scales differ per tile and small values reach fp8's subnormals and
zero), an all-zero tile (with some -0.0), values on exact rounding ties of the fp8 code
(where the scale is a power of two by construction), amaxes for which x / scale passes the fp8
maximum by a rounding (saturation), an all-zero tensor and a tensor so small
that its float32 scale is subnormal. Before writing, the script checks its tile loop against
a second, vectorized construction bit for bit, and after writing it reads the file back and
checks the error bounds, the zero tiles and the ties.
The C++ test compares tensor/internal/fp8_scale.h's QuantizeMatrix / DequantizeMatrix with it.
"""
import json
import math
import os

import torch

from golden_encode import encode_tensor

OUT = os.path.join("tests", "data", "fp8_quant")
B = 128
FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# One magnitude per 128 x 128 tile (tile t = ti * tiles_across + tj), so neighbouring tiles
# have scales 10^3 apart.
TILE_MAGS = [1.0, 1e-3, 1e3, 1e-2, 1e2, 1e-1, 1e1]

# e4m3fn / e5m2 codes 1..126 / 1..123 are the positive finite values; the midpoints between
# consecutive ones (and between 0 and the smallest) are exact rounding ties.
def fp8_ties(fp8):
    top = 126 if fp8 == torch.float8_e4m3fn else 123
    vals = torch.arange(0, top + 1, dtype=torch.int64).to(torch.uint8).view(fp8).double()
    return ((vals[:-1] + vals[1:]) / 2).tolist()


def make_x(rows, cols, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g, dtype=torch.float32)
    ti = torch.arange(rows) // B
    tj = torch.arange(cols) // B
    ncols = (cols + B - 1) // B
    tile_mag = torch.tensor(TILE_MAGS)[(ti[:, None] * ncols + tj[None, :]) % len(TILE_MAGS)]
    row_mag = 2.0 ** ((torch.arange(rows) % 9) - 4).float()  # 2^-4 .. 2^4 within a tile
    return x * tile_mag * row_mag[:, None]


def grid_x():
    """[130, 132]: 2 x 2 tiles (128 x 128, 128 x 4, 2 x 128, 2 x 4)."""
    x = make_x(130, 132, torch.float32, 1301)
    x[0:128, 128:132] = 0.0  # the all-zero tile, with some negative zeros
    x[0:128:5, 129] = -0.0
    # Tile (1, 0), rows 128..129: amax exactly 56 = 448 / 8, so its e4m3fn scale is 2^-3 in
    # both formats and x / scale is exact. Row 128: +-56 and every e4m3fn tie / 8 (126 of
    # them, alternating signs); row 129 small random values.
    ties = fp8_ties(torch.float8_e4m3fn)
    row = [-56.0] + [t / 8 * (1 if i % 2 == 0 else -1) for i, t in enumerate(ties)] + [56.0]
    x[128, 0:128] = torch.tensor(row, dtype=torch.float32)
    x[129, 0:128] = torch.randn(128, generator=torch.Generator().manual_seed(1302)).clamp(-4, 4)
    return x.to(torch.bfloat16)


def small_e5m2_x():
    """[5, 7] with amax 56 = 57344 / 2^10: scale 2^-10, and e5m2 ties / 2^10 in row 0."""
    x = make_x(5, 7, torch.float32, 57).clamp(-12, 12)
    x[0] = torch.tensor([56.0, 1.125 / 1024, -1.375 / 1024, 52.0, 2.0 ** -27, -3 * 2.0 ** -27,
                         -56.0])
    return x.to(torch.bfloat16)


def small_e8m0_x():
    """[5, 7] f32, amax 18.75: scale 18.75 / 448 rounds up to 2^-4; e4m3fn ties * 2^-4 in row 0."""
    x = make_x(5, 7, torch.float32, 88).clamp(-16, 16)
    x[0] = torch.tensor([18.75, 1.0625 / 16, -17.0, 3 * 2.0 ** -14, -(2.0 ** -14), 1.1875 / 16,
                         -13.0 / 16])
    return x


def cases():
    grid = grid_x()
    # An amax a with a / (a / max) > max in float32 (about 1 value in 10 does that; these two
    # for both formats): x / scale passes 448 (57344) and the cast saturates (rounds) to it.
    wide = make_x(5, 256, torch.float32, 5256)
    wide[2, 3] = -7.3125
    wide_bf16 = wide.to(torch.bfloat16)
    tall = make_x(128, 5, torch.float32, 1285).to(torch.float16)
    small = make_x(5, 7, torch.float32, 57).clamp(-4, 4)
    small[1, 2] = 4.53125
    small = small.to(torch.bfloat16)
    zero = torch.tensor([[0.0, -0.0, 0.0, 0.0], [0.0, 0.0, -0.0, 0.0], [-0.0, 0.0, 0.0, 0.0]],
                        dtype=torch.bfloat16)
    # amax 1.5 * 2^-120: scale 1.5 * 2^-120 / 448 is a float32 subnormal (about 2^-128.2),
    # rounded up to 2^-128, which e8m0 cannot hold: its scale is 2^-127.
    tiny = (torch.tensor([[1.5, -1.0, 0.25], [2.0 ** -8, -0.75, 1.25]]) * 2.0 ** -120).to(
        torch.bfloat16)
    e4, e5 = "float8_e4m3fn", "float8_e5m2"
    return [
        ("g130x132_bf16_e4m3fn_b128_f32", grid, e4, B, "f32"),
        ("g130x132_bf16_e4m3fn_b128_e8m0", grid, e4, B, "e8m0"),
        ("s5x256_f32_e4m3fn_b128_f32", wide, e4, B, "f32"),
        ("s128x5_f16_e4m3fn_b128_f32", tall, e4, B, "f32"),
        ("s5x7_bf16_e4m3fn_b128_f32", small, e4, B, "f32"),
        ("s5x7_bf16_e5m2_b128_f32", small_e5m2_x(), e5, B, "f32"),
        ("s5x256_bf16_e4m3fn_tensor_f32", wide_bf16, e4, 0, "f32"),
        ("s5x256_bf16_e5m2_tensor_f32", wide_bf16, e5, 0, "f32"),
        ("s5x7_f32_e4m3fn_tensor_e8m0", small_e8m0_x(), e4, 0, "e8m0"),
        ("s3x4_bf16_e4m3fn_tensor_f32_zero", zero, e4, 0, "f32"),
        ("s2x3_bf16_e4m3fn_tensor_f32_tiny", tiny, e4, 0, "f32"),
        ("s2x3_bf16_e4m3fn_tensor_e8m0_tiny", tiny, e4, 0, "e8m0"),
    ]


def round_up_e8m0(s):
    """The float8_e8m0fnu code of the smallest power of two >= s (a positive float32 0-dim
    tensor): s = m * 2^e with m in [0.5, 1); that power is 2^(e-1) when m == 0.5, else 2^e;
    2^-127 (code 0) when smaller than that. Exact: frexp reads the float32's bits."""
    m, e = torch.frexp(s)
    k = int(e) - (1 if float(m) == 0.5 else 0)
    code = min(max(k + 127, 0), 254)
    return torch.tensor([code], dtype=torch.uint8).view(torch.float8_e8m0fnu).reshape(())


def quantize(x, fp8, block, scale_format):
    rows, cols = x.shape
    tr, tc = (rows, cols) if block == 0 else (block, block)
    nr, nc = (rows + tr - 1) // tr, (cols + tc - 1) // tc
    fmax = torch.tensor(torch.finfo(fp8).max, dtype=torch.float32)
    q = torch.empty(rows, cols, dtype=fp8)
    deq = torch.empty(rows, cols, dtype=x.dtype)
    scales = torch.empty(nr, nc, dtype=torch.float32)
    stored = torch.empty(nr, nc, dtype=torch.float8_e8m0fnu) if scale_format == "e8m0" else scales
    for i in range(nr):
        for j in range(nc):
            tile = x[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc].float()
            amax = tile.abs().amax()
            scale = amax / fmax if float(amax) != 0.0 else torch.tensor(1.0)
            if scale_format == "e8m0":
                code = round_up_e8m0(scale)
                stored[i, j] = code
                scale = code.float()
            scales[i, j] = scale
            qt = (tile / scale).to(fp8)
            q[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc] = qt
            deq[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc] = (qt.float() * scale).to(x.dtype)
    return q, stored, deq, scales


def quantize_vectorized(x, fp8, block, scale_format):
    """The same recipe without the tile loop: every element's scale by broadcasting, e8m0
    rounding from the float32 bits by integer arithmetic. Must agree bit for bit."""
    rows, cols = x.shape
    tr, tc = (rows, cols) if block == 0 else (block, block)
    nr, nc = (rows + tr - 1) // tr, (cols + tc - 1) // tc
    xf = x.float()
    pad = torch.zeros(nr * tr, nc * tc)
    pad[:rows, :cols] = xf.abs()
    amax = pad.reshape(nr, tr, nc, tc).amax(dim=(1, 3))
    s = torch.where(amax == 0, torch.ones_like(amax), amax / torch.finfo(fp8).max)
    if scale_format == "e8m0":
        b = s.view(torch.int32).long()
        expo, mant = b >> 23, b & 0x7FFFFF
        # normal: 2^(expo-127), one up when the mantissa is not 0; subnormal: 2^-126 above
        # 2^-127 (mantissa 0x400000), else 2^-127
        code = torch.where(expo == 0, (mant > 0x400000).long(), expo + (mant != 0).long())
        stored = code.to(torch.uint8).view(torch.float8_e8m0fnu)
        s = stored.float()
    else:
        stored = s
    se = s.repeat_interleave(tr, 0).repeat_interleave(tc, 1)[:rows, :cols]
    q = (xf / se).to(fp8)
    return q, stored, (q.float() * se).to(x.dtype)


def bits(t):
    return t.contiguous().view(torch.uint8)


def decode(d):
    dtype = getattr(torch, d["dtype"])
    raw = bytearray.fromhex(d["hex"])
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(d["shape"]) \
        if raw else torch.empty(d["shape"], dtype=dtype)


def self_check(path, expected):
    with open(path) as fh:
        doc = json.load(fh)
    assert doc["torch_version"] == torch.__version__
    assert [c["name"] for c in doc["cases"]] == [e[0] for e in expected]
    for c, (name, x0, _, _, _) in zip(doc["cases"], expected):
        fp8 = FP8[c["fp8"]]
        x, q, sc, deq = (decode(c[k]) for k in ("x", "q", "scales", "dequantized"))
        assert torch.equal(bits(x), bits(x0)), name
        assert q.dtype == fp8 and deq.dtype == x.dtype and q.shape == x.shape == deq.shape
        scales = sc.float()
        tr, tc = (x.shape[0], x.shape[1]) if c["block"] == 0 else (B, B)
        assert list(sc.shape) == [math.ceil(x.shape[0] / tr), math.ceil(x.shape[1] / tc)], name
        assert sc.dtype == (torch.float8_e8m0fnu if c["scale_format"] == "e8m0" else torch.float32)
        se = scales.repeat_interleave(tr, 0).repeat_interleave(tc, 1)[:x.shape[0], :x.shape[1]]
        xf, df = x.float(), deq.float()
        assert not torch.isnan(q.float()).any() and not torch.isnan(df).any(), name
        # fp8 rounding: half an ulp (2^-4 relative for e4m3fn, 2^-3 for e5m2) or half the
        # smallest subnormal (2^-10, 2^-17) of x / scale, then the rounding back to x's dtype.
        e4 = fp8 == torch.float8_e4m3fn
        rel, sub = (2.0 ** -4, 2.0 ** -10) if e4 else (2.0 ** -3, 2.0 ** -17)
        out_rel, out_abs = {torch.bfloat16: (2.0 ** -8, 2.0 ** -134),
                            torch.float16: (2.0 ** -10, 2.0 ** -25),
                            torch.float32: (0.0, 2.0 ** -150)}[x.dtype]
        bound = (rel * xf.abs() + sub * se) * (1 + 2.0 ** -20) + out_rel * xf.abs() + out_abs
        assert ((df - xf).abs() <= bound).all(), (name, ((df - xf).abs() / bound).max())
        y = xf / se
        normal = y.abs() >= (2.0 ** -6 if fp8 == torch.float8_e4m3fn else 2.0 ** -14)
        err = ((df - xf).abs() / xf.abs())[normal & (xf != 0)]
        nz = 0
        for i in range(scales.shape[0]):
            for j in range(scales.shape[1]):
                t = xf[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc]
                if (t == 0).all():
                    nz += 1
                    assert float(scales[i, j]) == 1.0, name
                    assert (q[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc].float() == 0).all(), name
                    # the sign of zero goes through: -0.0 -> code 0x80 -> -0.0
                    assert torch.equal(bits(deq[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc]),
                                       bits(x[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc])), name
        sat = int((y.abs() > torch.finfo(fp8).max).sum())
        print(f"ok  {name}: {list(x.shape)} scales {list(sc.shape)} "
              f"max rel err (normal range) {float(err.max()) if err.numel() else 0:.4g}, "
              f"zero codes {int((q.float() == 0).sum())}, all-zero tiles {nz}, "
              f"x/scale past max (saturated) {sat}")
    # the ties in row 128 of the grid (scale 2^-3 in both formats): rounded to the even code
    codes_lo = torch.arange(0, 126, dtype=torch.int64)  # the code below each tie
    want = torch.where(codes_lo % 2 == 0, codes_lo, codes_lo + 1).to(torch.uint8)
    want = want.view(torch.float8_e4m3fn).float()
    for g in doc["cases"][:2]:
        assert float(decode(g["scales"]).float()[1, 0]) == 0.125, g["name"]
        q = decode(g["q"])[128, 1:127].float().abs()
        assert torch.equal(q, want), f"{g['name']}: e4m3fn ties are not rounded to even"
    print("ok  126 e4m3fn ties (row 128 of the grid) round to the even code in both formats")


def main():
    os.makedirs(OUT, exist_ok=True)
    out = []
    expected = cases()
    for name, x, fp8n, block, fmt in expected:
        fp8 = FP8[fp8n]
        q, stored, deq, _ = quantize(x, fp8, block, fmt)
        q2, stored2, deq2 = quantize_vectorized(x, fp8, block, fmt)
        assert torch.equal(bits(q), bits(q2)) and torch.equal(bits(stored), bits(stored2)) \
            and torch.equal(bits(deq), bits(deq2)), f"{name}: the two constructions differ"
        out.append({
            "name": name,
            "dtype": str(x.dtype).replace("torch.", ""),
            "fp8": fp8n,
            "block": block,
            "scale_format": fmt,
            "x": encode_tensor(x),
            "q": encode_tensor(q),
            "scales": encode_tensor(stored),
            "dequantized": encode_tensor(deq),
        })
    doc = {"torch_version": torch.__version__, "cases": out}
    path = os.path.join(OUT, "expected.json")
    with open(path, "w") as fh:
        json.dump(doc, fh, separators=(",", ":"))
        fh.write("\n")
    print("wrote", path, os.path.getsize(path), "bytes,", len(out), "cases, torch",
          torch.__version__)
    self_check(path, expected)


if __name__ == "__main__":
    main()
