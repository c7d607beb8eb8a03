// The gather plan's slots (core/distributed/internal/gather_plan.h): every piece a rank
// sends starts at a 16-byte aligned offset of the gathered bucket, a rank's several
// ShardedTensor shards too, so device copies can use 16-byte accesses; the values are the
// same as ever. One process over a SelfCommunicator; CPU only.
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/comm/self_communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/dtensor_ops.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Three one-element float32 shards (4 bytes each) on rank 0, in reverse global order.
ShardedTensor ThreeSmallShards() {
  std::vector<ShardMetadata> m;
  std::vector<LocalShard> local;
  for (int64_t i = 2; i >= 0; --i) {
    m.push_back({{i}, {1}, {0, Device::CPU()}});
    local.push_back({test::Arange({1}, DType::kFloat32, 10 * (i + 1)), m.back()});
  }
  return *ShardedTensor::Make({3}, DType::kFloat32, m, local);
}

TEST(GatherAlignment, EveryShardOfARankHasItsOwnAlignedSlot) {
  SelfCommunicator comm;
  Map state_dict;
  state_dict.Set("st", Value(ThreeSmallShards()));
  CollectiveStats stats;
  GatherOptions options;
  options.comm = &comm;
  options.stats = &stats;
  absl::StatusOr<Map> gathered = GatherStateDict(state_dict, options);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(Values(gathered->Find("st")->as_tensor()), (std::vector<float>{10, 20, 30}));
  EXPECT_EQ(stats.buckets, 1);
  // Three slots of 16 bytes, not 12 bytes packed into one slot of 16.
  EXPECT_EQ(stats.bytes, 3 * 16);
}

TEST(GatherAlignment, GatherShardedTensorUnpacksTheAlignedSlots) {
  SelfCommunicator comm;
  absl::StatusOr<Tensor> full = GatherShardedTensor(ThreeSmallShards(), comm);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(Values(*full), (std::vector<float>{10, 20, 30}));
}

}  // namespace
}  // namespace sdrt
