// The single-process state-dict operations (core/state_dict/state_dict_ops.h) against the simplest
// way to move the same bytes, in the same run (bench/RESULTS.md, docs/PERFORMANCE.md):
//
//   CPU: CopyStateDict of a 1 GiB state dict of 300 float32 tensors (deterministic,
//        varied sizes) into a CreateCpuStateDict buffer vs one std::memcpy of the same
//        bytes. Each iteration times both, back to back, so "vs_memcpy" (memcpy time /
//        copy time, target >= 0.9) compares them under the same conditions. GB/s counts
//        bytes read plus bytes written; "wrong" counts differing bytes after the loop.
//   GPU (skipped without a device): CreateCpuStateDict(pin) and (pin + share) on
//        llama-8b shapes (291 tensors, first dim / 16: about 1 GB of bf16) with one arena
//        vs one pinned allocation / registration per tensor (what PyTorch does), and
//        CopyStateDict from CUDA into the pinned buffer (non-blocking, waited on) vs one
//        cudaMemcpyAsync device-to-host of the same bytes (target >= 0.9).
//
// Run: build/bench/state_dict_ops_bench --benchmark_min_time=... (see RESULTS.md).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sdrt/bench/bench_util.h"
#include "sdrt/core/state_dict/state_dict_ops.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

using ::sdrt::bench::Check;
using ::sdrt::bench::Report;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t AlignUp(int64_t n) { return (n + 255) / 256 * 256; }

// A state dict of tensors of `shapes` (`dtype`) viewing one arena at 256-byte aligned
// slots, filled with deterministic pseudo-random words; `arena` receives the storage.
absl::StatusOr<Map> MakeSource(const std::vector<IntVector>& shapes, DType dtype,
                               std::shared_ptr<Storage>* arena) {
  int64_t total = 0;
  for (const IntVector& shape : shapes) {
    SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(shape));
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(dtype, numel));
    total = AlignUp(total) + bytes;
  }
  absl::StatusOr<std::shared_ptr<Storage>> storage = Storage::AllocateCpu(total);
  if (!storage.ok()) return storage.status();
  std::mt19937_64 gen(2026);
  uint64_t* words = static_cast<uint64_t*>((*storage)->data());
  for (int64_t i = 0; i < total / 8; ++i) words[i] = gen();
  Map sd;
  int64_t offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    offset = AlignUp(offset);
    absl::StatusOr<Tensor> t = Tensor::AtByteOffset(*storage, offset, dtype, shapes[i]);
    if (!t.ok()) return t.status();
    sd.Set("t" + std::to_string(i), *t);
    offset += t->nbytes();
  }
  *arena = *std::move(storage);
  return sd;
}

// Bytes of the tensors of `sd` that differ from `expected`'s (plain CPU tensors).
int64_t CountWrong(const Map& sd, const Map& expected) {
  int64_t wrong = 0;
  for (size_t i = 0; i < sd.size(); ++i) {
    const Tensor& a = sd.value(i).as_tensor();
    const Tensor& b = expected.value(i).as_tensor();
    const auto* pa = static_cast<const uint8_t*>(a.data_ptr());
    const auto* pb = static_cast<const uint8_t*>(b.data_ptr());
    for (int64_t k = 0; k < a.nbytes(); ++k) wrong += pa[k] != pb[k];
  }
  return wrong;
}

int64_t TotalBytes(const Map& sd) {
  int64_t total = 0;
  for (size_t i = 0; i < sd.size(); ++i) total += sd.value(i).as_tensor().nbytes();
  return total;
}

// 300 float32 tensors, 1 GiB in all: sizes cycle through 1..97 units (deterministic), so
// small and large tensors alternate.
std::vector<IntVector> OneGiBShapes() {
  constexpr int kTensors = 300;
  constexpr int64_t kFloats = int64_t{1} << 28;
  std::vector<int64_t> weights(kTensors);
  int64_t weight_sum = 0;
  for (int i = 0; i < kTensors; ++i) weight_sum += weights[i] = 1 + (i * 37) % 97;
  std::vector<IntVector> shapes;
  int64_t left = kFloats;
  for (int i = 0; i < kTensors; ++i) {
    const int64_t n = i + 1 == kTensors ? left : kFloats * weights[i] / weight_sum / 256 * 256;
    left -= n;
    shapes.push_back(IntVector{n / 256, 256});
  }
  return shapes;
}

void BM_CopyStateDictCpu(benchmark::State& state) {
  std::shared_ptr<Storage> src_arena;
  absl::StatusOr<Map> src = MakeSource(OneGiBShapes(), DType::kFloat32, &src_arena);
  if (!Check(state, src.status())) return;
  absl::StatusOr<Map> dst = CreateCpuStateDict(*src);
  if (!Check(state, dst.status())) return;
  void* dst_arena = dst->value(0).as_tensor().data_ptr();
  const int64_t bytes = TotalBytes(*src);
  double copy_seconds = 0;
  double memcpy_seconds = 0;
  bool memcpy_first = true;  // alternates, so neither side always runs on a warmer cache
  for (auto _ : state) {
    double seconds = 0;
    for (int step = 0; step < 2; ++step) {
      const Clock::time_point start = Clock::now();
      if ((step == 0) == memcpy_first) {
        std::memcpy(dst_arena, src_arena->data(), static_cast<size_t>(bytes));
        benchmark::ClobberMemory();
        memcpy_seconds += Seconds(start);
      } else {
        if (!Check(state, CopyStateDict(*src, *dst).status())) return;
        benchmark::ClobberMemory();
        seconds = Seconds(start);
      }
    }
    memcpy_first = !memcpy_first;
    copy_seconds += seconds;
    state.SetIterationTime(seconds);
  }
  Report(state, 2 * bytes, CountWrong(*dst, *src));
  state.counters["tensors"] = static_cast<double>(src->size());
  state.counters["vs_memcpy"] = memcpy_seconds / copy_seconds;
}
BENCHMARK(BM_CopyStateDictCpu)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_MemcpyCpu(benchmark::State& state) {
  std::shared_ptr<Storage> src_arena;
  absl::StatusOr<Map> src = MakeSource(OneGiBShapes(), DType::kFloat32, &src_arena);
  if (!Check(state, src.status())) return;
  absl::StatusOr<Map> dst = CreateCpuStateDict(*src);
  if (!Check(state, dst.status())) return;
  const int64_t bytes = TotalBytes(*src);
  for (auto _ : state) {
    std::memcpy(dst->value(0).as_tensor().data_ptr(), src_arena->data(),
                static_cast<size_t>(bytes));
    benchmark::ClobberMemory();
  }
  Report(state, 2 * bytes, 0);
}
BENCHMARK(BM_MemcpyCpu)->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------
// GPU.

// Llama-3-8B's 291 tensors, the first dim divided by 16 (rounded up).
std::vector<IntVector> Llama8bShapesOver16() {
  constexpr int64_t kHidden = 4096, kKv = 1024, kFfn = 14336, kVocab = 128256;
  const auto scaled = [](int64_t rows, int64_t cols) {
    return cols == 0 ? IntVector{(rows + 15) / 16} : IntVector{(rows + 15) / 16, cols};
  };
  std::vector<IntVector> shapes{scaled(kVocab, kHidden)};
  for (int layer = 0; layer < 32; ++layer) {
    for (const IntVector& s :
         {scaled(kHidden, kHidden), scaled(kKv, kHidden), scaled(kKv, kHidden),
          scaled(kHidden, kHidden), scaled(kFfn, kHidden), scaled(kFfn, kHidden),
          scaled(kHidden, kFfn), scaled(kHidden, 0), scaled(kHidden, 0)}) {
      shapes.push_back(s);
    }
  }
  shapes.push_back(scaled(kHidden, 0));
  shapes.push_back(scaled(kVocab, kHidden));
  return shapes;
}

bool HaveGpu(benchmark::State& state) {
  if (CudaDeviceCount() > 0) return true;
  state.SkipWithError("no CUDA device");
  return false;
}

// Times `make` (one pinned state dict per call; released untimed after each iteration).
template <typename Make>
void TimeCreate(benchmark::State& state, Make make) {
  std::shared_ptr<Storage> src_arena;
  absl::StatusOr<Map> src = MakeSource(Llama8bShapesOver16(), DType::kBFloat16, &src_arena);
  if (!Check(state, src.status())) return;
  for (auto _ : state) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<Map> made = make(*src);
    state.SetIterationTime(Seconds(start));
    if (!Check(state, made.status())) return;
    if (!made->value(0).as_tensor().storage()->is_pinned()) {
      state.SkipWithError("result is not pinned");
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * TotalBytes(*src));
  state.counters["tensors"] = static_cast<double>(src->size());
}

void BM_CreateCpuPinnedArena(benchmark::State& state) {
  if (!HaveGpu(state)) return;
  const bool share = state.range(0) != 0;
  TimeCreate(state, [share](const Map& src) {
    return CreateCpuStateDict(src, CreateCpuOptions{true, share});
  });
}
BENCHMARK(BM_CreateCpuPinnedArena)
    ->ArgName("share")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// PyTorch's way: pin_memory: one cudaHostAlloc per tensor; share + pin: one shm segment
// and one cudaHostRegister per tensor.
void BM_CreateCpuPinnedPerTensor(benchmark::State& state) {
  if (!HaveGpu(state)) return;
  const bool share = state.range(0) != 0;
  TimeCreate(state, [share](const Map& src) -> absl::StatusOr<Map> {
    Map out;
    for (size_t i = 0; i < src.size(); ++i) {
      const Tensor& t = src.value(i).as_tensor();
      absl::StatusOr<std::shared_ptr<Storage>> storage =
          share ? Storage::AllocateShared(t.nbytes()) : PinnedHostAllocator::Allocate(t.nbytes());
      if (!storage.ok()) return storage.status();
      if (share) {
        absl::Status pinned = PinStorage(**storage, kHostRegisterPortable);
        if (!pinned.ok()) return pinned;
      }
      absl::StatusOr<Tensor> view = Tensor::FromStorage(*std::move(storage), t.dtype(), t.shape());
      if (!view.ok()) return view.status();
      out.Set(src.key(i), *std::move(view));
    }
    return out;
  });
}
BENCHMARK(BM_CreateCpuPinnedPerTensor)
    ->ArgName("share")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// CopyStateDict CUDA -> pinned (non-blocking on one stream, then wait) vs one
// device-to-host copy of the same bytes from a flat device buffer into the same arena.
void BM_CopyStateDictToPinned(benchmark::State& state) {
  if (!HaveGpu(state)) return;
  std::shared_ptr<Storage> host_arena;
  absl::StatusOr<Map> host = MakeSource(Llama8bShapesOver16(), DType::kBFloat16, &host_arena);
  if (!Check(state, host.status())) return;
  Map src;
  for (size_t i = 0; i < host->size(); ++i) {
    absl::StatusOr<Tensor> on_gpu = host->value(i).as_tensor().To(Device::CUDA(0));
    if (!Check(state, on_gpu.status())) return;
    src.Set(host->key(i), *std::move(on_gpu));
  }
  absl::StatusOr<Map> dst = CreateCpuStateDict(src, CreateCpuOptions{true, false});
  if (!Check(state, dst.status())) return;
  const int64_t bytes = TotalBytes(src);
  absl::StatusOr<Tensor> flat_gpu = Tensor::Empty({bytes}, DType::kUInt8, Device::CUDA(0));
  if (!Check(state, flat_gpu.status())) return;
  absl::StatusOr<Tensor> flat_host =
      Tensor::FromStorage(dst->value(0).as_tensor().storage(), DType::kUInt8, {bytes});
  if (!Check(state, flat_host.status())) return;
  absl::StatusOr<CudaStream> stream = CudaStream::Create(0);
  if (!Check(state, stream.status())) return;
  const CopyOptions options{true, true, stream->handle()};
  double copy_seconds = 0;
  double memcpy_seconds = 0;
  for (auto _ : state) {
    Clock::time_point start = Clock::now();
    if (!Check(state, flat_host->CopyFrom(*flat_gpu, true, stream->handle())) ||
        !Check(state, stream->Synchronize())) {
      return;
    }
    memcpy_seconds += Seconds(start);
    start = Clock::now();
    absl::StatusOr<CopyResult> copied = CopyStateDict(src, *dst, options);
    if (!Check(state, copied.status()) || !Check(state, copied->done->Synchronize())) return;
    const double seconds = Seconds(start);
    copy_seconds += seconds;
    state.SetIterationTime(seconds);
  }
  Report(state, bytes, CountWrong(*dst, *host));
  state.counters["tensors"] = static_cast<double>(src.size());
  state.counters["vs_memcpy"] = memcpy_seconds / copy_seconds;
}
BENCHMARK(BM_CopyStateDictToPinned)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sdrt

BENCHMARK_MAIN();
