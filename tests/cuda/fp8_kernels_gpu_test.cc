// The block-FP8 kernels (cuda/fp8_kernels.h) against the host loops: the same op through
// RunFp8Box on a CUDA device and on the CPU, every result compared bit for bit, for each
// pair of wide and code dtypes, block and per-tensor tiles, float32 and e8m0 scales, a box
// whose edges cut tiles and whose rows are a wider matrix's (a column cut), a matrix of
// 16 Mi elements (many chunks and a grid-stride loop), and NaN / infinity among the values.
// Tests that need a device skip without one; the checks run anywhere (before any CUDA call).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/cuda/fp8_kernels.h"
#include "sdrt/tensor/backend/fp8_box.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

const Device kGpu = Device::CUDA(0);

// Values of both signs, magnitudes varying by 128 x 128 tile, the first tile zero; NaN and
// infinity at `specials` (linear indices).
Tensor Values(int64_t rows, int64_t cols, DType dtype, const std::vector<int64_t>& specials = {}) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const uint64_t u = (static_cast<uint64_t>(i) * 2654435761ull + 777ull) & 0xffffffffull;
    const int64_t m = static_cast<int64_t>(u >> 8) - (int64_t{1} << 23);
    const int64_t r = i / cols, c = i % cols;
    const int e = static_cast<int>(((r / 128) * 5 + (c / 128) * 7) % 25) - 12;
    x[static_cast<size_t>(i)] = r < 128 && c < 128 ? 0.0f : std::ldexp(static_cast<float>(m), e - 23);
  }
  for (size_t k = 0; k < specials.size(); ++k) {
    x[static_cast<size_t>(specials[k])] =
        k % 2 == 0 ? std::nanf("") : -std::numeric_limits<float>::infinity();
  }
  Tensor out = *Tensor::Empty({rows, cols}, dtype);
  EXPECT_TRUE(internal::ConvertFloats(x.data(), DType::kFloat32, out.data_ptr(), dtype, rows * cols));
  return out;
}

std::string Bytes(const Tensor& t) {
  const Tensor host = *t.To(Device::CPU());
  return std::string(static_cast<const char*>(host.data_ptr()), static_cast<size_t>(host.nbytes()));
}

// Runs `op` (its pointers into the CPU tensors `src`, `dst` and `scales`, shifted by the
// given byte offsets) on the CPU, and the same op on copies of the three on the GPU; expects
// the two `dst` equal byte for byte.
void ExpectSameOnBoth(Fp8BoxOp op, const Tensor& src, int64_t src_at, const Tensor& dst,
                      const Tensor& scales, const std::string& what) {
  SCOPED_TRACE(what);
  const Tensor gpu_src = *src.To(kGpu), gpu_dst = *dst.To(kGpu);
  const Tensor gpu_scales = scales.defined() ? *scales.To(kGpu) : Tensor();
  Fp8BoxOp host = op;
  host.src = static_cast<const char*>(src.data_ptr()) + src_at;
  host.dst = dst.data_ptr();
  host.scales = scales.defined() ? scales.data_ptr() : nullptr;
  ASSERT_TRUE(RunFp8Box(host, Device::CPU()).ok());
  Fp8BoxOp device = op;
  device.src = static_cast<const char*>(gpu_src.data_ptr()) + src_at;
  device.dst = gpu_dst.data_ptr();
  device.scales = gpu_scales.defined() ? gpu_scales.data_ptr() : nullptr;
  const absl::Status ran = RunFp8Box(device, kGpu);
  ASSERT_TRUE(ran.ok()) << ran;
  EXPECT_EQ(Bytes(gpu_dst), Bytes(dst));
}

// The three ops over box [row0, row0 + rows) x [col0, col0 + cols) of a matrix `x`.
void CheckBox(const Tensor& x, DType codes, DType scale_dtype, int64_t tile, int64_t row0,
              int64_t col0, int64_t rows, int64_t cols, const std::string& what) {
  const int64_t total_cols = x.size(1);
  const int64_t grid_cols = tile > 0 ? (total_cols + tile - 1) / tile : 1;
  const int64_t grid_rows = tile > 0 ? (x.size(0) + tile - 1) / tile : 1;
  Fp8BoxOp op;
  op.rows = rows;
  op.cols = cols;
  op.row0 = row0;
  op.col0 = col0;
  op.src_row_stride = total_cols;
  op.tile = tile;
  op.grid_cols = grid_cols;
  op.grid_entries = grid_rows * grid_cols;
  const int64_t at = (row0 * total_cols + col0) * (ElementBits(x.dtype()) / 8);
  // The amax, raised from a grid that already holds values (the op only raises).
  Tensor amax = *Tensor::Zeros({op.grid_entries}, DType::kInt32);
  amax.data<int32_t>()[0] = 0x3f800000;  // 1.0
  Fp8BoxOp a = op;
  a.kind = Fp8BoxOp::Kind::kTileAmax;
  a.src_dtype = x.dtype();
  ExpectSameOnBoth(a, x, at, amax, Tensor(), what + " amax");
  // Scales from the host's amax (now in `amax`), the codes, and the codes back.
  Tensor scales = *Tensor::Empty({op.grid_entries}, DType::kFloat32);
  for (int64_t i = 0; i < op.grid_entries; ++i) {
    scales.data<float>()[i] = internal::TileScale(
        internal::FloatFromBits(static_cast<uint32_t>(amax.data<int32_t>()[i])), codes,
        scale_dtype == DType::kFloat8E8M0FNU);
  }
  Fp8BoxOp q = op;
  q.kind = Fp8BoxOp::Kind::kQuantize;
  q.src_dtype = x.dtype();
  q.dst_dtype = codes;
  Tensor out = *Tensor::Zeros({rows, cols}, codes);
  ExpectSameOnBoth(q, x, at, out, scales, what + " quantize");
  Tensor stored = scales;
  if (scale_dtype == DType::kFloat8E8M0FNU) {
    stored = *Tensor::Empty({op.grid_entries}, scale_dtype);
    ASSERT_TRUE(internal::ConvertFloats(scales.data_ptr(), DType::kFloat32, stored.data_ptr(),
                                        scale_dtype, op.grid_entries));
  }
  const Tensor whole = *Tensor::Empty(x.shape(), codes);
  ASSERT_TRUE(internal::QuantizeBox(x.data_ptr(), x.dtype(), x.size(0), total_cols, total_cols,
                                    0, 0, tile, grid_cols, scales.data<float>(),
                                    whole.data_ptr(), codes));
  Fp8BoxOp d = op;
  d.kind = Fp8BoxOp::Kind::kDequantize;
  d.src_dtype = codes;
  d.dst_dtype = x.dtype();
  d.scale_dtype = scale_dtype;
  Tensor back = *Tensor::Zeros({rows, cols}, x.dtype());
  ExpectSameOnBoth(d, whole, row0 * total_cols + col0, back, stored, what + " dequantize");
}

TEST(Fp8KernelsGpu, EveryRecipeOnACutBoxIsTheHostsBitForBit) {
  SDRT_SKIP_WITHOUT_GPU();
  for (DType from : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const Tensor x = Values(300, 260, from, {5 * 260 + 140, 200 * 260 + 7});
    for (DType codes : {DType::kFloat8E4M3FN, DType::kFloat8E5M2}) {
      for (DType scale : {DType::kFloat32, DType::kFloat8E8M0FNU}) {
        for (int64_t tile : {int64_t{128}, int64_t{0}}) {
          const std::string what = absl::StrCat(DTypeName(from), " ", DTypeName(codes), " ",
                                                DTypeName(scale), " tile ", tile);
          CheckBox(x, codes, scale, tile, 0, 0, 300, 260, what + " whole");
          CheckBox(x, codes, scale, tile, 77, 201, 150, 59, what + " cut");
          CheckBox(x, codes, scale, tile, 128, 0, 1, 260, what + " one row");
        }
      }
    }
  }
}

// One small case (the one compute-sanitizer's racecheck runs: the amax's shared memory).
TEST(Fp8KernelsGpu, OneCutBoxOfBfloat16) {
  SDRT_SKIP_WITHOUT_GPU();
  const Tensor x = Values(300, 260, DType::kBFloat16);
  CheckBox(x, DType::kFloat8E4M3FN, DType::kFloat32, 128, 77, 201, 150, 59, "cut");
}

TEST(Fp8KernelsGpu, SixteenMebiElementsAreTheHostsBitForBit) {
  SDRT_SKIP_WITHOUT_GPU();
  const Tensor x = Values(4096, 4096, DType::kBFloat16);
  CheckBox(x, DType::kFloat8E4M3FN, DType::kFloat32, 128, 0, 0, 4096, 4096, "block");
  CheckBox(x, DType::kFloat8E4M3FN, DType::kFloat32, 0, 0, 0, 4096, 4096, "per tensor");
}

TEST(Fp8KernelsGpu, BadOpsAreRefusedBeforeAnyCudaCall) {
  Fp8BoxOp op;
  op.kind = Fp8BoxOp::Kind::kQuantize;
  op.src_dtype = DType::kFloat32;
  op.dst_dtype = DType::kFloat32;
  op.rows = 2;
  op.cols = 2;
  op.src_row_stride = 2;
  const absl::Status s = Fp8BoxDevice(op, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("Fp8BoxDevice: FP8 quantization: no op from float32 "
                                          "into float32"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace sdrt
