// GPU tests of adopting an engine's own ncclComm_t (NcclCommunicator::Adopt and the C API's
// sdrt_comm_create_from_nccl; label gpu, each skips without a device): one rank on device 0
// made by raw NCCL, as an engine makes it. sdrt's calls run over it, destroying sdrt's
// communicator leaves it usable by its owner, a wrong rank, size or device is refused
// without touching it, and a communicator sdrt splits from it is sdrt's own.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/c_api.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tests/support/nccl_single_rank.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

// The engine's side: a one-rank communicator on device 0 made by raw NCCL (blocking, NCCL's
// default, or non-blocking), destroyed by the engine at the end of the test.
class EngineComm {
 public:
  explicit EngineComm(bool blocking) {
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    ncclUniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking ? 1 : 0;
    const ncclResult_t started = ncclCommInitRankConfig(&comm_, 1, id, 0, &config);
    EXPECT_TRUE(started == ncclSuccess || started == ncclInProgress) << started;
  }
  ~EngineComm() {
    if (comm_ != nullptr) {
      EXPECT_EQ(ncclCommDestroy(comm_), ncclSuccess);
    }
  }
  ncclComm_t get() const { return comm_; }

  // The engine's own all-reduce of one int32 (value 7) after sdrt is done with the
  // communicator: the sum over one rank is the value.
  void ExpectStillUsable() const {
    int32_t* value = nullptr;
    ASSERT_EQ(cudaMalloc(&value, sizeof(int32_t)), cudaSuccess);
    const int32_t seven = 7;
    ASSERT_EQ(cudaMemcpy(value, &seven, sizeof seven, cudaMemcpyHostToDevice), cudaSuccess);
    ncclResult_t result = ncclAllReduce(value, value, 1, ncclInt32, ncclSum, comm_, nullptr);
    while (result == ncclInProgress) (void)ncclCommGetAsyncError(comm_, &result);
    ASSERT_EQ(result, ncclSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    int32_t back = 0;
    ASSERT_EQ(cudaMemcpy(&back, value, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back, 7);
    EXPECT_EQ(cudaFree(value), cudaSuccess);
  }

 private:
  ncclComm_t comm_ = nullptr;
};

NcclCommunicator::AdoptOptions TestOptions() {
  NcclCommunicator::AdoptOptions options;
  options.timeout = test::kSingleRankNcclTimeout;
  return options;
}

TEST(NcclAdoptGpuTest, RunsOverTheEnginesCommunicatorAndLeavesItUsable) {
  SDRT_SKIP_WITHOUT_GPU();
  for (const bool blocking : {true, false}) {
    SCOPED_TRACE(blocking ? "blocking" : "non-blocking");
    EngineComm engine(blocking);
    {
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
          NcclCommunicator::Adopt(engine.get(), 0, 1, 0, TestOptions());
      ASSERT_TRUE(comm.ok()) << comm.status();
      EXPECT_EQ((*comm)->rank(), 0);
      EXPECT_EQ((*comm)->size(), 1);
      EXPECT_EQ((*comm)->device(), Device::CUDA(0));
      Tensor x = *Tensor::Empty({1000}, DType::kFloat32, Device::CPU());
      for (int64_t i = 0; i < 1000; ++i) x.data<float>()[i] = static_cast<float>(i) * 0.25f;
      Tensor on_gpu = *x.To(Device::CUDA(0));
      ASSERT_TRUE((*comm)->AllReduce(on_gpu, ReduceOp::kSum).ok());
      Tensor back = *on_gpu.To(Device::CPU());
      for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(back.data<float>()[i], x.data<float>()[i]);
      absl::StatusOr<std::vector<std::string>> bytes = (*comm)->AllGatherBytes("engine");
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      EXPECT_EQ(*bytes, std::vector<std::string>{"engine"});
      // A child is sdrt's own communicator (destroyed with its object, the parent kept).
      absl::StatusOr<std::unique_ptr<Communicator>> child = (*comm)->Split(0, 0);
      ASSERT_TRUE(child.ok()) << child.status();
      ASSERT_NE(*child, nullptr);
      EXPECT_TRUE((*child)->Barrier().ok());
    }
    engine.ExpectStillUsable();
  }
}

TEST(NcclAdoptGpuTest, RefusesWrongClaimsWithoutTouchingTheCommunicator) {
  SDRT_SKIP_WITHOUT_GPU();
  EngineComm engine(true);
  const auto code = [&](int rank, int size, int device) {
    return NcclCommunicator::Adopt(engine.get(), rank, size, device, TestOptions())
        .status()
        .code();
  };
  EXPECT_EQ(code(0, 2, 0), absl::StatusCode::kInvalidArgument);  // NCCL says size 1
  EXPECT_EQ(code(1, 2, 0), absl::StatusCode::kInvalidArgument);  // and rank 0
  EXPECT_EQ(code(1, 1, 0), absl::StatusCode::kInvalidArgument);  // rank outside [0, size)
  EXPECT_EQ(code(0, 1, CudaDeviceCount()), absl::StatusCode::kInvalidArgument);
  if (CudaDeviceCount() > 1) {
    EXPECT_EQ(code(0, 1, 1), absl::StatusCode::kInvalidArgument);  // NCCL says device 0
  }
  EXPECT_EQ(NcclCommunicator::Adopt(nullptr, 0, 1, 0, TestOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
  engine.ExpectStillUsable();
}

// The same through the C API, with the engine's stream.
TEST(NcclAdoptGpuTest, CApiAdoptsWithTheEnginesStream) {
  SDRT_SKIP_WITHOUT_GPU();
  EngineComm engine(false);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  sdrt_nccl_comm_options_t options = SDRT_NCCL_COMM_OPTIONS_INIT;
  options.timeout_seconds = 60;
  options.stream = stream;
  sdrt_comm_t comm = nullptr;
  ASSERT_EQ(sdrt_comm_create_from_nccl(engine.get(), 0, 1, 0, &options, &comm), SDRT_OK)
      << sdrt_last_error();
  int size = 0;
  ASSERT_EQ(sdrt_comm_size(comm, &size), SDRT_OK);
  EXPECT_EQ(size, 1);
  EXPECT_EQ(sdrt_comm_create_from_nccl(engine.get(), 0, 3, 0, &options, &comm),
            SDRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sdrt_last_error()).find("NCCL says"), std::string::npos)
      << sdrt_last_error();
  EXPECT_EQ(sdrt_comm_destroy(comm), SDRT_OK);
  engine.ExpectStillUsable();
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace sdrt
