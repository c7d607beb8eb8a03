// safetensors with a GPU (ctest label gpu; each test skips without a device): the mapping
// registered for fast host-to-device copies (chunked, read-only), and CUDA tensors
// written to a file. The cpu twin of the pinning test (no device: pageable fallback) is in
// safetensors_test.cc.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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

// A file of three tensors, a0 sized (from the header's size, by writing the file until it
// stays the same) so that it ends on a page; b1's 2.5 MiB then ends on one too. Tensors
// packed back to back share pages, so a registration boundary can fall only there.
NamedTensors WritePageEndedTensors(const std::string& path) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  int64_t first = 3 * kMiB / 2;
  NamedTensors tensors;
  for (int round = 0; round < 8; ++round) {
    tensors = {{"a0", HashBytes({first}, DType::kUInt8, 7)},
               {"b1", HashBytes({5 * kMiB / 2}, DType::kUInt8, 8)},
               {"c2", HashBytes({3 * kMiB / 4}, DType::kUInt8, 9)}};
    EXPECT_TRUE(WriteSafetensors(path, tensors).ok());
    const int64_t data = SafetensorsFile::Open(path)->data_offset();
    const int64_t wanted = (data + 3 * kMiB / 2 + page - 1) / page * page - data;
    if (wanted == first) break;
    first = wanted;
  }
  return tensors;
}

// The registration of `file`'s mapping as Open planned it with `chunk_bytes`: every chunk
// page-locked, no boundary inside a tensor; then every tensor pinned and bit-exact on the
// device. Returns the chunks (to check their release).
std::vector<internal::RegistrationChunk> ExpectPinnedAndCopied(const SafetensorsFile& file,
                                                               const NamedTensors& tensors,
                                                               int64_t chunk_bytes,
                                                               std::atomic<const char*>* stage) {
  EXPECT_TRUE(file.pin_status().ok()) << file.pin_status();
  EXPECT_TRUE(file.storage()->is_pinned());
  const char* base = static_cast<const char*>(file.storage()->data());
  const std::vector<std::pair<int64_t, int64_t>> ranges = file.TensorByteRanges();
  const std::vector<internal::RegistrationChunk> chunks = *internal::PlanRegistrationChunks(
      reinterpret_cast<uintptr_t>(base), file.file_size(), chunk_bytes, sysconf(_SC_PAGESIZE),
      ranges);
  stage->store("checking that every chunk is page-locked");
  for (const internal::RegistrationChunk& c : chunks) {
    EXPECT_TRUE(IsPageLocked(base + c.offset)) << "chunk at " << c.offset;
    EXPECT_TRUE(IsPageLocked(base + c.offset + c.nbytes - 1)) << "chunk at " << c.offset;
    for (const auto& [offset, nbytes] : ranges) {
      EXPECT_FALSE(offset < c.offset && c.offset < offset + nbytes) << "chunk at " << c.offset;
    }
  }
  stage->store("copying the tensors to the device and back");
  for (const auto& [name, want] : tensors) {
    Tensor t = *file.Get(name);
    EXPECT_TRUE(t.storage()->is_pinned()) << name;
    absl::StatusOr<Tensor> on_device = t.To(Device::CUDA(0));
    EXPECT_TRUE(on_device.ok()) << name << ": " << on_device.status();
    if (on_device.ok()) {
      EXPECT_EQ(Bytes(*on_device->To(Device::CPU())), Bytes(want)) << name;
    }
  }
  stage->store("releasing the registration");
  return chunks;
}

// Ends the process with a message naming the stage reached when `seconds` pass before
// Stop(): a CUDA call that hangs (as one of these did on an H200) fails its test in
// seconds, saying where, instead of running to ctest's limit.
class StageWatchdog {
 public:
  explicit StageWatchdog(int seconds) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!done_cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "hung for %d s while %s\n", seconds, stage.load());
        std::fflush(stderr);
        std::_Exit(1);
      }
    });
  }
  ~StageWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_all();
    thread_.join();
  }
  std::atomic<const char*> stage{"starting"};

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

// WritePageEndedTensors' file opened with its mapping pinned in chunks of `chunk_bytes`:
// `want_chunks` registrations, every tensor pinned and bit-exact on the device
// (ExpectPinnedAndCopied), nothing registered once the file and its tensors are gone; a
// watchdog ends the test within 20 s naming the stage a CUDA call hung in.
void ExpectPinMapping(const std::string& file_name, int64_t chunk_bytes, size_t want_chunks) {
  StageWatchdog watchdog(20);
  const std::string path = TestDir() + "/" + file_name;
  const NamedTensors tensors = WritePageEndedTensors(path);
  SafetensorsFile::Options options;
  options.pin_mapping = true;
  options.pin_device = 0;
  options.pin_chunk_bytes = chunk_bytes;
  options.pageable_fallback = false;
  std::vector<internal::RegistrationChunk> chunks;
  const char* base = nullptr;
  {
    watchdog.stage.store("registering the mapping");
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path, options);
    if (file.status().code() == absl::StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << "this device cannot register read-only pages: " << file.status();
    }
    ASSERT_TRUE(file.ok()) << file.status();
    base = static_cast<const char*>(file->storage()->data());
    chunks = ExpectPinnedAndCopied(*file, tensors, chunk_bytes, &watchdog.stage);
    EXPECT_EQ(chunks.size(), want_chunks);
  }
  watchdog.stage.store("checking the release");
  for (const internal::RegistrationChunk& c : chunks) {
    EXPECT_FALSE(IsPageLocked(base + c.offset)) << "chunk at " << c.offset << " leaked";
  }
}

// The file registered whole (the default chunk size).
TEST(SafetensorsGpu, PinMappingWholeFile) {
  SDRT_SKIP_WITHOUT_GPU();
  ExpectPinMapping("pin_whole.safetensors", kDefaultRegistrationChunkBytes, 1);
}

// The same file in 1 MiB chunks: three registrations (the header and a0, b1, c2). On the
// H200 (2026-12-04) a file mapping in several registrations hung (where, this test's
// watchdog will say); anonymous memory in several does not (HostRegistrationGpu), and one
// registration of the file works (PinMappingWholeFile), which is why files under 64 GiB are
// registered whole by default.
TEST(SafetensorsGpu, PinMappingInSeveralChunks) {
  SDRT_SKIP_WITHOUT_GPU();
  ExpectPinMapping("pin_chunks.safetensors", kMiB, 3);
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
