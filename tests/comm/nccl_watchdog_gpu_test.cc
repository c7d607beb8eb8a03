// The NCCL backend's watchdog on one GPU (label gpu; skips without a device): a one-rank
// communicator whose borrowed stream (Options::stream) is held closed by a host function,
// so a collective cannot complete; the call must come back DeadlineExceeded after
// Options::timeout, abort the communicator, and every later call must be refused. The
// watchdog across ranks (a missing peer): nccl_multi_gpu_test.cc.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

// How long the test's collective may wait (Options::timeout).
constexpr std::chrono::milliseconds kTimeout(2000);
// How long the gate holds a stream at most, whatever the test does: the host function
// returns by itself then, so no bug can hang the process (or its exit) on the stream.
constexpr std::chrono::seconds kGateLimit(10);

// Holds a stream closed from the host: Close enqueues a host function (cudaLaunchHostFunc)
// that spins until Open() or until kGateLimit has passed since Close. It holds back only
// its own stream's later work, but CUDA may run the host functions of every stream of the
// process on one thread, so host functions enqueued elsewhere (NCCL's too) may wait behind
// it; the limit bounds that as well. The destructor opens the gate and waits for the
// stream, so the function never outlives the gate and the stream is idle when its owner
// destroys it: declare the gate after the stream, the communicator and every buffer the
// held work reads or writes.
class StreamGate {
 public:
  StreamGate() = default;
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  ~StreamGate() {
    Open();
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  }

  // Enqueues the spinning host function on `stream` (once per gate).
  cudaError_t Close(cudaStream_t stream) {
    stream_ = stream;
    give_up_ = Clock::now() + kGateLimit;
    return cudaLaunchHostFunc(stream, &StreamGate::Spin, this);
  }
  void Open() { open_.store(true); }
  // True when the host function gave up at kGateLimit instead of being opened.
  bool hit_limit() const { return hit_limit_.load(); }

 private:
  static void CUDART_CB Spin(void* gate) {
    auto* self = static_cast<StreamGate*>(gate);
    while (!self->open_.load()) {
      if (Clock::now() > self->give_up_) {
        self->hit_limit_.store(true);
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  cudaStream_t stream_ = nullptr;
  Clock::time_point give_up_;
  std::atomic<bool> open_{false};
  std::atomic<bool> hit_limit_{false};
};

// A staged all-reduce (a CPU tensor: copied to the device on the held stream) cannot
// finish while the stream is held: it returns DeadlineExceeded naming the op after about
// the timeout, the communicator is aborted, and the barrier after it is FailedPrecondition
// without touching NCCL.
TEST(NcclWatchdogGpuTest, HeldStreamTimesOutThenCallsAreRefused) {
  SDRT_SKIP_WITHOUT_GPU();
  absl::StatusOr<CudaStream> stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<NcclUniqueId> id = NcclUniqueId::Generate();
  ASSERT_TRUE(id.ok()) << id.status();
  NcclCommunicator::Options options;
  options.stream = stream->handle();
  options.timeout = kTimeout;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::Create(0, 1, 0, *id, options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->stream(), stream->handle());

  // Pinned host memory: a copy from pageable memory may wait on the host for the stream,
  // which would hold the call before the watchdog runs.
  constexpr int64_t kCount = 1024;
  absl::StatusOr<std::shared_ptr<Storage>> pinned =
      PinnedHostAllocator::Allocate(kCount * static_cast<int64_t>(sizeof(float)), 0);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  absl::StatusOr<Tensor> tensor = Tensor::FromStorage(*pinned, DType::kFloat32, {kCount});
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  for (int64_t i = 0; i < kCount; ++i) tensor->data<float>()[i] = static_cast<float>(i);
  // The first staged call allocates the staging buffer (cudaMalloc, which may wait for the
  // device); the held call below reuses it. One rank: the sum is the tensor itself.
  ASSERT_TRUE((*comm)->AllReduce(*tensor, ReduceOp::kSum).ok());
  EXPECT_EQ(tensor->data<float>()[kCount - 1], static_cast<float>(kCount - 1));

  StreamGate gate;
  ASSERT_EQ(gate.Close(static_cast<cudaStream_t>(stream->handle())), cudaSuccess);
  const Clock::time_point start = Clock::now();
  const absl::Status held = (*comm)->AllReduce(*tensor, ReduceOp::kSum);
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  const bool gave_up = gate.hit_limit();
  gate.Open();
  EXPECT_EQ(held.code(), absl::StatusCode::kDeadlineExceeded) << held;
  EXPECT_THAT(std::string(held.message()), HasSubstr("all_reduce"));
  EXPECT_THAT(std::string(held.message()), HasSubstr("not complete after 2000 ms"));
  EXPECT_THAT(std::string(held.message()), HasSubstr("the NCCL communicator was aborted"));
  EXPECT_GE(elapsed, kTimeout);
  // Well before the gate's own limit: the deadline ended the call, and the abort did not
  // wait for the held stream.
  EXPECT_LT(elapsed, kTimeout + std::chrono::seconds(3)) << elapsed.count() << " ms";
  EXPECT_FALSE(gave_up) << "the gate gave up at its limit before the call returned";

  const absl::Status refused = (*comm)->Barrier();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("barrier"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("aborted by an earlier error or timeout"));
}

}  // namespace
}  // namespace sdrt
