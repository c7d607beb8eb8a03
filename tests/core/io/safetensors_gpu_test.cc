// safetensors with a GPU (ctest label gpu; each test skips without a device): the mapping
// registered for fast host-to-device copies (chunked, read-only), and CUDA tensors
// written to a file. The cpu twin of the pinning test (no device: pageable fallback) is in
// safetensors_test.cc.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/cuda/registration_chunks.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tests/support/cuda_memory.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::sdrt::test::HashBytes;
using ::sdrt::test::IsPageLocked;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

constexpr int64_t kMiB = int64_t{1} << 20;

// A fresh, empty folder for the running test under SDRT_TEST_TMP (set by CTest).
std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(test::TestTmpRoot()) / "safetensors_gpu_test_files" /
                 (std::string(info->test_suite_name()) + "." + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string Bytes(const Tensor& t) {
  Tensor c = *t.Contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.nbytes()));
}

// A 5.5 MiB tensor registered in 1 MiB chunks: every chunk of the mapping is page-locked,
// the tensors handed out are pinned and copy to the device bit-exactly, and nothing stays
// registered once the file and its tensors are gone.
TEST(SafetensorsGpu, PinMappingRegistersEveryChunk) {
  SDRT_SKIP_WITHOUT_GPU();
  const std::string path = TestDir() + "/pin.safetensors";
  const Tensor want = HashBytes({11 * kMiB / 2}, DType::kUInt8, 7);
  ASSERT_TRUE(WriteSafetensors(path, NamedTensors{{"w", want}}).ok());
  SafetensorsFile::Options options;
  options.pin_mapping = true;
  options.pin_device = 0;
  options.pin_chunk_bytes = kMiB;
  options.pageable_fallback = false;
  const char* base = nullptr;
  std::vector<internal::RegistrationChunk> chunks;
  {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path, options);
    if (file.status().code() == absl::StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << "this device cannot register read-only pages: " << file.status();
    }
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_TRUE(file->pin_status().ok());
    EXPECT_TRUE(file->storage()->is_pinned());
    base = static_cast<const char*>(file->storage()->data());
    const int64_t size = file->file_size();
    chunks = *internal::PlanRegistrationChunks(reinterpret_cast<uintptr_t>(base), size, kMiB,
                                               sysconf(_SC_PAGESIZE));
    // The mapping starts on a page, so every chunk but the last is exactly 1 MiB.
    EXPECT_EQ(static_cast<int64_t>(chunks.size()), (size + kMiB - 1) / kMiB);
    for (const internal::RegistrationChunk& c : chunks) {
      EXPECT_TRUE(IsPageLocked(base + c.offset)) << "chunk at " << c.offset;
      EXPECT_TRUE(IsPageLocked(base + c.offset + c.nbytes - 1)) << "chunk at " << c.offset;
    }
    Tensor w = *file->Get("w");
    EXPECT_TRUE(w.storage()->is_pinned());
    Tensor on_device = *w.To(Device::CUDA(0));
    EXPECT_EQ(Bytes(*on_device.To(Device::CPU())), Bytes(want));
  }  // the file and its tensors were the last holders of the mapping
  for (const internal::RegistrationChunk& c : chunks) {
    EXPECT_FALSE(IsPageLocked(base + c.offset)) << "chunk at " << c.offset << " leaked";
  }
}

// A registration that fails (here: on a device ordinal that does not exist) falls back to
// the pageable mapping, says why in pin_status(), and the tensors still reach the device;
// without the fallback Open fails with the same error.
TEST(SafetensorsGpu, PinFailureFallsBackToPageable) {
  SDRT_SKIP_WITHOUT_GPU();
  const std::string path = TestDir() + "/fallback.safetensors";
  const Tensor want = HashBytes({3 * kMiB}, DType::kUInt8, 8);
  ASSERT_TRUE(WriteSafetensors(path, NamedTensors{{"w", want}}).ok());
  SafetensorsFile::Options options;
  options.pin_mapping = true;
  options.pin_device = CudaDeviceCount();
  options.pin_chunk_bytes = kMiB;
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path, options);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->pin_status().code(), absl::StatusCode::kInvalidArgument) << file->pin_status();
  EXPECT_THAT(std::string(file->pin_status().message()),
              ::testing::StartsWith(path + ": pinning the mapping: "));
  EXPECT_THAT(file->pin_status().message(), ::testing::HasSubstr("cudaSetDevice"));
  EXPECT_FALSE(file->storage()->is_pinned());
  EXPECT_FALSE(IsPageLocked(file->storage()->data()));
  EXPECT_EQ(Bytes(*(*file->Get("w")->To(Device::CUDA(0))).To(Device::CPU())), Bytes(want));

  options.pageable_fallback = false;
  const absl::Status refused = SafetensorsFile::Open(path, options).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(), file->pin_status().message());
}

TEST(SafetensorsGpu, CudaTensorsAreCopiedToHost) {
  SDRT_SKIP_WITHOUT_GPU();
  const std::string path = TestDir() + "/cuda.safetensors";
  Tensor host = HashBytes({5, 7}, DType::kBFloat16, 3);
  Tensor device = *host.To(Device::CUDA(0));
  ASSERT_TRUE(WriteSafetensors(path, NamedTensors{{"w", *device.Slice(1, 1, 7, 3)}}).ok());
  EXPECT_EQ(Bytes(*SafetensorsFile::Open(path)->Get("w")), Bytes(*host.Slice(1, 1, 7, 3)));
}

}  // namespace
}  // namespace sdrt
