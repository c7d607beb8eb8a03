// How the GPU benchmarks time a call (kernels_bench.cc, fp8_kernels_bench.cc): device memory,
// a stream held at a gate while the events and the call are enqueued, CUDA events around
// the call, and a cudaMemcpyAsync of the same bytes timed in the same iterations (the
// "vs_memcpy" counter). CUDA builds only. Header-only.
#ifndef SDRT_BENCH_DEVICE_TIMING_H_
#define SDRT_BENCH_DEVICE_TIMING_H_

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "sdrt/bench/bench_util.h"

namespace sdrt::bench {

// False (and the benchmark skipped) when `err` is not cudaSuccess.
inline bool CudaOk(benchmark::State& state, cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  state.SkipWithError((std::string(what) + ": " + cudaGetErrorString(err)).c_str());
  return false;
}

// Holds a stream at a host function until Open(), so that everything enqueued behind it
// (the start event, the timed call, the stop event) is queued before the device reaches
// the start event. A timed call that waited on the stream itself would wait for the gate;
// the gate opens by itself after kMaxHold and held_too_long() then says the timing is void.
class StreamGate {
 public:
  static constexpr std::chrono::seconds kMaxHold{5};

  absl::Status Close(cudaStream_t stream) {
    open_.store(false);
    held_too_long_.store(false);
    const cudaError_t err = cudaLaunchHostFunc(stream, &StreamGate::Hold, this);
    if (err == cudaSuccess) return absl::OkStatus();
    open_.store(true);
    return absl::InternalError(std::string("cudaLaunchHostFunc: ") + cudaGetErrorString(err));
  }
  void Open() { open_.store(true); }
  bool held_too_long() const { return held_too_long_.load(); }

 private:
  static void CUDART_CB Hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + kMaxHold;
    while (!gate->open_.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        gate->held_too_long_.store(true);
        return;
      }
      std::this_thread::yield();
    }
  }

  std::atomic<bool> open_{true};
  std::atomic<bool> held_too_long_{false};
};

// Device memory, its stream and timing events; every failure skips the benchmark.
class Gpu {
 public:
  explicit Gpu(benchmark::State& state) : state_(state) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      state.SkipWithError("no CUDA device");
      return;
    }
    ok_ = CudaOk(state, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                 "cudaStreamCreate") &&
          CudaOk(state, cudaEventCreate(&events_[0]), "cudaEventCreate") &&
          CudaOk(state, cudaEventCreate(&events_[1]), "cudaEventCreate") &&
          CudaOk(state, cudaEventCreate(&events_[2]), "cudaEventCreate");
  }
  ~Gpu() {
    // The gate's host function reads gate_: let it finish before gate_ goes away.
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (void* p : buffers_) cudaFree(p);
    for (cudaEvent_t e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  bool ok() const { return ok_; }
  cudaStream_t stream() const { return stream_; }

  // A device copy of `contents`; nullptr (and ok() false) on failure.
  uint8_t* Upload(const std::vector<uint8_t>& contents) {
    void* p = nullptr;
    ok_ = ok_ && CudaOk(state_, cudaMalloc(&p, contents.size()), "cudaMalloc");
    if (!ok_) return nullptr;
    buffers_.push_back(p);
    ok_ = CudaOk(state_, cudaMemcpy(p, contents.data(), contents.size(), cudaMemcpyHostToDevice),
                 "cudaMemcpy");
    return static_cast<uint8_t*>(p);
  }

  std::vector<uint8_t> Download(const uint8_t* p, int64_t bytes) {
    std::vector<uint8_t> out(bytes);
    ok_ = ok_ &&
          CudaOk(state_, cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return out;
  }

  // Runs `op` (which enqueues on stream()) once to warm up, then once per iteration
  // between two events behind a closed StreamGate, reporting the events' elapsed time as
  // the iteration time. With `memcpy_bytes` > 0, every iteration also times a
  // cudaMemcpyAsync of that many bytes from `memcpy_src` into a scratch buffer (before op
  // on even iterations, after it on odd ones) and the "vs_memcpy" counter is the memcpy
  // time over op's time, summed over the run.
  template <typename Op>
  void Time(Op op, const uint8_t* memcpy_src = nullptr, int64_t memcpy_bytes = 0) {
    uint8_t* scratch = nullptr;
    if (memcpy_bytes > 0) scratch = Upload(std::vector<uint8_t>(memcpy_bytes));
    const auto baseline = [&] {
      const cudaError_t err =
          cudaMemcpyAsync(scratch, memcpy_src, memcpy_bytes, cudaMemcpyDeviceToDevice, stream_);
      return err == cudaSuccess ? absl::OkStatus() : absl::InternalError(cudaGetErrorString(err));
    };
    ok_ = ok_ && Check(state_, op()) && (scratch == nullptr || Check(state_, baseline())) &&
          CudaOk(state_, cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (!ok_) return;
    double op_ms_sum = 0;
    double memcpy_ms_sum = 0;
    int64_t iteration = 0;
    for (auto _ : state_) {
      const bool op_first = scratch == nullptr || iteration++ % 2 == 0;
      float ms[2] = {0, 0};
      ok_ = Check(state_, gate_.Close(stream_));
      if (!ok_) break;
      ok_ = Record(0) && Check(state_, op_first ? op() : baseline()) && Record(1) &&
            (scratch == nullptr || (Check(state_, op_first ? baseline() : op()) && Record(2)));
      gate_.Open();
      const int last = scratch == nullptr ? 1 : 2;
      ok_ = ok_ && CudaOk(state_, cudaEventSynchronize(events_[last]), "cudaEventSynchronize") &&
            Elapsed(0, 1, &ms[0]) && (scratch == nullptr || Elapsed(1, 2, &ms[1]));
      if (ok_ && gate_.held_too_long()) {
        state_.SkipWithError("the timed call waited on its own stream (StreamGate held)");
        ok_ = false;
      }
      if (!ok_) break;
      const float op_ms = op_first ? ms[0] : ms[1];
      op_ms_sum += op_ms;
      memcpy_ms_sum += op_first ? ms[1] : ms[0];
      state_.SetIterationTime(op_ms / 1e3);
    }
    if (ok_ && scratch != nullptr && op_ms_sum > 0) {
      state_.counters["vs_memcpy"] = memcpy_ms_sum / op_ms_sum;
    }
  }

 private:
  bool Record(int i) {
    return CudaOk(state_, cudaEventRecord(events_[i], stream_), "cudaEventRecord");
  }
  bool Elapsed(int from, int to, float* ms) {
    return CudaOk(state_, cudaEventElapsedTime(ms, events_[from], events_[to]),
                  "cudaEventElapsedTime");
  }

  benchmark::State& state_;
  bool ok_ = false;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[3] = {nullptr, nullptr, nullptr};
  StreamGate gate_;
  std::vector<void*> buffers_;
};

}  // namespace sdrt::bench

#endif  // SDRT_BENCH_DEVICE_TIMING_H_
