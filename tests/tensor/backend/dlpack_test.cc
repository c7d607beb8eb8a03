#include "sdrt/tensor/backend/dlpack.h"

#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A DLPack float32 CPU tensor over `data` with `ndim` dims of `shape`: compact row-major
// (no strides), no byte offset, no deleter.
DLManagedTensor HostFloat32(void* data, int32_t ndim, int64_t* shape) {
  DLManagedTensor managed{};
  managed.dl_tensor.data = data;
  managed.dl_tensor.device = DLDevice{kDLCPU, 0};
  managed.dl_tensor.ndim = ndim;
  managed.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
  managed.dl_tensor.shape = shape;
  return managed;
}

TEST(DLPack, ExportKeepsStorageAliveUntilDeleter) {
  DLManagedTensor* managed = nullptr;
  std::weak_ptr<Storage> weak;
  {
    Tensor t = *Tensor::Empty({3, 4}, DType::kBFloat16);
    std::iota(t.data<uint16_t>(), t.data<uint16_t>() + 12, 0);
    Tensor cols = *t.Slice(1, 1, 4, 2);
    weak = t.storage();
    managed = *ToDLPack(cols);
  }
  ASSERT_FALSE(weak.expired());  // the export holds the bytes
  const DLTensor& dl = managed->dl_tensor;
  EXPECT_EQ(dl.device.device_type, kDLCPU);
  EXPECT_EQ(dl.ndim, 2);
  EXPECT_EQ(dl.dtype.code, 4);
  EXPECT_EQ(dl.dtype.bits, 16);
  EXPECT_EQ(dl.dtype.lanes, 1);
  EXPECT_EQ(dl.shape[0], 3);
  EXPECT_EQ(dl.shape[1], 2);
  EXPECT_EQ(dl.strides[0], 4);
  EXPECT_EQ(dl.strides[1], 2);
  EXPECT_EQ(static_cast<uint16_t*>(dl.data)[0], 1);
  managed->deleter(managed);
  EXPECT_TRUE(weak.expired());
}

TEST(DLPack, ImportIsZeroCopyAndCallsDeleterWithLastTensor) {
  static float data[6] = {0, 1, 2, 3, 4, 5};
  static int64_t shape[2] = {2, 2};  // 2x2 from data[1]: exactly 4 floats borrowed
  static int deleted = 0;
  deleted = 0;
  DLManagedTensor managed = HostFloat32(data, 2, shape);  // compact row-major
  managed.dl_tensor.byte_offset = 4;                      // starts at data[1]
  managed.deleter = [](DLManagedTensor*) { ++deleted; };
  {
    Tensor view;
    {
      Tensor t = *FromDLPack(&managed);
      EXPECT_EQ(t.data_ptr(), data + 1);
      EXPECT_THAT(t.shape(), ElementsAre(2, 2));
      EXPECT_THAT(t.strides(), ElementsAre(2, 1));
      EXPECT_EQ(t.storage()->nbytes(), 16);
      view = *t.Select(0, 1);
    }
    EXPECT_EQ(deleted, 0);  // the view still holds it
    EXPECT_EQ(view.data<float>()[1], 4.0f);
  }
  EXPECT_EQ(deleted, 1);
}

TEST(DLPack, RoundTripThroughBothDirections) {
  Tensor t = *Tensor::Empty({5}, DType::kInt64);
  std::iota(t.data<int64_t>(), t.data<int64_t>() + 5, 10);
  Tensor back = *FromDLPack(*ToDLPack(t));
  EXPECT_EQ(back.data_ptr(), t.data_ptr());
  EXPECT_EQ(back.dtype(), DType::kInt64);
  EXPECT_EQ(back.data<int64_t>()[4], 14);
}

// kDLCUDAHost says the producer page-locked the bytes: the import is pinned (PinStorage
// leaves it alone) without sdrt owning a registration; kDLCPU bytes are not.
TEST(DLPack, PinnedHostImportIsPinnedNotOwned) {
  int64_t shape[1] = {4};
  float data[4] = {};
  DLManagedTensor managed = HostFloat32(data, 1, shape);
  EXPECT_FALSE(FromDLPack(&managed)->storage()->is_pinned());
  managed.dl_tensor.device = DLDevice{kDLCUDAHost, 0};
  Tensor t = *FromDLPack(&managed);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_TRUE(t.storage()->is_pinned());
  EXPECT_EQ(t.storage()->kind(), StorageKind::kBorrowed);
  // Exported again, it is reported as pinned host memory.
  DLManagedTensor* again = *ToDLPack(t);
  EXPECT_EQ(again->dl_tensor.device.device_type, kDLCUDAHost);
  again->deleter(again);
}

TEST(DLPack, RejectsWhatItCannotRepresent) {
  EXPECT_EQ(ToDLPack(*Tensor::Meta({2}, DType::kFloat32)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::Status null = FromDLPack(nullptr).status();
  EXPECT_EQ(null.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(null.message(), HasSubstr("FromDLPack: null DLManagedTensor"));
  int64_t shape[1] = {2};
  float data[2] = {};
  DLManagedTensor managed = HostFloat32(data, 1, shape);
  managed.dl_tensor.device = DLDevice{kDLVulkan, 0};
  absl::Status vulkan = FromDLPack(&managed).status();
  EXPECT_EQ(vulkan.code(), absl::StatusCode::kInvalidArgument) << vulkan;
  EXPECT_THAT(vulkan.message(), HasSubstr("device type 7"));
  managed.dl_tensor.device = DLDevice{kDLCPU, 0};
  managed.dl_tensor.dtype = DLDataType{kDLComplex, 128, 1};  // complex128: no sdrt dtype
  EXPECT_THAT(FromDLPack(&managed).status().message(), HasSubstr("code=5"));
}

TEST(DLPack, OverflowingStridesAreRejectedWithoutCallingTheDeleter) {
  static int deleted = 0;
  float data[2] = {};
  int64_t shape[1] = {2};
  int64_t strides[1] = {int64_t{1} << 62};
  DLManagedTensor managed = HostFloat32(data, 1, shape);
  managed.dl_tensor.strides = strides;
  managed.deleter = [](DLManagedTensor*) { ++deleted; };
  absl::StatusOr<Tensor> t = FromDLPack(&managed);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("overflow"));
  EXPECT_EQ(deleted, 0);  // ownership stayed with the caller
}

}  // namespace
}  // namespace sdrt
