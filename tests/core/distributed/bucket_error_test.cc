// A collective that fails in the middle of a bucketed gather or broadcast (a timeout, a
// failed rank) comes back naming the bucket, so that the error can be placed in the run
// (issue 12, docs/SEMANTICS.md 11.16). One process, over a one-rank communicator whose
// data collective number N fails as an MPI timeout would.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

constexpr char kTimeout[] = "all_gather_v (test, rank 0 of 1): not complete after 5 ms";

// One rank, like SelfCommunicator, except that data collective number `fail_at` (from 1:
// all-gathers and broadcasts of tensors; the bytes calls are metadata) returns
// DeadlineExceeded.
class FailingCommunicator final : public Communicator {
 public:
  explicit FailingCommunicator(int fail_at) : Communicator(0, 1), fail_at_(fail_at) {}
  absl::string_view backend() const override { return "test"; }
  Device device() const override { return Device::CPU(); }

 protected:
  absl::Status DoAllGather(void* output, const void* input, int64_t bytes) override {
    SDRT_RETURN_IF_ERROR(Count());
    if (output != input) std::memcpy(output, input, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status DoAllGatherV(void* output, const void* input,
                            absl::Span<const int64_t> byte_counts) override {
    return DoAllGather(output, input, byte_counts[0]);
  }
  absl::Status DoBroadcast(absl::Span<const Tensor>, int) override { return Count(); }
  absl::Status DoAllReduce(Tensor&, ReduceOp) override { return absl::OkStatus(); }
  absl::Status DoBroadcastBytes(std::string*, int) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<std::string>> DoAllGatherBytes(const std::string& mine) override {
    return std::vector<std::string>{mine};
  }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int, int) override {
    return absl::UnimplementedError("not needed");
  }
  absl::Status DoBarrier() override { return absl::OkStatus(); }

 private:
  absl::Status Count() {
    return ++calls_ == fail_at_ ? absl::DeadlineExceededError(kTimeout) : absl::OkStatus();
  }
  int fail_at_;
  int calls_ = 0;
};

// Three float32 tensors of 16 elements (64 bytes): three buckets of 64 bytes.
Map ThreeTensors() {
  Map m;
  for (const char* name : {"a", "b", "c"}) m.Set(name, *Tensor::Zeros({16}, DType::kFloat32));
  return m;
}

TEST(BucketError, GatherNamesTheBucketOfTheFailedCollective) {
  FailingCommunicator comm(/*fail_at=*/2);
  GatherOptions options;
  options.comm = &comm;
  options.bucket_bytes = 64;
  // ShardedTensors of one shard each: gathered even over one rank.
  Map state_dict;
  for (const char* name : {"a", "b", "c"}) {
    const ShardMetadata shard{{0}, {16}, {0, Device::CPU()}};
    state_dict.Set(name, *ShardedTensor::Make({16}, DType::kFloat32, {shard},
                                              {{*Tensor::Zeros({16}, DType::kFloat32), shard}}));
  }
  const absl::StatusOr<Map> gathered = GatherStateDict(state_dict, options);
  ASSERT_EQ(gathered.status().code(), absl::StatusCode::kDeadlineExceeded) << gathered.status();
  EXPECT_THAT(gathered.status().message(), HasSubstr("bucket 2 of 3 (1 tensors): "));
  EXPECT_THAT(gathered.status().message(), HasSubstr(kTimeout));
}

TEST(BucketError, BroadcastNamesTheBucketOfTheFailedCollective) {
  FailingCommunicator comm(/*fail_at=*/3);
  BroadcastOptions options;
  options.comm = &comm;
  options.bucket_bytes = 64;
  Map local = ThreeTensors();
  const absl::StatusOr<BroadcastResult> result = BroadcastStateDict(ThreeTensors(), local, options);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("bucket 3 of 3 (64 bytes): "));
  EXPECT_THAT(result.status().message(), HasSubstr(kTimeout));
}

}  // namespace
}  // namespace sdrt
