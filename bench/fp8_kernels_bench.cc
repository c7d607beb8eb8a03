// The block-FP8 kernels (cuda/fp8_kernels.h) against cudaMemcpy of the same bytes, in the
// kernels_bench binary of a CUDA build (skipped without a device). Over a bfloat16
// [8192, 2048] matrix (16 Mi elements, 32 MiB; magnitudes varying tile by tile), tiles of
// 128 x 128: the tile amax (reads 32 MiB; a zeroing of the 1,024-entry grid included), the
// quantization into float8_e4m3fn with float32 scales (reads 32 MiB, writes 16 MiB) and the
// dequantization back into bfloat16 (reads 16 MiB, writes 32 MiB). The memcpy baseline
// copies half of the bytes read plus written, so both move the same bytes, in the same
// iterations (the "vs_memcpy" counter: memcpy time over kernel time). "wrong" counts the
// output bytes that differ from RunFp8Box on the CPU.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "sdrt/bench/bench_util.h"
#include "sdrt/bench/device_timing.h"
#include "sdrt/cuda/fp8_kernels.h"
#include "sdrt/tensor/backend/fp8_box.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/internal/fp8_scale.h"

namespace sdrt {
namespace {

using ::sdrt::bench::CountMismatches;
using ::sdrt::bench::Gpu;
using ::sdrt::bench::Report;

constexpr int64_t kRows = 8192, kCols = 2048, kTile = 128;
constexpr int64_t kGridCols = kCols / kTile, kGrid = (kRows / kTile) * kGridCols;

// The matrix's bfloat16 bytes: values of both signs, 2^-8 .. 2^8 by tile.
std::vector<uint8_t> Matrix() {
  std::vector<float> x(static_cast<size_t>(kRows * kCols));
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    const uint64_t u = (static_cast<uint64_t>(i) * 2654435761ull + 99ull) & 0xffffffffull;
    const int64_t m = static_cast<int64_t>(u >> 8) - (int64_t{1} << 23);
    const int e = static_cast<int>((((i / kCols) / kTile) * 5 + ((i % kCols) / kTile) * 7) % 17) - 8;
    x[static_cast<size_t>(i)] = std::ldexp(static_cast<float>(m), e - 23);
  }
  std::vector<uint8_t> out(x.size() * 2);
  internal::ConvertFloats(x.data(), DType::kFloat32, out.data(), DType::kBFloat16, kRows * kCols);
  return out;
}

// The op over the whole matrix, its pointers to be set.
Fp8BoxOp WholeMatrix(Fp8BoxOp::Kind kind) {
  Fp8BoxOp op;
  op.kind = kind;
  op.rows = kRows;
  op.cols = kCols;
  op.src_row_stride = kCols;
  op.tile = kTile;
  op.grid_cols = kGridCols;
  op.grid_entries = kGrid;
  return op;
}

// The host's amaxes, scales and codes of the matrix.
struct HostFp8 {
  std::vector<uint8_t> amax, scales, codes, values;
};

HostFp8 OnTheHost(const std::vector<uint8_t>& x) {
  HostFp8 h;
  std::vector<int32_t> amax(kGrid, 0);
  Fp8BoxOp a = WholeMatrix(Fp8BoxOp::Kind::kTileAmax);
  a.src = x.data();
  a.src_dtype = DType::kBFloat16;
  a.dst = amax.data();
  (void)RunFp8Box(a, Device::CPU());
  std::vector<float> scales(kGrid);
  for (int64_t i = 0; i < kGrid; ++i) {
    scales[i] = internal::TileScale(internal::FloatFromBits(static_cast<uint32_t>(amax[i])),
                                    DType::kFloat8E4M3FN, false);
  }
  h.codes.resize(static_cast<size_t>(kRows * kCols));
  Fp8BoxOp q = WholeMatrix(Fp8BoxOp::Kind::kQuantize);
  q.src = x.data();
  q.src_dtype = DType::kBFloat16;
  q.dst = h.codes.data();
  q.dst_dtype = DType::kFloat8E4M3FN;
  q.scales = scales.data();
  (void)RunFp8Box(q, Device::CPU());
  h.values.resize(x.size());
  Fp8BoxOp d = WholeMatrix(Fp8BoxOp::Kind::kDequantize);
  d.src = h.codes.data();
  d.src_dtype = DType::kFloat8E4M3FN;
  d.dst = h.values.data();
  d.dst_dtype = DType::kBFloat16;
  d.scales = scales.data();
  (void)RunFp8Box(d, Device::CPU());
  const auto* amax_bytes = reinterpret_cast<const uint8_t*>(amax.data());
  h.amax.assign(amax_bytes, amax_bytes + amax.size() * sizeof(int32_t));
  const auto* scale_bytes = reinterpret_cast<const uint8_t*>(scales.data());
  h.scales.assign(scale_bytes, scale_bytes + scales.size() * sizeof(float));
  return h;
}

enum class Step { kAmax, kQuantize, kDequantize };

void RunFp8(benchmark::State& state, Step step) {
  Gpu gpu(state);
  if (!gpu.ok()) return;
  const std::vector<uint8_t> x = Matrix();
  const HostFp8 host = OnTheHost(x);
  uint8_t* d_x = gpu.Upload(x);
  uint8_t* d_scales = gpu.Upload(host.scales);
  uint8_t* d_codes = gpu.Upload(step == Step::kDequantize ? host.codes
                                                          : std::vector<uint8_t>(host.codes.size()));
  uint8_t* d_amax = gpu.Upload(std::vector<uint8_t>(host.amax.size()));
  uint8_t* d_values = gpu.Upload(std::vector<uint8_t>(x.size()));
  if (!gpu.ok()) return;
  Fp8BoxOp op;
  int64_t moved = 0;
  const std::vector<uint8_t>* want = nullptr;
  uint8_t* out = nullptr;
  if (step == Step::kAmax) {
    op = WholeMatrix(Fp8BoxOp::Kind::kTileAmax);
    op.src = d_x;
    op.src_dtype = DType::kBFloat16;
    op.dst = d_amax;
    moved = static_cast<int64_t>(x.size());
    want = &host.amax;
    out = d_amax;
  } else if (step == Step::kQuantize) {
    op = WholeMatrix(Fp8BoxOp::Kind::kQuantize);
    op.src = d_x;
    op.src_dtype = DType::kBFloat16;
    op.dst = d_codes;
    op.dst_dtype = DType::kFloat8E4M3FN;
    op.scales = d_scales;
    moved = static_cast<int64_t>(x.size() + host.codes.size());
    want = &host.codes;
    out = d_codes;
  } else {
    op = WholeMatrix(Fp8BoxOp::Kind::kDequantize);
    op.src = d_codes;
    op.src_dtype = DType::kFloat8E4M3FN;
    op.dst = d_values;
    op.dst_dtype = DType::kBFloat16;
    op.scales = d_scales;
    moved = static_cast<int64_t>(x.size() + host.codes.size());
    want = &host.values;
    out = d_values;
  }
  gpu.Time(
      [&]() -> absl::Status {
        if (step == Step::kAmax) {
          const cudaError_t err = cudaMemsetAsync(d_amax, 0, host.amax.size(), gpu.stream());
          if (err != cudaSuccess) return absl::InternalError(cudaGetErrorString(err));
        }
        return Fp8BoxDevice(op, gpu.stream());
      },
      d_x, moved / 2);
  if (!gpu.ok()) return;
  Report(state, moved,
         CountMismatches(gpu.Download(out, static_cast<int64_t>(want->size())), *want));
}

void BM_Fp8TileAmaxDevice(benchmark::State& state) { RunFp8(state, Step::kAmax); }
BENCHMARK(BM_Fp8TileAmaxDevice)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_Fp8QuantizeDevice(benchmark::State& state) { RunFp8(state, Step::kQuantize); }
BENCHMARK(BM_Fp8QuantizeDevice)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_Fp8DequantizeDevice(benchmark::State& state) { RunFp8(state, Step::kDequantize); }
BENCHMARK(BM_Fp8DequantizeDevice)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sdrt
