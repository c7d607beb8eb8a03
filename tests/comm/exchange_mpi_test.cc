// Multi-rank tests of Communicator::Exchange (comm/communicator.h) over MPI: every rank
// sends two messages to every rank (itself included) whose sizes and bytes depend on
// (sender, receiver, index), and receives them in the order they were sent; ranks with
// nothing to move still take part; bad arguments are InvalidArgument before anything moves.
// CTest runs it under `mpiexec -n N`, N = 1..4.
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

MpiCommunicator* g_world = nullptr;

int64_t SizeOf(int from, int to, int k) { return 1 + 37 * from + 11 * to + 5 * k; }
uint8_t ByteOf(int from, int to, int k, int64_t i) {
  return static_cast<uint8_t>(from * 31 + to * 7 + k * 3 + i);
}

TEST(ExchangeMpi, EveryPairInOrderSelfIncluded) {
  const int n = g_world->size();
  const int me = g_world->rank();
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<Communicator::SendMessage> sends;
  std::vector<Communicator::ReceiveMessage> receives;
  out.reserve(2 * n);
  in.reserve(2 * n);
  for (int k = 0; k < 2; ++k) {
    for (int peer = 0; peer < n; ++peer) {
      out.emplace_back(SizeOf(me, peer, k));
      for (size_t i = 0; i < out.back().size(); ++i) out.back()[i] = ByteOf(me, peer, k, i);
      sends.push_back({peer, out.back().data(), static_cast<int64_t>(out.back().size())});
      in.emplace_back(SizeOf(peer, me, k), 0);
      receives.push_back({peer, in.back().data(), static_cast<int64_t>(in.back().size())});
    }
  }
  ASSERT_TRUE(g_world->Exchange(sends, receives).ok());
  for (int k = 0; k < 2; ++k) {
    for (int peer = 0; peer < n; ++peer) {
      const std::vector<uint8_t>& got = in[k * n + peer];
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], ByteOf(peer, me, k, i)) << "from " << peer << " message " << k;
      }
    }
  }
}

TEST(ExchangeMpi, RanksWithNothingToMoveStillTakePart) {
  // Only rank 0 sends, to the last rank; everyone calls, twice.
  const int last = g_world->size() - 1;
  for (int round = 0; round < 2; ++round) {
    std::vector<uint8_t> data(1000, static_cast<uint8_t>(round + 1)), got(1000, 0);
    std::vector<Communicator::SendMessage> sends;
    std::vector<Communicator::ReceiveMessage> receives;
    if (g_world->rank() == 0) sends.push_back({last, data.data(), 1000});
    if (g_world->rank() == last) receives.push_back({0, got.data(), 1000});
    // A zero-byte message pairs like any other.
    sends.push_back({g_world->rank(), nullptr, 0});
    receives.push_back({g_world->rank(), nullptr, 0});
    ASSERT_TRUE(g_world->Exchange(sends, receives).ok());
    if (g_world->rank() == last) {
      EXPECT_EQ(got, data);
    }
  }
}

TEST(ExchangeMpi, BadArgumentsAreInvalidArgumentOnEveryRank) {
  uint8_t byte = 0;
  const int n = g_world->size();
  const int me = g_world->rank();
  const std::vector<std::vector<Communicator::SendMessage>> bad_sends = {
      {{n, &byte, 1}}, {{-1, &byte, 1}}, {{0, &byte, -1}}, {{0, nullptr, 1}}};
  for (const auto& sends : bad_sends) {
    const absl::Status s = g_world->Exchange(sends, {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("exchange (mpi"));
  }
  // Sends to self and receives from self must pair up.
  uint8_t two[2] = {1, 2};
  const absl::Status unpaired = g_world->Exchange({{me, two, 2}}, {{me, two, 1}});
  EXPECT_EQ(unpaired.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unpaired.message()), HasSubstr("receive from self 0 of 1 bytes"));
  const absl::Status missing = g_world->Exchange({{me, two, 2}}, {});
  EXPECT_THAT(std::string(missing.message()), HasSubstr("1 sends to self but 0 receives"));
  // The communicator is still usable: nothing was sent.
  EXPECT_TRUE(g_world->Barrier().ok());
}

}  // namespace
}  // namespace sdrt

int main(int argc, char** argv) { return sdrt::test::RunMpiTests(argc, argv, &sdrt::g_world); }
