// RunFp8Box on the CPU (tensor/backend/fp8_box.h) and the index arithmetic its CUDA kernels
// share with the host (tensor/internal/fp8_scale.h: BoxTileIndex, ChunkCount, ChunkBegin):
// a matrix cut into boxes at edges that split its 128 x 128 tiles, each box's tile amaxes,
// codes and dequantized values made apart and put together, equals the whole matrix's
// QuantizeMatrix / DequantizeMatrix (which tests/tensor/fp8_scale_golden_test.cc checks
// against PyTorch) bit for bit; the amax as the kernel reduces it (a chunk per thread block,
// one max per chunk) equals the host's; every NaN amax has the same bits; and the checks.
#include "sdrt/tensor/backend/fp8_box.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt {
namespace {

using internal::BoxTileIndex;
using internal::ChunkBegin;
using internal::ChunkCount;
using internal::ChunkEdge;

TEST(Fp8Box, ChunksCutTheBoxIntoPartsOfOneTileEach) {
  for (int64_t tile : {0, 7, 128}) {
    for (int64_t origin : {0, 1, 127, 128, 300}) {
      for (int64_t count : {0, 1, 5, 127, 128, 129, 400}) {
        const int64_t o = tile > 0 ? origin : 0, edge = ChunkEdge(tile);
        const int64_t n = ChunkCount(o, count, edge);
        SCOPED_TRACE(absl::StrCat("tile ", tile, " origin ", o, " count ", count));
        int64_t at = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t b = ChunkBegin(o, count, edge, i), e = ChunkBegin(o, count, edge, i + 1);
          EXPECT_EQ(b, at);
          ASSERT_LT(b, e);  // no empty chunk
          EXPECT_LE(e - b, edge);
          // One tile: the first and the last element's tiles agree, and the chunk ends at
          // the box's end or a tile's.
          EXPECT_EQ((o + b) / edge, (o + e - 1) / edge);
          EXPECT_TRUE(e == count || (o + e) % edge == 0);
          at = e;
        }
        EXPECT_EQ(at, count);
      }
    }
  }
}

// The amax the CUDA kernel makes, step for step on the host: per chunk (the box's part in one
// tile) the largest magnitude's bits, NaN as kNanAmaxBits, one max into its grid entry.
void KernelAmax(const Fp8BoxOp& op, int32_t* grid) {
  const int64_t edge = ChunkEdge(op.tile);
  const int64_t ro = op.tile > 0 ? op.row0 : 0, co = op.tile > 0 ? op.col0 : 0;
  const int64_t chunk_cols = ChunkCount(co, op.cols, edge);
  const int64_t chunks = ChunkCount(ro, op.rows, edge) * chunk_cols;
  const int64_t bytes = ElementBits(op.src_dtype) / 8;
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t i = k / chunk_cols, j = k % chunk_cols;
    const int64_t r0 = ChunkBegin(ro, op.rows, edge, i), r1 = ChunkBegin(ro, op.rows, edge, i + 1);
    const int64_t c0 = ChunkBegin(co, op.cols, edge, j), c1 = ChunkBegin(co, op.cols, edge, j + 1);
    uint32_t m = 0;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) {
        float v = 0.0f;
        internal::ConvertFloats(static_cast<const char*>(op.src) + (r * op.src_row_stride + c) * bytes,
                                op.src_dtype, &v, DType::kFloat32, 1);
        uint32_t bits = internal::FloatBits(std::fabs(v));
        if (bits > 0x7f800000u) bits = static_cast<uint32_t>(internal::kNanAmaxBits);
        m = std::max(m, bits);
      }
    }
    int32_t& slot = grid[BoxTileIndex(op.row0, op.col0, op.tile, op.grid_cols, r0, c0)];
    slot = std::max(slot, static_cast<int32_t>(m));
  }
}

// Values of every sign and of magnitudes that differ tile by tile (2^-12 .. 2^12), with the
// first 128 x 128 tile all zero (its scale is 1), in `dtype`.
Tensor Values(int64_t rows, int64_t cols, DType dtype) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const uint64_t u = (static_cast<uint64_t>(i) * 2654435761ull + 12345ull) & 0xffffffffull;
    const int64_t m = static_cast<int64_t>(u >> 8) - (int64_t{1} << 23);
    const int64_t r = i / cols, c = i % cols;
    const int e = static_cast<int>(((r / 128) * 5 + (c / 128) * 7) % 25) - 12;
    x[static_cast<size_t>(i)] =
        r < 128 && c < 128 ? 0.0f : std::ldexp(static_cast<float>(m), e - 23);
  }
  Tensor out = *Tensor::Empty({rows, cols}, dtype);
  EXPECT_TRUE(internal::ConvertFloats(x.data(), DType::kFloat32, out.data_ptr(), dtype, rows * cols));
  return out;
}

struct Recipe {
  DType from, codes, scale;
  int64_t tile;
};

TEST(Fp8Box, BoxesOfAnyCutMakeTheWholeMatrixsCodesScalesAndValues) {
  constexpr int64_t kRows = 300, kCols = 260;
  const std::vector<Recipe> recipes = {
      {DType::kBFloat16, DType::kFloat8E4M3FN, DType::kFloat32, 128},
      {DType::kFloat32, DType::kFloat8E5M2, DType::kFloat8E8M0FNU, 128},
      {DType::kFloat16, DType::kFloat8E4M3FN, DType::kFloat8E8M0FNU, 128},
      {DType::kBFloat16, DType::kFloat8E4M3FN, DType::kFloat32, 0},
      {DType::kFloat32, DType::kFloat8E5M2, DType::kFloat32, 0},
  };
  // Cuts that split tiles: rows [0, 77) [77, 300), columns [0, 201) [201, 260).
  const int64_t row_cuts[] = {0, 77, kRows}, col_cuts[] = {0, 201, kCols};
  for (const Recipe& q : recipes) {
    SCOPED_TRACE(absl::StrCat(DTypeName(q.from), " -> ", DTypeName(q.codes), " tile ", q.tile,
                              " scales ", DTypeName(q.scale)));
    const Tensor x = Values(kRows, kCols, q.from);
    const int64_t bytes = ElementBits(q.from) / 8;
    const int64_t grid_rows = q.tile > 0 ? (kRows + q.tile - 1) / q.tile : 1;
    const int64_t grid_cols = q.tile > 0 ? (kCols + q.tile - 1) / q.tile : 1;
    const int64_t entries = grid_rows * grid_cols;
    // The whole matrix at once: the reference.
    Tensor want_codes = *Tensor::Empty({kRows, kCols}, q.codes);
    Tensor want_scales = *Tensor::Empty({grid_rows, grid_cols}, q.scale);
    ASSERT_TRUE(internal::QuantizeMatrix(x.data_ptr(), q.from, kRows, kCols, q.tile,
                                         want_codes.data_ptr(), q.codes, want_scales.data_ptr(),
                                         q.scale));
    Tensor want_values = *Tensor::Empty({kRows, kCols}, q.from);
    ASSERT_TRUE(internal::DequantizeMatrix(want_codes.data_ptr(), q.codes,
                                           want_scales.data_ptr(), q.scale, kRows, kCols,
                                           q.tile, want_values.data_ptr(), q.from));
    // Box by box: the amaxes (the host's and the kernel's way), then scales, codes, values.
    std::vector<int32_t> amax(static_cast<size_t>(entries), 0), kernel(amax);
    const auto box = [&](int bi, int bj, Fp8BoxOp::Kind kind) {
      Fp8BoxOp op;
      op.kind = kind;
      op.row0 = row_cuts[bi];
      op.col0 = col_cuts[bj];
      op.rows = row_cuts[bi + 1] - op.row0;
      op.cols = col_cuts[bj + 1] - op.col0;
      op.src_row_stride = kCols;
      op.tile = q.tile;
      op.grid_cols = grid_cols;
      op.grid_entries = entries;
      return op;
    };
    for (int bi = 0; bi < 2; ++bi) {
      for (int bj = 0; bj < 2; ++bj) {
        Fp8BoxOp op = box(bi, bj, Fp8BoxOp::Kind::kTileAmax);
        op.src = static_cast<const char*>(x.data_ptr()) + (op.row0 * kCols + op.col0) * bytes;
        op.src_dtype = q.from;
        op.dst = amax.data();
        ASSERT_TRUE(RunFp8Box(op, Device::CPU()).ok());
        KernelAmax(op, kernel.data());
      }
    }
    EXPECT_EQ(amax, kernel);
    std::vector<float> scales(static_cast<size_t>(entries));
    for (int64_t i = 0; i < entries; ++i) {
      scales[static_cast<size_t>(i)] =
          internal::TileScale(internal::FloatFromBits(static_cast<uint32_t>(amax[i])), q.codes,
                              q.scale == DType::kFloat8E8M0FNU);
      float stored = 0.0f;
      internal::ConvertFloats(static_cast<const char*>(want_scales.data_ptr()) +
                                  i * (ElementBits(q.scale) / 8),
                              q.scale, &stored, DType::kFloat32, 1);
      EXPECT_EQ(internal::FloatBits(scales[static_cast<size_t>(i)]), internal::FloatBits(stored))
          << "scale " << i;
    }
    Tensor codes = *Tensor::Zeros({kRows, kCols}, q.codes);
    Tensor values = *Tensor::Zeros({kRows, kCols}, q.from);
    for (int bi = 0; bi < 2; ++bi) {
      for (int bj = 0; bj < 2; ++bj) {
        Fp8BoxOp op = box(bi, bj, Fp8BoxOp::Kind::kQuantize);
        std::vector<uint8_t> dense(static_cast<size_t>(op.rows * op.cols));
        op.src = static_cast<const char*>(x.data_ptr()) + (op.row0 * kCols + op.col0) * bytes;
        op.src_dtype = q.from;
        op.dst = dense.data();
        op.dst_dtype = q.codes;
        op.scales = scales.data();
        ASSERT_TRUE(RunFp8Box(op, Device::CPU()).ok());
        for (int64_t r = 0; r < op.rows; ++r) {
          std::memcpy(static_cast<uint8_t*>(codes.data_ptr()) + (op.row0 + r) * kCols + op.col0,
                      dense.data() + r * op.cols, static_cast<size_t>(op.cols));
        }
        // The dequantization reads the box out of the whole codes, the scales as stored.
        Fp8BoxOp back = box(bi, bj, Fp8BoxOp::Kind::kDequantize);
        std::vector<char> out(static_cast<size_t>(back.rows * back.cols * bytes));
        back.src = static_cast<const uint8_t*>(want_codes.data_ptr()) + back.row0 * kCols + back.col0;
        back.src_dtype = q.codes;
        back.dst = out.data();
        back.dst_dtype = q.from;
        back.scales = want_scales.data_ptr();
        back.scale_dtype = q.scale;
        ASSERT_TRUE(RunFp8Box(back, Device::CPU()).ok());
        for (int64_t r = 0; r < back.rows; ++r) {
          std::memcpy(static_cast<char*>(values.data_ptr()) +
                          ((back.row0 + r) * kCols + back.col0) * bytes,
                      out.data() + r * back.cols * bytes, static_cast<size_t>(back.cols * bytes));
        }
      }
    }
    EXPECT_EQ(std::memcmp(codes.data_ptr(), want_codes.data_ptr(), codes.nbytes()), 0);
    EXPECT_EQ(std::memcmp(values.data_ptr(), want_values.data_ptr(), values.nbytes()), 0);
  }
}

TEST(Fp8Box, EveryNanAmaxHasTheSameBits) {
  // Two NaNs of different payloads in two boxes of one tile; the host's amax and the
  // kernel's keep one canonical NaN, above infinity.
  std::vector<float> x(64, 1.0f);
  x[3] = internal::FloatFromBits(0x7fc00001u);
  x[40] = internal::FloatFromBits(0xffa00000u);
  x[41] = std::numeric_limits<float>::infinity();
  int32_t host = 0, kernel = 0;
  for (int half = 0; half < 2; ++half) {
    Fp8BoxOp op;
    op.src = x.data() + 32 * half;
    op.src_dtype = DType::kFloat32;
    op.dst = &host;
    op.rows = 4;
    op.cols = 8;
    op.src_row_stride = 8;
    op.row0 = 4 * half;
    op.tile = 128;
    ASSERT_TRUE(RunFp8Box(op, Device::CPU()).ok());
    EXPECT_EQ(host, internal::kNanAmaxBits);
    KernelAmax(op, &kernel);
  }
  EXPECT_EQ(kernel, internal::kNanAmaxBits);
}

TEST(Fp8Box, BadOpsAreRefusedBeforeAnythingRuns) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> codes(64);
  std::vector<float> scales(4, 1.0f);
  Fp8BoxOp ok;
  ok.kind = Fp8BoxOp::Kind::kQuantize;
  ok.src = x.data();
  ok.src_dtype = DType::kFloat32;
  ok.dst = codes.data();
  ok.dst_dtype = DType::kFloat8E4M3FN;
  ok.scales = scales.data();
  ok.rows = 8;
  ok.cols = 8;
  ok.src_row_stride = 8;
  ok.tile = 4;
  ok.grid_cols = 2;
  ok.grid_entries = 4;
  ASSERT_TRUE(RunFp8Box(ok, Device::CPU()).ok());
  const auto expect = [&](Fp8BoxOp op, const std::string& text) {
    const absl::Status s = RunFp8Box(op, Device::CPU());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(std::string(s.message()).find(text), std::string::npos) << s;
  };
  Fp8BoxOp op = ok;
  op.dst_dtype = DType::kBFloat16;
  expect(op, "no op from float32 into bfloat16");
  op = ok;
  op.src_row_stride = 7;
  expect(op, "a row stride of 7 for rows of 8");
  op = ok;
  op.grid_entries = 3;
  expect(op, "tile (1, 1) is not in a grid of 3 entries");
  op = ok;
  op.rows = -1;
  expect(op, "negative sizes");
  op = ok;
  op.scales = nullptr;
  expect(op, "a null pointer");
  op = ok;
  op.src = reinterpret_cast<const char*>(x.data()) + 2;
  expect(op, "not aligned");
  op = ok;
  op.rows = int64_t{1} << 40;
  op.cols = int64_t{1} << 40;
  expect(op, "2^62");
  // An empty box runs nothing, null pointers and all.
  op = ok;
  op.rows = 0;
  op.src = nullptr;
  EXPECT_TRUE(RunFp8Box(op, Device::CPU()).ok());
}

}  // namespace
}  // namespace sdrt
