// DistributeStateDict with a communicator checks that every rank holds the same full state
// dict (core/distributed/distributed_state_dict.h, DistributeOptions::comm): rank 1's full
// state dict differs from the others' by one leaf (an extra key, a missing key, a scalar
// where the others hold a tensor, a dtype, a shape), and every rank returns the same
// InvalidArgument naming the key and the two ranks, with nothing written into `local`.
// CTest runs this binary under `mpiexec -n 2` and `-n 3` (rank 2 then agrees with rank 0).
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

using ::testing::HasSubstr;

// The full state dict every rank agrees on: a sharded weight, a plain bias, a scalar.
Map BaseFull() {
  const int n = WorldSize();
  return Map{{"layer", Map{{"w", ValuePattern({2 * n, 4}, DType::kFloat32, 1)},
                           {"b", ValuePattern({3}, DType::kFloat32, 2)}}},
             {"step", int64_t{7}}};
}

Map Local() {
  const int n = WorldSize();
  const Spec s = DSpec("layer.w", {2 * n, 4}, DType::kFloat32, Mesh({n}), "[S(0)]");
  return Map{{"layer", Map{{"w", MetaLeaf(s)}}}};
}

struct Divergence {
  const char* name;
  void (*edit)(Map& full);            // applied to rank 1's full state dict
  std::vector<std::string> expected;  // substrings of the message
};

void ExpectDivergenceFailsOnEveryRank(const Divergence& d) {
  SCOPED_TRACE(d.name);
  Map full = BaseFull();
  if (Rank() == 1) d.edit(full);
  Map local = Local();
  DistributeOptions options;
  options.comm = g_world;
  const absl::Status status = DistributeStateDict(full, local, options);
  ExpectSameStatusOnEveryRank(status);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  const std::string message(status.message());
  EXPECT_THAT(message, HasSubstr("DistributeStateDict"));
  EXPECT_THAT(message, HasSubstr("rank 0"));
  EXPECT_THAT(message, HasSubstr("rank 1"));
  for (const std::string& part : d.expected) EXPECT_THAT(message, HasSubstr(part));
  // Nothing was written: the local DTensor is still the meta one.
  EXPECT_TRUE(local.Find("layer")->as_map().Find("w")->as_dtensor().local().is_meta());
  EXPECT_EQ(local.Find("step"), nullptr);
}

TEST(DistributeSkeletonMpi, SameFullStateDictSucceeds) {
  Map full = BaseFull();
  Map local = Local();
  DistributeOptions options;
  options.comm = g_world;
  const absl::Status status = DistributeStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(status.ok())) << status;
  EXPECT_EQ(local.Find("step")->as_int(), 7);
}

TEST(DistributeSkeletonMpi, ExtraPlainTensorOnOneRank) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  ExpectDivergenceFailsOnEveryRank(
      {"extra tensor",
       [](Map& full) { full.Set("extra", ValuePattern({5}, DType::kFloat32, 3)); },
       {"'extra'", "Tensor float32[5]", "missing on rank 0"}});
}

TEST(DistributeSkeletonMpi, ExtraScalarOnOneRank) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  ExpectDivergenceFailsOnEveryRank({"extra scalar",
                                    [](Map& full) { full.Find("layer")->as_map().Set("lr", 0.5); },
                                    {"'layer.lr'"}});
}

TEST(DistributeSkeletonMpi, MissingKeyOnOneRank) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  ExpectDivergenceFailsOnEveryRank(
      {"missing key", [](Map& full) { full.Find("layer")->as_map().Erase("b"); }, {"'layer.b'"}});
}

TEST(DistributeSkeletonMpi, ScalarWhereOthersHoldATensor) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  ExpectDivergenceFailsOnEveryRank(
      {"scalar vs tensor",
       [](Map& full) { full.Set("step", ValuePattern({}, DType::kInt64, 7)); },
       {"ranks disagree at 'step'", "rank 0 has int", "rank 1 has Tensor int64[]"}});
}

TEST(DistributeSkeletonMpi, DTypeDiffers) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  ExpectDivergenceFailsOnEveryRank(
      {"dtype",
       [](Map& full) {
         full.Find("layer")->as_map().Set("b", ValuePattern({3}, DType::kFloat64, 2));
       },
       {"ranks disagree at 'layer.b'", "Tensor float32[3]", "Tensor float64[3]"}});
}

TEST(DistributeSkeletonMpi, ShapeDiffers) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  ExpectDivergenceFailsOnEveryRank(
      {"shape",
       [](Map& full) {
         full.Find("layer")->as_map().Set("b", ValuePattern({4}, DType::kFloat32, 2));
       },
       {"ranks disagree at 'layer.b'", "Tensor float32[3]", "Tensor float32[4]"}});
}

// Values are not compared: ranks whose full state dicts differ only in values succeed.
TEST(DistributeSkeletonMpi, ValuesAreNotCompared) {
  Map full = BaseFull();
  full.Set("step", int64_t{Rank()});
  full.Find("layer")->as_map().Set("b", ValuePattern({3}, DType::kFloat32, 10 + Rank()));
  Map local = Local();
  DistributeOptions options;
  options.comm = g_world;
  const absl::Status status = DistributeStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(status.ok())) << status;
  EXPECT_EQ(local.Find("step")->as_int(), Rank());
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
