// A collective that fails in the middle of a gather or broadcast (a timeout, a failed rank)
// comes back naming the exchange, so that the error can be placed in the run (issue 12,
// docs/SEMANTICS.md 11.16). One process, over a communicator that plays rank 0 of two
// ranks whose rank 1 says what rank 0 says, and whose data call number N (exchanges and
// broadcasts; the bytes calls and the closing are metadata) fails as an MPI timeout would.
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

constexpr char kTimeout[] = "exchange (test, rank 0 of 2): not complete after 5 ms";

class FailingCommunicator final : public Communicator {
 public:
  explicit FailingCommunicator(int fail_at) : Communicator(0, 2), fail_at_(fail_at) {}
  absl::string_view backend() const override { return "test"; }
  Device device() const override { return Device::CPU(); }
  bool SupportsExchange() const override { return true; }

 protected:
  absl::Status DoExchange(absl::Span<const SendMessage>, absl::Span<const ReceiveMessage>,
                          const LocalWork& overlap) override {
    SDRT_RETURN_IF_ERROR(Count());
    return overlap ? overlap() : absl::OkStatus();
  }
  absl::Status DoBroadcast(absl::Span<const Tensor>, int) override { return Count(); }
  absl::Status DoAllGather(void*, const void*, int64_t) override { return Count(); }
  absl::Status DoAllGatherV(void*, const void*, absl::Span<const int64_t>) override {
    return Count();
  }
  absl::Status DoAllReduce(Tensor&, ReduceOp) override { return absl::OkStatus(); }
  absl::Status DoBroadcastBytes(std::string*, int) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<std::string>> DoAllGatherBytes(const std::string& mine) override {
    return std::vector<std::string>{mine, mine};
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

TEST(BucketError, GatherNamesTheExchangeOfTheFailedCollective) {
  FailingCommunicator comm(/*fail_at=*/2);
  GatherOptions options;
  options.comm = &comm;
  options.bucket_bytes = 64;
  // Three tensors Shard(0) over the two ranks: 32 bytes of each go to rank 1 and come from
  // it, two tensors' worth per exchange.
  const auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({2}));
  Map state_dict;
  for (const char* name : {"a", "b", "c"}) {
    state_dict.Set(name, *DTensor::Make(*Tensor::Zeros({8}, DType::kFloat32), mesh,
                                        {Placement::Shard(0)}, {16}));
  }
  const absl::StatusOr<Map> gathered = GatherStateDict(state_dict, options);
  ASSERT_EQ(gathered.status().code(), absl::StatusCode::kDeadlineExceeded) << gathered.status();
  EXPECT_THAT(gathered.status().message(), HasSubstr("exchange 2 of 2 (point to point): "));
  EXPECT_THAT(gathered.status().message(), HasSubstr(kTimeout));
}

TEST(BucketError, BroadcastNamesTheExchangeOfTheFailedCollective) {
  FailingCommunicator comm(/*fail_at=*/3);
  BroadcastOptions options;
  options.comm = &comm;
  options.bucket_bytes = 64;
  // Plain tensors every rank keeps whole: a broadcast each (64 bytes, a bucket).
  Map local = ThreeTensors();
  const absl::StatusOr<BroadcastResult> result = BroadcastStateDict(ThreeTensors(), local, options);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("exchange 3 of 3 (a broadcast): "));
  EXPECT_THAT(result.status().message(), HasSubstr(kTimeout));
}

}  // namespace
}  // namespace sdrt
