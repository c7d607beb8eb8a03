// Bandwidth of the strided copy kernel (and its host path), and of the float conversion
// kernel, against plain memcpy of the same bytes.
//
// Each case moves about 64 MiB (more than an H100/H200's L2, so repeated runs measure
// device memory, not the cache). Counted bytes are bytes read plus bytes written, once
// each; bytes_per_second and the "GB" counter (printed as a rate: GB/s, 1e9 bytes) come
// from that count, so a case and its memcpy baseline compare directly. "wrong" is the
// number of output bytes that differ from a reference computed on the host (an
// independent loop for the CPU cases, the host path for the GPU cases): a fast wrong
// answer cannot hide.
//
// CPU: StridedCopyHost contiguous and narrowed vs std::memcpy.
// GPU (built with CUDA, skipped without a device): narrow along rows (one contiguous
// block), along columns (8 KiB runs) and a bf16 transpose, vs cudaMemcpyAsync
// device to device; timed with CUDA events around each call (manual time), after one
// warm-up call. The stream is held at a gate (StreamGate) until the events and the call
// are enqueued, so host-side launch work (argument checks, the launcher's attribute and
// occupancy queries) is not counted as device time. Each kernel case also times a
// cudaMemcpyAsync of its own output's bytes in every iteration (first on even iterations,
// second on odd ones): its "vs_memcpy" counter is the memcpy time over the kernel time,
// summed over the run, so the ratio comes from the same run and the same bytes.
// GPU conversions (ConvertFloatsDevice) of 16 Mi finite elements: float32 <-> bfloat16 and
// float32 -> float8_e4m3fn with both sides 16-byte aligned, and at addresses that take the
// plan's other paths (an access per element; bytes one at a time); their memcpy baseline
// copies half the bytes read plus written, so that both move the same bytes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "sdrt/bench/bench_util.h"
#include "sdrt/tensor/backend/strided_copy.h"

#if SDRT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "sdrt/bench/device_timing.h"
#include "sdrt/cuda/kernels.h"
#include "sdrt/tensor/internal/float_cast.h"
#endif

namespace sdrt {
namespace {

using ::sdrt::bench::Check;
using ::sdrt::bench::CountMismatches;
using ::sdrt::bench::RandomBytes;
using ::sdrt::bench::Report;
#if SDRT_HAVE_CUDA
using ::sdrt::bench::CudaOk;
using ::sdrt::bench::Gpu;
#endif

constexpr int64_t kMiB = int64_t{1} << 20;
// The narrow cases read a float32 [kRows, kCols] tensor (128 MiB) and write half of it.
constexpr int64_t kRows = 8192;
constexpr int64_t kCols = 4096;

// ---------------------------------------------------------------------------------
// CPU.

void BM_HostMemcpy(benchmark::State& state) {
  const int64_t bytes = 64 * kMiB;
  const std::vector<uint8_t> src = RandomBytes(bytes, 1);
  std::vector<uint8_t> dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  Report(state, 2 * bytes, CountMismatches(dst, src));
}
BENCHMARK(BM_HostMemcpy)->Unit(benchmark::kMillisecond);

void BM_StridedCopyHostContiguous(benchmark::State& state) {
  const std::vector<int64_t> sizes = {kRows / 2, kCols};
  const std::vector<int64_t> strides = {kCols, 1};
  const std::vector<uint8_t> src = RandomBytes(kRows / 2 * kCols * 4, 2);
  std::vector<uint8_t> dst(src.size());
  for (auto _ : state) {
    if (!Check(state, StridedCopyHost(dst.data(), src.data(), 4, sizes, strides, strides))) break;
    benchmark::ClobberMemory();
  }
  if (!state.error_occurred())
    Report(state, 2 * static_cast<int64_t>(dst.size()), CountMismatches(dst, src));
}
BENCHMARK(BM_StridedCopyHostContiguous)->Unit(benchmark::kMillisecond);

// Columns [1000, 1000 + kCols / 2) of the [kRows, kCols] tensor: rows of 8 KiB.
void BM_StridedCopyHostNarrowColumns(benchmark::State& state) {
  const int64_t cols = kCols / 2, first = 1000;
  const std::vector<uint8_t> src = RandomBytes(kRows * kCols * 4, 3);
  std::vector<uint8_t> dst(kRows * cols * 4), expected(dst.size());
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(&expected[r * cols * 4], &src[(r * kCols + first) * 4], cols * 4);
  }
  for (auto _ : state) {
    if (!Check(state, StridedCopyHost(dst.data(), src.data() + first * 4, 4, {kRows, cols},
                                      {cols, 1}, {kCols, 1}))) {
      break;
    }
    benchmark::ClobberMemory();
  }
  if (!state.error_occurred())
    Report(state, 2 * static_cast<int64_t>(dst.size()), CountMismatches(dst, expected));
}
BENCHMARK(BM_StridedCopyHostNarrowColumns)->Unit(benchmark::kMillisecond);

#if SDRT_HAVE_CUDA
// ---------------------------------------------------------------------------------
// GPU.

void BM_DeviceMemcpy(benchmark::State& state) {
  Gpu gpu(state);
  if (!gpu.ok()) return;
  const std::vector<uint8_t> src = RandomBytes(64 * kMiB, 4);
  uint8_t* d_src = gpu.Upload(src);
  uint8_t* d_dst = gpu.Upload(std::vector<uint8_t>(src.size()));
  gpu.Time([&] {
    const cudaError_t err =
        cudaMemcpyAsync(d_dst, d_src, src.size(), cudaMemcpyDeviceToDevice, gpu.stream());
    return err == cudaSuccess ? absl::OkStatus() : absl::InternalError(cudaGetErrorString(err));
  });
  if (gpu.ok()) Report(state, 2 * kMiB * 64, CountMismatches(gpu.Download(d_dst, src.size()), src));
}
BENCHMARK(BM_DeviceMemcpy)->UseManualTime()->Unit(benchmark::kMillisecond);

// One strided copy of `elem_size`-byte elements out of a random source of `src_elems`
// elements, starting `src_offset` elements in, into a contiguous [sizes] destination.
void RunStridedCopy(benchmark::State& state, int64_t elem_size, int64_t src_elems,
                    int64_t src_offset, const std::vector<int64_t>& sizes,
                    const std::vector<int64_t>& src_strides) {
  Gpu gpu(state);
  if (!gpu.ok()) return;
  const std::vector<int64_t> dst_strides = {sizes[1], 1};
  const std::vector<uint8_t> src = RandomBytes(src_elems * elem_size, 6);
  std::vector<uint8_t> expected(sizes[0] * sizes[1] * elem_size);
  uint8_t* d_src = gpu.Upload(src);
  uint8_t* d_dst = gpu.Upload(expected);
  gpu.Time(
      [&] {
        return StridedCopyDevice(d_dst, d_src + src_offset * elem_size, elem_size, sizes,
                                 dst_strides, src_strides, gpu.stream());
      },
      d_src, static_cast<int64_t>(expected.size()));
  if (!gpu.ok() || !StridedCopyHost(expected.data(), src.data() + src_offset * elem_size, elem_size,
                                    sizes, dst_strides, src_strides)
                        .ok()) {
    return;
  }
  const int64_t bytes = static_cast<int64_t>(expected.size());
  Report(state, 2 * bytes, CountMismatches(gpu.Download(d_dst, bytes), expected));
}

void BM_NarrowRowsDevice(benchmark::State& state) {
  RunStridedCopy(state, 4, kRows * kCols, kRows / 4 * kCols, {kRows / 2, kCols}, {kCols, 1});
}
BENCHMARK(BM_NarrowRowsDevice)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_NarrowColumnsDevice(benchmark::State& state) {
  RunStridedCopy(state, 4, kRows * kCols, 1000, {kRows, kCols / 2}, {kCols, 1});
}
BENCHMARK(BM_NarrowColumnsDevice)->UseManualTime()->Unit(benchmark::kMillisecond);

// A bf16 [4096, 8192] tensor made contiguous from its transpose: 2-byte accesses.
void BM_TransposeDevice(benchmark::State& state) {
  RunStridedCopy(state, 2, 4096 * 8192, 0, {4096, 8192}, {1, 4096});
}
BENCHMARK(BM_TransposeDevice)->UseManualTime()->Unit(benchmark::kMillisecond);

// One ConvertFloatsDevice of kConvertElements finite values (random in [-1000, 1000],
// converted into `from` on the host) from `src_misalign` bytes past an aligned address into
// `to` at `dst_misalign`; "wrong" counts the bytes that differ from ConvertFloats.
constexpr int64_t kConvertElements = int64_t{16} << 20;
void RunConvert(benchmark::State& state, DType from, DType to, int64_t src_misalign,
                int64_t dst_misalign) {
  Gpu gpu(state);
  if (!gpu.ok()) return;
  const int64_t n = kConvertElements;
  const int64_t in_bytes = ElementBits(from) / 8, out_bytes = ElementBits(to) / 8;
  std::vector<float> values(n);
  std::mt19937_64 gen(9);
  std::uniform_real_distribution<float> value(-1000.0f, 1000.0f);
  for (float& v : values) v = value(gen);
  std::vector<uint8_t> src(src_misalign + n * in_bytes);
  std::vector<uint8_t> expected(dst_misalign + n * out_bytes);
  if (!internal::ConvertFloats(values.data(), DType::kFloat32, src.data() + src_misalign, from, n) ||
      !internal::ConvertFloats(src.data() + src_misalign, from, expected.data() + dst_misalign, to,
                               n)) {
    state.SkipWithError("no host conversion");
    return;
  }
  uint8_t* d_src = gpu.Upload(src);
  uint8_t* d_dst = gpu.Upload(std::vector<uint8_t>(expected.size()));
  const int64_t moved = n * (in_bytes + out_bytes);
  gpu.Time(
      [&] {
        return ConvertFloatsDevice(d_dst + dst_misalign, to, d_src + src_misalign, from, n,
                                   gpu.stream());
      },
      in_bytes >= out_bytes ? d_src : d_dst, moved / 2);
  if (!gpu.ok()) return;
  Report(state, moved,
         CountMismatches(gpu.Download(d_dst, static_cast<int64_t>(expected.size())), expected));
}

void BM_ConvertF32ToBF16Device(benchmark::State& state) {
  RunConvert(state, DType::kFloat32, DType::kBFloat16, 0, 0);
}
BENCHMARK(BM_ConvertF32ToBF16Device)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_ConvertBF16ToF32Device(benchmark::State& state) {
  RunConvert(state, DType::kBFloat16, DType::kFloat32, 0, 0);
}
BENCHMARK(BM_ConvertBF16ToF32Device)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_ConvertF32ToF8E4M3Device(benchmark::State& state) {
  RunConvert(state, DType::kFloat32, DType::kFloat8E4M3FN, 0, 0);
}
BENCHMARK(BM_ConvertF32ToF8E4M3Device)->UseManualTime()->Unit(benchmark::kMillisecond);

// The sides one element apart from a common group boundary: an access per element.
void BM_ConvertF32ToBF16PerElementDevice(benchmark::State& state) {
  RunConvert(state, DType::kFloat32, DType::kBFloat16, 0, 2);
}
BENCHMARK(BM_ConvertF32ToBF16PerElementDevice)->UseManualTime()->Unit(benchmark::kMillisecond);

// A bfloat16 side at an odd address: every element read or written byte by byte.
void BM_ConvertF32ToBF16BytesDevice(benchmark::State& state) {
  RunConvert(state, DType::kFloat32, DType::kBFloat16, 0, 1);
}
BENCHMARK(BM_ConvertF32ToBF16BytesDevice)->UseManualTime()->Unit(benchmark::kMillisecond);

#endif  // SDRT_HAVE_CUDA

}  // namespace
}  // namespace sdrt

BENCHMARK_MAIN();
