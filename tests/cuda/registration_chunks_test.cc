// The chunk arithmetic of HostRegistration (cuda/registration_chunks.h): host logic, run in
// every build. The registrations themselves are in host_registration_gpu_test.cc.
#include "sdrt/cuda/registration_chunks.h"

#include <cstdint>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kPage = 4096;
constexpr uint64_t kAligned = uint64_t{1} << 40;  // a page-aligned address

RegistrationChunk C(int64_t offset, int64_t nbytes) { return RegistrationChunk{offset, nbytes}; }

std::vector<RegistrationChunk> Plan(uint64_t address, int64_t nbytes, int64_t chunk) {
  absl::StatusOr<std::vector<RegistrationChunk>> plan =
      PlanRegistrationChunks(address, nbytes, chunk, kPage);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : std::vector<RegistrationChunk>{};
}

TEST(RegistrationChunks, AlignedRangeInWholeChunks) {
  // 5.5 MiB in 1 MiB chunks: five full chunks and a half one.
  EXPECT_THAT(Plan(kAligned, 11 * kMiB / 2, kMiB),
              ElementsAre(C(0, kMiB), C(kMiB, kMiB), C(2 * kMiB, kMiB), C(3 * kMiB, kMiB),
                          C(4 * kMiB, kMiB), C(5 * kMiB, kMiB / 2)));
  EXPECT_THAT(Plan(kAligned, 2 * kMiB, kMiB), ElementsAre(C(0, kMiB), C(kMiB, kMiB)));
  // The default chunk (1 GiB) leaves a small range whole; nothing for zero bytes.
  EXPECT_THAT(Plan(kAligned, 3 * kMiB, int64_t{1} << 30), ElementsAre(C(0, 3 * kMiB)));
  EXPECT_THAT(Plan(kAligned, 0, kMiB), ElementsAre());
}

TEST(RegistrationChunks, BoundariesFallOnPagesForAnUnalignedStart) {
  // 100 bytes past a page, 3 pages + 50 bytes, 2-page chunks: the first chunk stops at the
  // second page boundary, so no page belongs to two chunks.
  const int64_t nbytes = 3 * kPage + 50;
  EXPECT_THAT(Plan(kAligned + 100, nbytes, 2 * kPage),
              ElementsAre(C(0, 2 * kPage - 100), C(2 * kPage - 100, kPage + 150)));
  // A chunk size that is not a whole number of pages is rounded up to one.
  EXPECT_THAT(Plan(kAligned, 3 * kPage, kPage + 1),
              ElementsAre(C(0, 2 * kPage), C(2 * kPage, kPage)));
  EXPECT_THAT(Plan(kAligned + 4000, 200, 1), ElementsAre(C(0, 96), C(96, 104)));
}

TEST(RegistrationChunks, ChunksTileTheRangeWithoutSharingPages) {
  for (uint64_t misalign : {0, 1, 100, 4095}) {
    for (int64_t nbytes : {int64_t{1}, kPage, 7 * kPage + 3, 11 * kMiB / 2 + 17}) {
      for (int64_t chunk : {int64_t{1}, kPage, 3 * kPage - 7, kMiB}) {
        const uint64_t address = kAligned + misalign;
        const std::vector<RegistrationChunk> chunks = Plan(address, nbytes, chunk);
        const int64_t step = (chunk + kPage - 1) / kPage * kPage;
        int64_t next = 0;
        for (size_t i = 0; i < chunks.size(); ++i) {
          SCOPED_TRACE(testing::Message()
                       << misalign << " " << nbytes << " " << chunk << " #" << i);
          EXPECT_EQ(chunks[i].offset, next);
          EXPECT_GT(chunks[i].nbytes, 0);
          EXPECT_LE(chunks[i].nbytes, step);
          next += chunks[i].nbytes;
          if (i + 1 < chunks.size()) {
            EXPECT_EQ((address + next) % kPage, 0u);
          }
        }
        EXPECT_EQ(next, nbytes);
      }
    }
  }
}

TEST(RegistrationChunks, RefusesBadArguments) {
  for (const auto& [nbytes, chunk, page] :
       {std::tuple{int64_t{-1}, kMiB, kPage}, std::tuple{kMiB, int64_t{0}, kPage},
        std::tuple{kMiB, kMiB, int64_t{3000}}}) {
    absl::Status s = PlanRegistrationChunks(kAligned, nbytes, chunk, page).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("PlanRegistrationChunks: need nbytes >= 0"));
  }
  absl::Status wraps = PlanRegistrationChunks(~uint64_t{0} - 10, 100, kPage, kPage).status();
  EXPECT_EQ(wraps.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wraps.message(), HasSubstr("overflows the address space"));
}

}  // namespace
}  // namespace sdrt::internal
