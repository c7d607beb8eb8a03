// GPU tests of the state-dict operations (label gpu; each skips without a device):
// pinned arenas (case-020, case-021), the non-blocking copy into pinned memory and its
// completion event (case-022), offload of CUDA tensors, and docs/SEMANTICS.md 9 items 3, 5 and 7.
#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/state_dict/state_dict_ops.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tests/core/state_dict/state_dict_ops_test_util.h"
#include "sdrt/tests/support/cuda_memory.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::sdrt::test::Arange;
using testing_ops::BytesIO;
using testing_ops::Floats;
using testing_ops::Full;
using testing_ops::Scalar;
using testing_ops::ShardedRows;

Tensor OnGpu(const Tensor& t) { return *t.To(Device::CUDA(0)); }

using test::IsPageLocked;

TEST(StateDictOpsGpu, PinnedSharedRegistrationsAreReleasedCase020) {
  SDRT_SKIP_WITHOUT_GPU();
  const Map sd{{"w", OnGpu(Arange({1024}))}};
  for (int repeat = 0; repeat < 10; ++repeat) {
    std::weak_ptr<Storage> arena;
    {
      absl::StatusOr<Map> out = CreateCpuStateDict(sd, CreateCpuOptions{true, true});
      ASSERT_TRUE(out.ok()) << "repeat " << repeat << ": " << out.status();
      const Tensor& w = out->Find("w")->as_tensor();
      EXPECT_EQ(w.storage()->kind(), StorageKind::kShared);
      EXPECT_TRUE(w.storage()->is_pinned());
      EXPECT_TRUE(IsPageLocked(w.data_ptr()));
      arena = w.storage();
    }
    EXPECT_TRUE(arena.expired());  // freed, and unregistered just before
  }
}

TEST(StateDictOpsGpu, NonBlockingCopyIntoPinnedIsCompleteAfterDoneCase022) {
  SDRT_SKIP_WITHOUT_GPU();
  // 100 float32 tensors of varied sizes, 64 MiB in all, random bytes.
  constexpr int64_t kTotalFloats = int64_t{16} << 20;
  Map host;
  Map src;
  int64_t left = kTotalFloats;
  for (int i = 0; i < 100; ++i) {
    const int64_t n = i == 99 ? left : kTotalFloats * ((i % 10) + 1) / 550;
    left -= n;
    const Tensor t = test::HashBytes({n}, DType::kFloat32, 22 + i);
    host.Set("t" + std::to_string(i), t);
    src.Set("t" + std::to_string(i), OnGpu(t));
  }
  absl::StatusOr<Map> dst = CreateCpuStateDict(src, CreateCpuOptions{true, false});
  ASSERT_TRUE(dst.ok()) << dst.status();
  const std::shared_ptr<Storage> arena = dst->value(0).as_tensor().storage();
  EXPECT_EQ(arena->kind(), StorageKind::kPinnedHost);
  std::memset(arena->data(), 0xFF, static_cast<size_t>(arena->nbytes()));  // poison
  absl::StatusOr<CudaStream> stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();

  absl::StatusOr<CopyResult> copied =
      CopyStateDict(src, *dst, CopyOptions{true, true, stream->handle()});
  ASSERT_TRUE(copied.ok()) << copied.status();
  ASSERT_NE(copied->done, nullptr);
  ASSERT_TRUE(copied->done->Synchronize().ok());
  for (size_t i = 0; i < host.size(); ++i) {
    const Tensor& want = host.value(i).as_tensor();
    const Tensor& got = copied->state_dict.value(i).as_tensor();
    EXPECT_EQ(got.storage(), arena);
    ASSERT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), static_cast<size_t>(want.nbytes())), 0)
        << host.key(i);
  }
  // Blocking copies complete before returning: no event.
  absl::StatusOr<CopyResult> blocking = CopyStateDict(src, *dst);
  ASSERT_TRUE(blocking.ok()) << blocking.status();
  EXPECT_EQ(blocking->done, nullptr);
}

// The completion event belongs to the tensors' device and is recorded there (on that
// device's legacy default stream when no stream is given), whatever device the caller is
// on; it has no timestamps. Copies a tensor on `device` to the host while the caller is on
// device 0.
void CheckCopyEventOnDevice(int device) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const Tensor want = test::HashBytes({4096, 33}, DType::kBFloat16, 5);
  const Map src{{"w", *want.To(Device::CUDA(device))}};
  absl::StatusOr<Map> dst = CreateCpuStateDict(src, CreateCpuOptions{true, false});
  ASSERT_TRUE(dst.ok()) << dst.status();
  absl::StatusOr<CopyResult> copied = CopyStateDict(src, *dst, CopyOptions{true, true, nullptr});
  ASSERT_TRUE(copied.ok()) << copied.status();
  ASSERT_NE(copied->done, nullptr);
  EXPECT_EQ(copied->done->device(), device);
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  ASSERT_TRUE(copied->done->Synchronize().ok());
  const Tensor& got = copied->state_dict.Find("w")->as_tensor();
  EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), static_cast<size_t>(want.nbytes())), 0);
  const absl::Status elapsed = CudaEvent::ElapsedMs(*copied->done, *copied->done).status();
  EXPECT_THAT(std::string(elapsed.message()), testing::HasSubstr("cudaErrorInvalidResourceHandle"));
}

TEST(StateDictOpsGpu, CopyStateDictEventIsOnTheTensorsDevice) {
  SDRT_SKIP_WITHOUT_GPU();
  CheckCopyEventOnDevice(0);
}

// The cross-device half: the tensors on device 1, the caller on device 0.
TEST(StateDictOpsGpu, CopyStateDictEventIsOnAnotherDevice) {
  SDRT_SKIP_WITHOUT_GPU();
  if (CudaDeviceCount() < 2) GTEST_SKIP() << "needs two CUDA devices";
  CheckCopyEventOnDevice(1);
}

TEST(StateDictOpsGpu, OffloadRanksOnlySpec9Item3) {
  SDRT_SKIP_WITHOUT_GPU();
  const Map cpu{{"tensor1", Arange({10})}, {"tensor2", Full({10}, 1.0f)}};
  const Map gpu{{"tensor1", OnGpu(Arange({10}))}, {"tensor2", OnGpu(Full({10}, 1.0f))}};
  for (int rank = 0; rank < 4; ++rank) {
    absl::StatusOr<Map> out = OffloadStateDictToCpu(gpu, OffloadOptions{rank, {0, 2}});
    ASSERT_TRUE(out.ok()) << out.status();
    if (rank == 0 || rank == 2) {
      EXPECT_TRUE(Value(*out) == Value(cpu)) << "rank " << rank;  // compares devices too
    } else {
      EXPECT_TRUE(out->empty()) << "rank " << rank;
    }
  }
}

TEST(StateDictOpsGpu, OffloadMovesDistributedTypesKeepingMetadata) {
  SDRT_SKIP_WITHOUT_GPU();
  const DTensor d = ShardedRows(OnGpu(Arange({2, 3})), 2, "cuda");
  const ShardedTensor st =
      testing_ops::SpecShardedTensor(0, 2, Device::CUDA(0), OnGpu(Arange({5, 10})));
  absl::StatusOr<Map> out = OffloadStateDictToCpu(Map{{"d", d}, {"st", st}});
  ASSERT_TRUE(out.ok()) << out.status();
  const DTensor& cd = out->Find("d")->as_dtensor();
  EXPECT_TRUE(cd.local().device().is_cpu());
  EXPECT_EQ(cd.mesh()->device_type(), "cuda");
  EXPECT_EQ(Floats(cd.local()), Floats(Arange({2, 3})));
  const ShardedTensor& cst = out->Find("st")->as_sharded();
  EXPECT_EQ(cst.shards_metadata()[1].placement.ToString(), "rank:1/cpu");
  EXPECT_EQ(Floats(cst.local_shards()[0].tensor), Floats(Arange({5, 10})));
}

// docs/SEMANTICS.md 9 item 5 with a CUDA source: `gpu` selects CUDA tensors (else their CPU twins,
// the expected values after a copy).
Map Spec9Item5Source(bool gpu, const Opaque& bytes_io) {
  const auto place = [gpu](const Tensor& t) { return gpu ? OnGpu(t) : t; };
  return Map{{"tensor1", place(Arange({10}))},
             {"tensor2", place(Full({10}, 1.0f))},
             {"sharded", testing_ops::SpecShardedTensor(0, 1, gpu ? Device::CUDA(0) : Device::CPU(),
                                                        place(Arange({5, 10})))},
             {"dtensor", ShardedRows(place(Arange({5, 10})), 1, "cuda")},
             {"bytes_io", bytes_io},
             {"bytes", Bytes{"\x01\x02"}},
             {"step", place(Scalar(7.0f))},
             {"lr", 1.5},
             {"nested", Map{{"list", List{1, 2, 3, 4}}}}};
}

TEST(StateDictOpsGpu, CreateCompareCopyAllFlagsSpec9Item5) {
  SDRT_SKIP_WITHOUT_GPU();
  const Opaque bytes_io = BytesIO("contents");
  const Map source = Spec9Item5Source(true, bytes_io);
  const Map expected = Spec9Item5Source(false, bytes_io);
  for (bool pin : {false, true}) {
    for (bool share : {false, true}) {
      std::weak_ptr<Storage> arena;
      {
        absl::StatusOr<Map> cpu = CreateCpuStateDict(source, CreateCpuOptions{pin, share});
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        const Tensor& t1 = cpu->Find("tensor1")->as_tensor();
        arena = t1.storage();
        EXPECT_EQ(t1.storage()->is_pinned(), pin);
        EXPECT_EQ(t1.storage()->kind() == StorageKind::kShared, share);
        EXPECT_TRUE(CheckStateDictSimilarity(source, *cpu));
        Map swapped = source;
        swapped.Set("tensor1", OnGpu(Arange({11})));
        EXPECT_FALSE(CheckStateDictSimilarity(swapped, *cpu));

        absl::StatusOr<CudaStream> stream = CudaStream::Create(0);
        ASSERT_TRUE(stream.ok()) << stream.status();
        absl::StatusOr<CopyResult> copied =
            CopyStateDict(source, *cpu, CopyOptions{true, true, stream->handle()});
        ASSERT_TRUE(copied.ok()) << copied.status();
        ASSERT_NE(copied->done, nullptr);
        ASSERT_TRUE(copied->done->Synchronize().ok());
        EXPECT_TRUE(Value(copied->state_dict) == Value(expected))
            << "pin=" << pin << " share=" << share << "\n"
            << DebugString(Value(copied->state_dict));
      }
      EXPECT_TRUE(arena.expired());  // share + pin: unregistered, unmapped
    }
  }
}

TEST(StateDictOpsGpu, CpuOffloadForDTensorSpec9Item7) {
  SDRT_SKIP_WITHOUT_GPU();
  const DTensor gpu = ShardedRows(OnGpu(Full({8, 8}, 1.0f)), 1, "cuda");
  const Map source{{"d", gpu}};
  absl::StatusOr<Map> cpu = CreateCpuStateDict(source, CreateCpuOptions{true, false});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  Tensor local = cpu->Find("d")->as_dtensor().local();
  EXPECT_TRUE(local.device().is_cpu());
  EXPECT_TRUE(gpu.local().device().is_cuda());  // the source is untouched
  ASSERT_TRUE(local.CopyFrom(Full({8, 8}, 0.0f)).ok());
  for (float value : {1.0f, 2.0f}) {
    if (value == 2.0f) {
      Tensor on_gpu = gpu.local();
      ASSERT_TRUE(on_gpu.CopyFrom(Full({8, 8}, 2.0f)).ok());
      EXPECT_NE(Floats(local), Floats(*gpu.local().To(Device::CPU())));  // not copied yet
    }
    absl::StatusOr<CopyResult> copied =
        CopyStateDict(source, *cpu, CopyOptions{true, true, nullptr});
    ASSERT_TRUE(copied.ok()) << copied.status();
    ASSERT_NE(copied->done, nullptr);  // recorded on the legacy default stream
    ASSERT_TRUE(copied->done->Synchronize().ok());
    EXPECT_EQ(Floats(local), std::vector<float>(64, value));
  }
}

TEST(StateDictOpsGpu, ZeroByteAndZeroDimCudaTensorsCase021) {
  SDRT_SKIP_WITHOUT_GPU();
  const DTensor d0 =
      *DTensor::Make(OnGpu(Scalar(2.5f)),
                     std::make_shared<const DeviceMesh>(*DeviceMesh::Create({1}, {}, {}, "cuda")),
                     {Placement::Replicate()}, {});
  const Map sd{{"a", OnGpu(Arange({0}))},
               {"b", OnGpu(Arange({4, 0}))},
               {"c", OnGpu(Scalar(3.5f))},
               {"d0", d0},
               {"w", OnGpu(Arange({4}))}};
  for (bool pin : {false, true}) {
    for (bool share : {false, true}) {
      absl::StatusOr<Map> out = CreateCpuStateDict(sd, CreateCpuOptions{pin, share});
      ASSERT_TRUE(out.ok()) << out.status();
      for (const char* key : {"a", "b", "c"}) {
        const Tensor& t = out->Find(key)->as_tensor();
        EXPECT_TRUE(t.device().is_cpu()) << key;
        EXPECT_EQ(t.shape(), sd.Find(key)->as_tensor().shape()) << key;
        EXPECT_FALSE(t.storage()->is_pinned()) << key;
        EXPECT_EQ(t.storage()->kind(), StorageKind::kCpu) << key;
      }
      // PyTorch leaves a 0-dim DTensor on the GPU; sdrt gives it a CPU local.
      EXPECT_TRUE(out->Find("d0")->as_dtensor().local().device().is_cpu());
      EXPECT_EQ(out->Find("w")->as_tensor().storage()->is_pinned(), pin);
    }
  }
}

}  // namespace
}  // namespace sdrt
