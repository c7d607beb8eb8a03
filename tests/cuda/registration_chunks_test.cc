// The chunk arithmetic of HostRegistration (cuda/registration_chunks.h): host logic, run in
// every build. The registrations themselves are in host_registration_gpu_test.cc.
#include "sdrt/cuda/registration_chunks.h"

#include <cstdint>
#include <tuple>
#include <utility>
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

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

std::vector<RegistrationChunk> PlanKeeping(uint64_t address, int64_t nbytes, int64_t chunk,
                                           const Ranges& unbroken) {
  absl::StatusOr<std::vector<RegistrationChunk>> plan =
      PlanRegistrationChunks(address, nbytes, chunk, kPage, unbroken);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : std::vector<RegistrationChunk>{};
}

// CUDA copies from registered memory only within one registration (cudaErrorInvalidValue
// across two, measured on an H200), so no boundary cuts a tensor: the chunk grows to the
// first page boundary after the tensor that spans it.
TEST(RegistrationChunks, BoundariesStepOverUnbrokenRanges) {
  // Tensors of 0.75 MiB back to back in 1 MiB chunks: the boundary at 1 MiB is inside the
  // second tensor ([0.75, 1.5) MiB), so the first chunk ends at 1.5 MiB; the next boundary
  // (2.5 MiB) is inside the fourth ([2.25, 3)), so the second ends at 3 MiB.
  const int64_t q = kMiB / 4;
  const Ranges tensors = {{0, 3 * q}, {3 * q, 3 * q}, {6 * q, 3 * q}, {9 * q, 3 * q}};
  EXPECT_THAT(PlanKeeping(kAligned, 12 * q, kMiB, tensors),
              ElementsAre(C(0, 6 * q), C(6 * q, 6 * q)));
  // In any order; a range ending mid-page pushes the boundary to the page after its end.
  EXPECT_THAT(PlanKeeping(kAligned, 3 * kPage, kPage, {{kPage + 10, 100}, {10, kPage}}),
              ElementsAre(C(0, 2 * kPage), C(2 * kPage, kPage)));
  // One range longer than a chunk is one chunk; a chain of overlapping ranges moves the
  // boundary past all of them; empty ranges and ranges ending on a boundary cut nothing.
  EXPECT_THAT(PlanKeeping(kAligned, 4 * kMiB, kMiB, {{kMiB / 2, 2 * kMiB}}),
              ElementsAre(C(0, 5 * kMiB / 2), C(5 * kMiB / 2, kMiB), C(7 * kMiB / 2, kMiB / 2)));
  EXPECT_THAT(PlanKeeping(kAligned, 4 * kMiB, kMiB,
                          {{kMiB - 1, 2}, {kMiB, kMiB + 1}, {2 * kMiB, 10}}),
              ElementsAre(C(0, 2 * kMiB + kPage), C(2 * kMiB + kPage, kMiB),
                          C(3 * kMiB + kPage, kMiB - kPage)));
  EXPECT_THAT(PlanKeeping(kAligned, 2 * kMiB, kMiB, {{0, kMiB}, {kMiB, 0}, {kMiB, kMiB}}),
              ElementsAre(C(0, kMiB), C(kMiB, kMiB)));
  // A range to the very end makes the rest one chunk.
  EXPECT_THAT(PlanKeeping(kAligned + 100, 3 * kMiB, kMiB, {{kMiB / 2, 3 * kMiB - kMiB / 2}}),
              ElementsAre(C(0, 3 * kMiB)));
}

TEST(RegistrationChunks, NoChunkCutsARangeOfRandomLayouts) {
  uint64_t state = 12345;
  auto next = [&state](int64_t bound) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    return static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(bound));
  };
  for (int trial = 0; trial < 200; ++trial) {
    const uint64_t address = kAligned + static_cast<uint64_t>(next(kPage));
    const int64_t nbytes = 1 + next(64 * kPage);
    const int64_t chunk = 1 + next(8 * kPage);
    Ranges ranges;
    for (int i = next(12); i > 0; --i) {
      const int64_t offset = next(nbytes + 1);
      ranges.emplace_back(offset, next(nbytes - offset + 1));
    }
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    const std::vector<RegistrationChunk> chunks = PlanKeeping(address, nbytes, chunk, ranges);
    int64_t covered = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_EQ(chunks[i].offset, covered);
      EXPECT_GT(chunks[i].nbytes, 0);
      covered += chunks[i].nbytes;
      if (i + 1 == chunks.size()) continue;
      EXPECT_EQ((address + covered) % kPage, 0u);
      for (const auto& [offset, length] : ranges) {
        EXPECT_FALSE(offset < covered && covered < offset + length)
            << "a boundary at " << covered << " cuts [" << offset << ", " << offset + length
            << ")";
      }
    }
    EXPECT_EQ(covered, nbytes);
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
  for (const auto& range : Ranges{{-1, 10}, {0, kMiB + 1}, {kMiB, 1}, {5, -1}}) {
    const Ranges one = {range};
    absl::Status outside = PlanRegistrationChunks(kAligned, kMiB, kPage, kPage, one).status();
    EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(outside.message(), HasSubstr("is not inside the 1048576 bytes registered"));
  }
}

}  // namespace
}  // namespace sdrt::internal
