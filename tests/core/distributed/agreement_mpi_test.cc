// Multi-rank tests of AgreeAcrossRanks (core/distributed/agreement.h) over MPI: ranks pass
// different errors, options and skeletons, and every rank gets the same status (code and
// message, compared across ranks), naming what differs. CTest runs this binary under
// `mpiexec -n N` for N = 1, 2, 3, 4.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

MpiCommunicator* g_world = nullptr;

int Rank() { return g_world->rank(); }
int Size() { return g_world->size(); }

// Checks that every rank got exactly this status (code and message).
void ExpectSameStatusOnEveryRank(const absl::Status& status) {
  absl::StatusOr<std::vector<std::string>> all = g_world->AllGatherBytes(status.ToString());
  ASSERT_TRUE(all.ok()) << all.status();
  for (int r = 0; r < Size(); ++r) {
    EXPECT_EQ((*all)[r], status.ToString()) << "rank " << r << " got another status";
  }
}

// "rank 0", "ranks 0, 1", "ranks 0-2": every rank of the world.
std::string AllRanks() {
  if (Size() == 1) return "rank 0";
  if (Size() == 2) return "ranks 0, 1";
  return absl::StrCat("ranks 0-", Size() - 1);
}

AgreementSkeleton Skeleton(const std::string& dtype) {
  return {{"layers.0.w", absl::StrCat("DTensor ", dtype, "[8, 4] [S(0)] on mesh (", Size(), ")")},
          {"step", "int"}};
}

TEST(AgreeAcrossRanksMpi, MatchingRanksAgreeAndShareTheirPayloads) {
  TransferStats stats;
  AgreementPayload payload{absl::StrCat("from rank ", Rank()), {}};
  const absl::Status s = AgreeAcrossRanks(*g_world, "Op", "bucket_bytes 16", Skeleton("float32"),
                                          absl::OkStatus(), &stats, &payload);
  ExpectSameStatusOnEveryRank(s);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(payload.all.size(), static_cast<size_t>(Size()));
  for (int q = 0; q < Size(); ++q) EXPECT_EQ(payload.all[q], absl::StrCat("from rank ", q));
  EXPECT_EQ(stats.collectives, 1);
}

TEST(AgreeAcrossRanksMpi, EveryRankReportsTheSameErrors) {
  // Odd ranks fail, each with its own message; the lowest failing rank's code wins.
  const absl::Status mine =
      Rank() % 2 == 1
          ? absl::Status(Rank() == 1 ? absl::StatusCode::kNotFound : absl::StatusCode::kDataLoss,
                         absl::StrCat("file of rank ", Rank(), " is bad"))
          : absl::OkStatus();
  const absl::Status s = AgreeAcrossRanks(*g_world, "Op", "o", Skeleton("float32"), mine);
  ExpectSameStatusOnEveryRank(s);
  if (Size() == 1) {
    EXPECT_TRUE(s.ok()) << s;
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("Op: rank 1: file of rank 1 is bad"));
    if (Size() == 4) {
      EXPECT_THAT(std::string(s.message()), HasSubstr("; rank 3: file of rank 3 is bad"));
    }
  }
  // Every rank fails alike: one entry naming them all, even when options and skeletons
  // differ too.
  const absl::Status all =
      AgreeAcrossRanks(*g_world, "", absl::StrCat("o", Rank()), Skeleton(Rank() ? "int8" : "int4"),
                       absl::FailedPreconditionError("--device cuda: no GPU"));
  ExpectSameStatusOnEveryRank(all);
  EXPECT_EQ(all.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(all.message(), absl::StrCat(AllRanks(), ": --device cuda: no GPU"));
}

TEST(AgreeAcrossRanksMpi, OptionsThatDifferAreNamed) {
  if (Size() == 1) GTEST_SKIP() << "needs two ranks to disagree";
  const int last = Size() - 1;
  const std::string options = absl::StrCat("root 0, bucket_bytes ", Rank() == last ? 1024 : 4096);
  const absl::Status s =
      AgreeAcrossRanks(*g_world, "BroadcastStateDict", options,
                       Skeleton(Rank() == last ? "int8" : "float32"), absl::OkStatus());
  ExpectSameStatusOnEveryRank(s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat("BroadcastStateDict: ranks disagree on the options: rank 0 "
                                      "has root 0, bucket_bytes 4096, rank ",
                                      last, " has root 0, bucket_bytes 1024"));
}

TEST(AgreeAcrossRanksMpi, SkeletonsThatDifferAreNamedByTheirFirstDifferingLeaf) {
  if (Size() == 1) GTEST_SKIP() << "needs two ranks to disagree";
  const int last = Size() - 1;
  TransferStats stats;
  const absl::Status s =
      AgreeAcrossRanks(*g_world, "GatherStateDict", "o",
                       Skeleton(Rank() == last ? "bfloat16" : "float32"), absl::OkStatus(), &stats);
  ExpectSameStatusOnEveryRank(s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("GatherStateDict: ranks disagree at 'layers.0.w': rank 0 has DTensor "
                        "float32[8, 4]"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("rank ", last, " has DTensor bfloat16[8, 4]")));
  EXPECT_EQ(stats.collectives, 2) << "the second exchange names the difference";

  // A rank with a key the others lack.
  AgreementSkeleton extra = Skeleton("float32");
  if (Rank() == 1) extra.emplace_back("only_on_rank1", "Tensor float32[1]");
  const absl::Status keys = AgreeAcrossRanks(*g_world, "Op", "o", extra, absl::OkStatus());
  ExpectSameStatusOnEveryRank(keys);
  EXPECT_EQ(keys.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(keys.message()),
              HasSubstr("leaf 2 is missing on rank 0 but 'only_on_rank1' (Tensor float32[1]) on "
                        "rank 1"));
}

}  // namespace
}  // namespace sdrt

int main(int argc, char** argv) { return sdrt::test::RunMpiTests(argc, argv, &sdrt::g_world); }
