#include "sdrt/tensor/storage.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(Storage, CpuAllocationIsAlignedAndSized) {
  for (int64_t align : {8, 64, 256, 4096}) {
    absl::StatusOr<std::shared_ptr<Storage>> s = Storage::AllocateCpu(1000, align);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*s)->data()) % align, 0u);
    EXPECT_EQ((*s)->nbytes(), 1000);
    EXPECT_EQ((*s)->kind(), StorageKind::kCpu);
    std::memset((*s)->data(), 0xab, 1000);  // the whole range is writable
  }
  EXPECT_EQ((*Storage::AllocateCpu(0))->data(), nullptr);
  EXPECT_EQ(Storage::AllocateCpu(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Storage::AllocateCpu(16, 48).status().message(), HasSubstr("power of two"));
}

// Blocks of 2 MiB and more come back from the CPU cache: the same memory, already mapped,
// for the next allocation of the same size (up to 5/4 of it), until the cache is released
// or its limit set to 0; smaller ones are never cached.
TEST(Storage, LargeCpuBlocksAreReusedFromTheCache) {
  Storage::ReleaseCpuCache();
  const int64_t saved_limit = Storage::CpuCacheLimit();
  Storage::SetCpuCacheLimit(int64_t{64} << 20);
  constexpr int64_t kBlock = int64_t{4} << 20;
  void* first = nullptr;
  {
    std::shared_ptr<Storage> s = *Storage::AllocateCpu(kBlock);
    first = s->data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (uintptr_t{2} << 20), 0u);
    EXPECT_EQ(Storage::CachedCpuBytes(), 0);
  }
  EXPECT_EQ(Storage::CachedCpuBytes(), kBlock);
  {
    // A little smaller still fits the cached block; a much smaller one does not.
    std::shared_ptr<Storage> small = *Storage::AllocateCpu(kBlock / 2);
    EXPECT_NE(small->data(), first);
    std::shared_ptr<Storage> again = *Storage::AllocateCpu(kBlock - 4096);
    EXPECT_EQ(again->data(), first);
    EXPECT_EQ(again->nbytes(), kBlock - 4096);
    EXPECT_EQ(Storage::CachedCpuBytes(), 0);
  }
  EXPECT_EQ(Storage::CachedCpuBytes(), kBlock + kBlock / 2);
  EXPECT_EQ(Storage::ReleaseCpuCache(), kBlock + kBlock / 2);
  EXPECT_EQ(Storage::CachedCpuBytes(), 0);
  {
    std::shared_ptr<Storage> below = *Storage::AllocateCpu((int64_t{2} << 20) - 1);
  }
  EXPECT_EQ(Storage::CachedCpuBytes(), 0);  // under 2 MiB: freed, not cached
  Storage::SetCpuCacheLimit(0);
  {
    std::shared_ptr<Storage> s = *Storage::AllocateCpu(kBlock);
  }
  EXPECT_EQ(Storage::CachedCpuBytes(), 0);  // the cache is off
  Storage::SetCpuCacheLimit(kBlock);
  {
    std::shared_ptr<Storage> a = *Storage::AllocateCpu(kBlock);
    std::shared_ptr<Storage> b = *Storage::AllocateCpu(kBlock);
  }
  EXPECT_EQ(Storage::CachedCpuBytes(), kBlock);  // the limit holds one of the two
  Storage::SetCpuCacheLimit(saved_limit);
  Storage::ReleaseCpuCache();
}

TEST(Storage, SharedMemoryIsNamedVisibleAndUnlinkedOnRelease) {
  std::string name;
  {
    absl::StatusOr<std::shared_ptr<Storage>> s = Storage::AllocateShared(4096 + 7);
    ASSERT_TRUE(s.ok()) << s.status();
    name = (*s)->shm_name();
    EXPECT_THAT(name, StartsWith("/sdrt-"));
    EXPECT_EQ((*s)->kind(), StorageKind::kShared);
    static_cast<char*>((*s)->data())[4100] = 42;
    // Another mapping of the same name sees the byte: it really is shared memory.
    const int fd = shm_open(name.c_str(), O_RDONLY, 0);
    ASSERT_GE(fd, 0);
    void* other = mmap(nullptr, 4103, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(other, MAP_FAILED);
    EXPECT_EQ(static_cast<char*>(other)[4100], 42);
    EXPECT_EQ(static_cast<char*>(other)[0], 0);  // zero-filled
    munmap(other, 4103);
  }
  EXPECT_LT(shm_open(name.c_str(), O_RDONLY, 0), 0) << name << " was not unlinked";
  absl::StatusOr<std::shared_ptr<Storage>> empty = Storage::AllocateShared(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->data(), nullptr);
  EXPECT_EQ((*empty)->shm_name(), "");
}

TEST(Storage, BorrowedCallsDeleterOnceWithItsPointer) {
  int calls = 0;
  void* seen = nullptr;
  char buffer[16];
  {
    std::shared_ptr<Storage> s = Storage::Borrow(buffer, 16, Device::CPU(), [&](void* p) {
      ++calls;
      seen = p;
    });
    std::shared_ptr<Storage> another = s;  // an arena shared by two holders
    EXPECT_EQ(s->kind(), StorageKind::kBorrowed);
    EXPECT_EQ(calls, 0);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, buffer);
}

TEST(Storage, FinalizersRunBeforeReleaseLastAddedFirst) {
  std::string order;
  {
    std::shared_ptr<Storage> s =
        Storage::Borrow(nullptr, 0, Device::CPU(), [&](void*) { order += "R"; });
    EXPECT_FALSE(s->is_pinned());
    s->AddFinalizer([&] { order += "1"; }, /*marks_pinned=*/false);
    s->AddFinalizer([&] { order += "2"; }, /*marks_pinned=*/true);
    EXPECT_TRUE(s->is_pinned());
  }
  EXPECT_EQ(order, "21R");
}

TEST(Device, PrintsAndParsesLikePyTorch) {
  EXPECT_EQ(Device::CUDA(3).ToString(), "cuda:3");
  EXPECT_EQ(Device::CPU().ToString(), "cpu");
  EXPECT_EQ(Device::Meta().ToString(), "meta");
  EXPECT_EQ(*ParseDevice("cuda:3"), Device::CUDA(3));
  EXPECT_EQ(*ParseDevice("cuda"), Device::CUDA(0));
  EXPECT_EQ(*ParseDevice("meta"), Device::Meta());
  const absl::Status letter = ParseDevice("cuda:x").status();
  EXPECT_EQ(letter.code(), absl::StatusCode::kInvalidArgument) << letter;
  EXPECT_THAT(letter.message(), HasSubstr("cannot parse device 'cuda:x'"));
  absl::Status negative = ParseDevice("cuda:-1").status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.message(), HasSubstr("cannot parse device 'cuda:-1'"));
}

TEST(Device, ParseTakesOnlyADecimalCudaIndex) {
  for (const char* bad : {"cuda:1 ", "cuda:+1", "cuda:"}) {
    absl::StatusOr<Device> d = ParseDevice(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(d.status().message(), HasSubstr(absl::StrCat("cannot parse device '", bad, "'")));
  }
  EXPECT_EQ(*ParseDevice("cuda:12"), Device::CUDA(12));
}

// Shared-memory names must not collide with a segment an earlier process of the same
// pid left behind.
TEST(Storage, SharedNamesSurviveLeftoversOfTheSamePid) {
  const std::string leftover = absl::StrCat("/sdrt-", ::getpid(), "-0");
  const int fd = shm_open(leftover.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  absl::StatusOr<std::shared_ptr<Storage>> s = Storage::AllocateShared(4096);
  shm_unlink(leftover.c_str());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE((*s)->shm_name(), leftover);
}

TEST(Storage, FromStorageRejectsByteCountOverflow) {
  std::shared_ptr<Storage> one = *Storage::AllocateCpu(4);
  absl::StatusOr<Tensor> t =
      Tensor::FromStorage(one, DType::kFloat32, {int64_t{1} << 30, int64_t{1} << 30, 4}, {0, 0, 0});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(t.status().message(), HasSubstr("overflows"));
}

}  // namespace
}  // namespace sdrt
