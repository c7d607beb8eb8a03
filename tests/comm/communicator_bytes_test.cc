// AllGatherBytes and BroadcastBytes never trust a length another rank sent: rank 0 of two
// ranks whose peer's bytes are scripted at the level a backend sees them (the all-gather-v
// of host bytes under Communicator::AllGatherBytesVia), so a negative or huge length from
// the peer is an InvalidArgument, never an exception or an allocation of that size, also
// through the agreement every distributed operation starts with.
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/agreement.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

// Rank 0 of 2. The first host all-gather-v (the lengths) gives rank 1's length as
// `peer_length`; a second one (the bytes) fills rank 1's part with 'x'.
class HostilePeer final : public Communicator {
 public:
  explicit HostilePeer(int64_t peer_length) : Communicator(0, 2), peer_length_(peer_length) {}
  absl::string_view backend() const override { return "scripted"; }
  Device device() const override { return Device::CPU(); }
  int gathers() const { return gathers_; }

 protected:
  absl::Status DoAllGatherV(void* out, const void* in, absl::Span<const int64_t> counts) override {
    char* bytes = static_cast<char*>(out);
    if (gathers_++ == 0) {  // the lengths: 8 bytes from each rank
      std::memcpy(bytes, in, sizeof(int64_t));
      std::memcpy(bytes + sizeof(int64_t), &peer_length_, sizeof(int64_t));
      return absl::OkStatus();
    }
    std::memcpy(bytes, in, static_cast<size_t>(counts[0]));
    std::memset(bytes + counts[0], 'x', static_cast<size_t>(counts[1]));
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> DoAllGatherBytes(const std::string& mine) override {
    return AllGatherBytesVia(mine,
                             [this](void* out, const void* in, absl::Span<const int64_t> counts) {
                               return DoAllGatherV(out, in, counts);
                             });
  }
  absl::Status DoBroadcastBytes(std::string*, int) override { return Unused(); }
  absl::Status DoAllGather(void*, const void*, int64_t) override { return Unused(); }
  absl::Status DoBroadcast(absl::Span<const Tensor>, int) override { return Unused(); }
  absl::Status DoAllReduce(Tensor&, ReduceOp) override { return Unused(); }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int, int) override { return Unused(); }
  absl::Status DoBarrier() override { return Unused(); }

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not used here"); }
  int64_t peer_length_;
  int gathers_ = 0;
};

TEST(CommunicatorBytes, PeerLengthsWithinTheLimitAreGathered) {
  HostilePeer comm(5);
  absl::StatusOr<std::vector<std::string>> all = comm.AllGatherBytes("abc");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, (std::vector<std::string>{"abc", "xxxxx"}));
}

TEST(CommunicatorBytes, HostilePeerLengthsAreInvalidArgumentBeforeAnyAllocation) {
  for (int64_t length : {int64_t{-1000}, int64_t{-1}, Communicator::kMaxBytesMessage + 1,
                         int64_t{1} << 60, std::numeric_limits<int64_t>::max()}) {
    SCOPED_TRACE(length);
    HostilePeer comm(length);
    absl::StatusOr<std::vector<std::string>> all = comm.AllGatherBytes("abc");
    EXPECT_EQ(all.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(all.status().message()),
                HasSubstr("rank 1 sent a bytes message of length " + std::to_string(length)));
    EXPECT_EQ(comm.gathers(), 1);  // the bytes were never gathered
  }
}

TEST(CommunicatorBytes, TheAgreementTurnsAHostileLengthIntoAStatus) {
  HostilePeer comm(int64_t{1} << 60);
  const absl::Status s = AgreeAcrossRanks(comm, "GatherStateDict", "o", {}, absl::OkStatus());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("sent a bytes message of length"));
}

}  // namespace
}  // namespace sdrt
