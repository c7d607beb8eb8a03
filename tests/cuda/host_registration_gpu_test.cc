// HostRegistration and PinStorage on a real device (ctest label gpu; each test skips
// without one): chunked registration, its rollback, its release, read-only ranges, and
// memory that is already page-locked, wholly or in part.
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/cuda/registration_chunks.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/backend/dlpack.h"
#include "sdrt/tests/support/cuda_memory.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::sdrt::test::HostGetFlagsSucceeds;
using ::sdrt::test::IsPageLocked;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

// An anonymous private mapping (page aligned), unmapped with the object.
class Mapping {
 public:
  explicit Mapping(int64_t nbytes) : nbytes_(nbytes) {
    void* p = mmap(nullptr, static_cast<size_t>(nbytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    data_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
    if (data_ != nullptr) std::memset(data_, 0x5A, static_cast<size_t>(nbytes));
  }
  ~Mapping() {
    if (data_ != nullptr) munmap(data_, static_cast<size_t>(nbytes_));
  }
  char* data() const { return data_; }

 private:
  int64_t nbytes_;
  char* data_ = nullptr;
};

// A portable registration of `nbytes` at `data` for device 0 in chunks of 1 MiB, keeping
// each of `unbroken` (offset, bytes) in one chunk.
absl::StatusOr<HostRegistration> RegisterInMiBChunks(
    char* data, int64_t nbytes, std::vector<std::pair<int64_t, int64_t>> unbroken = {}) {
  HostRegistrationOptions options;
  options.device = 0;
  options.chunk_bytes = kMiB;
  options.unbroken_ranges = std::move(unbroken);
  return HostRegistration::Register(data, nbytes, kHostRegisterPortable, options);
}

std::vector<internal::RegistrationChunk> Chunks(const void* ptr, int64_t nbytes, int64_t chunk) {
  return *internal::PlanRegistrationChunks(reinterpret_cast<uintptr_t>(ptr), nbytes, chunk,
                                           sysconf(_SC_PAGESIZE));
}

// Byte i of a range: (7 i) mod 251, so a byte copied to the wrong place shows.
void FillPattern(char* data, int64_t nbytes) {
  for (int64_t i = 0; i < nbytes; ++i) data[i] = static_cast<char>((7 * i) % 251);
}

// Copies `nbytes` from host `src` to a new device buffer with cudaMemcpyAsync on a stream
// of its own and waits at most 10 s for it, then reads the bytes back and compares them:
// "ok", "<cuda error> from cudaMemcpyAsync", "differs" or "did not finish in 10 s". A copy
// still on the stream at 10 s ends the process (it would hold every later call), after
// printing what was copied; ctest then reports this test alone as failed.
std::string CopyToDeviceWithin10s(const char* src, int64_t nbytes, const char* what) {
  DeviceBuffer on_device = *AllocateDeviceBuffer(nbytes, 0);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    return "cudaStreamCreateWithFlags failed";
  }
  const cudaError_t started = cudaMemcpyAsync(on_device->data(), src, static_cast<size_t>(nbytes),
                                              cudaMemcpyHostToDevice, stream);
  std::string result;
  if (started != cudaSuccess) {
    result = absl::StrCat(cudaGetErrorName(started), " from cudaMemcpyAsync");
  } else {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    cudaError_t done = cudaErrorNotReady;
    while ((done = cudaStreamQuery(stream)) == cudaErrorNotReady &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (done == cudaErrorNotReady) {
      std::fprintf(stderr, "%s: the copy of %lld bytes did not finish in 10 s\n", what,
                   static_cast<long long>(nbytes));
      std::fflush(stderr);
      std::_Exit(1);
    }
    if (done != cudaSuccess) {
      result = absl::StrCat(cudaGetErrorName(done), " from the stream");
    } else {
      std::vector<char> back(static_cast<size_t>(nbytes));
      result = cudaMemcpy(back.data(), on_device->data(), static_cast<size_t>(nbytes),
                          cudaMemcpyDeviceToHost) != cudaSuccess
                   ? "the copy back failed"
               : std::memcmp(back.data(), src, static_cast<size_t>(nbytes)) == 0 ? "ok"
                                                                                 : "differs";
    }
  }
  (void)cudaStreamDestroy(stream);
  std::fprintf(stderr, "%s: %s\n", what, result.c_str());
  return result;
}

// Whether the device registers read-only pages (with the flag, or through the host's page
// tables); HostRegistration refuses read-only ranges otherwise.
bool RegistersReadOnlyPages() {
  int read_only = 0;
  int host_page_tables = 0;
  (void)cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, 0);
  (void)cudaDeviceGetAttribute(&host_page_tables,
                               cudaDevAttrPageableMemoryAccessUsesHostPageTables, 0);
  return read_only != 0 || host_page_tables != 0;
}

// case-056 (a registration larger than one chunk). 5.5 MiB in 1 MiB chunks: six registrations,
// every byte page-locked (first and last byte of each chunk checked), then every one undone by
// Release.
TEST(HostRegistrationGpu, ChunkedRegistrationCoversTheRangeAndIsReleased) {
  SDRT_SKIP_WITHOUT_GPU();
  const int64_t nbytes = 11 * kMiB / 2;
  Mapping mapping(nbytes);
  ASSERT_NE(mapping.data(), nullptr);
  absl::StatusOr<HostRegistration> reg = RegisterInMiBChunks(mapping.data(), nbytes);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->num_chunks(), 6);
  const std::vector<internal::RegistrationChunk> chunks = Chunks(mapping.data(), nbytes, kMiB);
  ASSERT_EQ(chunks.size(), 6u);
  for (const internal::RegistrationChunk& c : chunks) {
    EXPECT_TRUE(IsPageLocked(mapping.data() + c.offset)) << "chunk at " << c.offset;
    EXPECT_TRUE(IsPageLocked(mapping.data() + c.offset + c.nbytes - 1)) << "chunk at " << c.offset;
  }
  ASSERT_TRUE(reg->Release().ok());
  EXPECT_EQ(reg->num_chunks(), 0);
  for (const internal::RegistrationChunk& c : chunks) {
    EXPECT_FALSE(IsPageLocked(mapping.data() + c.offset)) << "chunk at " << c.offset;
    EXPECT_FALSE(HostGetFlagsSucceeds(mapping.data() + c.offset)) << "chunk at " << c.offset;
  }
}

// case-056, a failing chunk. Chunk 3 of 6 is already registered by someone else: its
// cudaHostRegister fails, the three chunks before it are unregistered again, the error names
// the chunk, the size and CUDA's call, and the foreign registration stays.
TEST(HostRegistrationGpu, AFailingChunkRollsBackTheChunksBeforeIt) {
  SDRT_SKIP_WITHOUT_GPU();
  const int64_t nbytes = 11 * kMiB / 2;
  Mapping mapping(nbytes);
  ASSERT_NE(mapping.data(), nullptr);
  char* third = mapping.data() + 3 * kMiB;
  ASSERT_EQ(cudaHostRegister(third, kMiB, cudaHostRegisterPortable), cudaSuccess);
  absl::StatusOr<HostRegistration> reg = RegisterInMiBChunks(mapping.data(), nbytes);
  EXPECT_FALSE(reg.ok());
  EXPECT_THAT(reg.status().message(), HasSubstr("chunk 3 of 6"));
  EXPECT_THAT(reg.status().message(), HasSubstr(absl::StrCat(" of ", nbytes)));
  EXPECT_THAT(reg.status().message(), HasSubstr("cudaHostRegister"));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failure left no error behind
  for (int64_t k = 0; k < 3; ++k) {
    EXPECT_FALSE(IsPageLocked(mapping.data() + k * kMiB)) << "chunk " << k << " was not undone";
  }
  EXPECT_FALSE(IsPageLocked(mapping.data() + 4 * kMiB));
  EXPECT_TRUE(IsPageLocked(third));
  EXPECT_EQ(cudaHostUnregister(third), cudaSuccess);
}

// case-020, with a check that sees a leak: after the storage is gone CUDA no longer knows
// the address (cudaHostGetFlags and cudaPointerGetAttributes both say so).
TEST(HostRegistrationGpu, Case020RegistrationIsReleasedWithTheStorage) {
  SDRT_SKIP_WITHOUT_GPU();
  for (int i = 0; i < 10; ++i) {
    std::shared_ptr<Storage> shared = *Storage::AllocateShared(4 * kMiB + 4096);
    HostRegistrationOptions options;
    options.chunk_bytes = kMiB;
    ASSERT_TRUE(PinStorage(*shared, kHostRegisterPortable, options).ok());
    EXPECT_TRUE(shared->is_pinned());
    char* ptr = static_cast<char*>(shared->data());
    EXPECT_TRUE(IsPageLocked(ptr));
    EXPECT_TRUE(IsPageLocked(ptr + 4 * kMiB + 4095));
    shared.reset();  // unregisters every chunk, then unmaps
    EXPECT_FALSE(IsPageLocked(ptr));
    EXPECT_FALSE(HostGetFlagsSucceeds(ptr));
    EXPECT_FALSE(IsPageLocked(ptr + 4 * kMiB));
  }
}

// Memory someone else page-locked is pinned but not ours: PinStorage marks it without a
// second cudaHostRegister (which would fail with cudaErrorHostMemoryAlreadyRegistered) and
// leaves its registration alone at release.
TEST(HostRegistrationGpu, AlreadyRegisteredMemoryIsPinnedNotOwned) {
  SDRT_SKIP_WITHOUT_GPU();
  const int64_t nbytes = 2 * kMiB;
  Mapping mapping(nbytes);
  ASSERT_NE(mapping.data(), nullptr);
  ASSERT_EQ(cudaHostRegister(mapping.data(), nbytes, cudaHostRegisterPortable), cudaSuccess);
  {
    std::shared_ptr<Storage> borrowed = Storage::Borrow(mapping.data(), nbytes, Device::CPU());
    ASSERT_FALSE(borrowed->is_pinned());
    const absl::Status pinned = PinStorage(*borrowed, kHostRegisterPortable);
    ASSERT_TRUE(pinned.ok()) << pinned;
    EXPECT_TRUE(borrowed->is_pinned());
  }
  EXPECT_TRUE(IsPageLocked(mapping.data()));  // still the owner's registration
  EXPECT_EQ(cudaHostUnregister(mapping.data()), cudaSuccess);
}

// A storage partly over someone else's registration (first byte locked, last not): its
// cudaHostRegister fails with cudaErrorHostMemoryAlreadyRegistered, PinStorage marks it
// pinned, not owned, and its release undoes nothing, so the owner's unregistration succeeds.
TEST(HostRegistrationGpu, PartlyRegisteredMemoryIsPinnedNotOwned) {
  SDRT_SKIP_WITHOUT_GPU();
  Mapping mapping(3 * kMiB);
  ASSERT_NE(mapping.data(), nullptr);
  ASSERT_EQ(cudaHostRegister(mapping.data(), 2 * kMiB, cudaHostRegisterPortable), cudaSuccess);
  char* const start = mapping.data() + kMiB;
  {
    std::shared_ptr<Storage> borrowed = Storage::Borrow(start, 2 * kMiB, Device::CPU());
    const absl::Status pinned = PinStorage(*borrowed, kHostRegisterPortable);
    ASSERT_TRUE(pinned.ok()) << pinned;
    EXPECT_TRUE(borrowed->is_pinned());
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the refused registration left no error
    EXPECT_FALSE(IsPageLocked(start + kMiB));    // the rest was not registered
  }
  EXPECT_TRUE(IsPageLocked(mapping.data()));  // still the owner's registration
  EXPECT_EQ(cudaHostUnregister(mapping.data()), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_FALSE(IsPageLocked(start));
}

// The same when a later chunk overlaps: 1 MiB chunks over 3 MiB whose middle MiB is someone
// else's: chunk 0 registers, chunk 1 fails, chunk 0 is unregistered again.
TEST(HostRegistrationGpu, ALaterChunkOverlappingARegistrationIsPinnedNotOwned) {
  SDRT_SKIP_WITHOUT_GPU();
  Mapping mapping(3 * kMiB);
  ASSERT_NE(mapping.data(), nullptr);
  char* const middle = mapping.data() + kMiB;
  ASSERT_EQ(cudaHostRegister(middle, kMiB, cudaHostRegisterPortable), cudaSuccess);
  {
    std::shared_ptr<Storage> borrowed = Storage::Borrow(mapping.data(), 3 * kMiB, Device::CPU());
    HostRegistrationOptions options;
    options.device = 0;
    options.chunk_bytes = kMiB;
    const absl::Status pinned = PinStorage(*borrowed, kHostRegisterPortable, options);
    ASSERT_TRUE(pinned.ok()) << pinned;
    EXPECT_TRUE(borrowed->is_pinned());
    EXPECT_FALSE(IsPageLocked(mapping.data()));  // chunk 0 was rolled back
    EXPECT_FALSE(IsPageLocked(mapping.data() + 2 * kMiB));
  }
  EXPECT_TRUE(IsPageLocked(middle));  // the release undid nothing
  EXPECT_EQ(cudaHostUnregister(middle), cudaSuccess);
}

// A DLPack kDLCUDAHost buffer (a producer's cudaHostAlloc memory) is imported pinned, and
// PinStorage does not register it again.
TEST(HostRegistrationGpu, DLPackPinnedHostBufferIsNotRegisteredAgain) {
  SDRT_SKIP_WITHOUT_GPU();
  void* host = nullptr;
  ASSERT_EQ(cudaHostAlloc(&host, 4096, cudaHostAllocPortable), cudaSuccess);
  static int64_t shape[1] = {1024};
  DLManagedTensor managed{};
  managed.dl_tensor.data = host;
  managed.dl_tensor.device = DLDevice{kDLCUDAHost, 0};
  managed.dl_tensor.ndim = 1;
  managed.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
  managed.dl_tensor.shape = shape;
  {
    absl::StatusOr<Tensor> t = FromDLPack(&managed);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(t->storage()->is_pinned());
    EXPECT_TRUE(PinStorage(*t->storage(), kHostRegisterPortable).ok());
    // Pinned memory moves to the device with a plain asynchronous copy.
    std::memset(host, 0x3C, 4096);
    Tensor back = *(*t->To(Device::CUDA(0))).To(Device::CPU());
    EXPECT_EQ(std::memcmp(back.data_ptr(), host, 4096), 0);
  }
  EXPECT_TRUE(HostGetFlagsSucceeds(host));  // still the producer's, still allocated
  EXPECT_EQ(cudaFreeHost(host), cudaSuccess);
}

// The mapping of a safetensors file is PROT_READ: read-only registration where the device
// supports it; on a device without it the error says so, and no chunk stays registered.
TEST(HostRegistrationGpu, ReadOnlyPagesNeedTheReadOnlyFlag) {
  SDRT_SKIP_WITHOUT_GPU();
  const int64_t nbytes = 3 * kMiB;
  Mapping mapping(nbytes);
  ASSERT_NE(mapping.data(), nullptr);
  ASSERT_EQ(mprotect(mapping.data(), static_cast<size_t>(nbytes), PROT_READ), 0);
  int read_only = 0;
  int host_page_tables = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, 0),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&host_page_tables,
                                   cudaDevAttrPageableMemoryAccessUsesHostPageTables, 0),
            cudaSuccess);
  HostRegistrationOptions options;
  options.device = 0;
  options.chunk_bytes = kMiB;
  absl::StatusOr<HostRegistration> reg = HostRegistration::Register(
      mapping.data(), nbytes, kHostRegisterReadOnly | kHostRegisterPortable, options);
  if (read_only == 0 && host_page_tables == 0) {
    EXPECT_EQ(reg.status().code(), absl::StatusCode::kFailedPrecondition) << reg.status();
    EXPECT_THAT(reg.status().message(), HasSubstr("cudaDevAttrHostRegisterReadOnlySupported"));
    EXPECT_FALSE(IsPageLocked(mapping.data()));
    return;
  }
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->num_chunks(), 3);
  EXPECT_TRUE(IsPageLocked(mapping.data() + nbytes - 1));
  // The device reads the read-only pages, one registration per copy (CUDA refuses a copy
  // across two: ACopyAcrossTwoRegistrationsIsRefused).
  DeviceBuffer on_device = *AllocateDeviceBuffer(nbytes, 0);
  for (int64_t offset = 0; offset < nbytes; offset += kMiB) {
    ASSERT_EQ(cudaMemcpy(static_cast<char*>(on_device->data()) + offset, mapping.data() + offset,
                         kMiB, cudaMemcpyHostToDevice),
              cudaSuccess)
        << "chunk at " << offset;
  }
  std::vector<char> back(nbytes);
  ASSERT_EQ(cudaMemcpy(back.data(), on_device->data(), nbytes, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::memcmp(back.data(), mapping.data(), nbytes), 0);
  ASSERT_TRUE(reg->Release().ok());
  EXPECT_FALSE(IsPageLocked(mapping.data()));
}

// What a copy from registered memory may span (the H200's answer, 2026-12-04: a copy inside
// one registration works, read-only or not; a copy across two is cudaErrorInvalidValue,
// read-only or not). This is why HostRegistrationOptions::unbroken_ranges keeps every
// tensor of a mapping or an arena inside one chunk.
// A 3 MiB read-only range registered in chunks of `chunk_bytes` (`chunks` of them): the copy
// of [offset, offset + nbytes) reaches the device bit-exactly.
void ExpectReadOnlyCopy(int64_t chunk_bytes, int64_t chunks, int64_t offset, int64_t nbytes,
                        const char* what) {
  const int64_t total = 3 * kMiB;
  Mapping mapping(total);
  ASSERT_NE(mapping.data(), nullptr);
  FillPattern(mapping.data(), total);
  ASSERT_EQ(mprotect(mapping.data(), static_cast<size_t>(total), PROT_READ), 0);
  HostRegistrationOptions options;
  options.device = 0;
  options.chunk_bytes = chunk_bytes;
  absl::StatusOr<HostRegistration> reg = HostRegistration::Register(
      mapping.data(), total, kHostRegisterReadOnly | kHostRegisterPortable, options);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->num_chunks(), chunks);
  EXPECT_EQ(CopyToDeviceWithin10s(mapping.data() + offset, nbytes, what), "ok");
}

TEST(HostRegistrationGpu, CopyInsideOneReadOnlyChunk) {
  SDRT_SKIP_WITHOUT_GPU();
  if (!RegistersReadOnlyPages()) GTEST_SKIP() << "this device cannot register read-only pages";
  ExpectReadOnlyCopy(kMiB, 3, kMiB + 4096, kMiB / 2, "read-only, inside chunk 1 of 3");
}

TEST(HostRegistrationGpu, CopyOfAReadOnlyRangeRegisteredWhole) {
  SDRT_SKIP_WITHOUT_GPU();
  if (!RegistersReadOnlyPages()) GTEST_SKIP() << "this device cannot register read-only pages";
  ExpectReadOnlyCopy(3 * kMiB, 1, 0, 3 * kMiB, "read-only, one registration");
}

TEST(HostRegistrationGpu, ACopyAcrossTwoRegistrationsIsRefused) {
  SDRT_SKIP_WITHOUT_GPU();
  const int64_t nbytes = 3 * kMiB;
  Mapping mapping(nbytes);
  ASSERT_NE(mapping.data(), nullptr);
  FillPattern(mapping.data(), nbytes);
  absl::StatusOr<HostRegistration> reg = RegisterInMiBChunks(mapping.data(), nbytes);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->num_chunks(), 3);
  EXPECT_EQ(CopyToDeviceWithin10s(mapping.data() + 4096, nbytes - 8192,
                                  "read-write, across 3 chunks"),
            "cudaErrorInvalidValue from cudaMemcpyAsync");
  // Kept whole (an unbroken range), the same bytes lie in one registration and copy: the
  // first chunk grows to the range's end, the last page is a chunk of its own.
  ASSERT_TRUE(reg->Release().ok());
  reg = RegisterInMiBChunks(mapping.data(), nbytes, {{4096, nbytes - 8192}});
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->num_chunks(), 2);
  EXPECT_EQ(CopyToDeviceWithin10s(mapping.data() + 4096, nbytes - 8192,
                                  "read-write, kept in one chunk"),
            "ok");
}

}  // namespace
}  // namespace sdrt
