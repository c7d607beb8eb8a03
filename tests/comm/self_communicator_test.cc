// SelfCommunicator (comm/self_communicator.h): the one-process communicator gives what an
// MPI communicator of one rank gives, validates like any backend, and serves as a
// ProcessGroup's CPU communicator; it is what a build without MPI or NCCL communicates
// with, whose backend constructors are Unavailable (the last test). CPU only.
#include "sdrt/comm/self_communicator.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/comm/process_group.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/version.h"

namespace sdrt {
namespace {

using test::FiniteBytes;
using test::kWholeByteDTypes;
using ::testing::HasSubstr;

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), t.nbytes());
}

TEST(SelfCommunicator, IsRankZeroOfOneOnTheCpu) {
  SelfCommunicator self;
  EXPECT_EQ(self.rank(), 0);
  EXPECT_EQ(self.size(), 1);
  EXPECT_EQ(self.backend(), "self");
  EXPECT_EQ(self.device(), Device::CPU());
  EXPECT_TRUE(self.Barrier().ok());
}

TEST(SelfCommunicator, AllGatherCopiesTheInput) {
  SelfCommunicator self;
  for (DType dtype : kWholeByteDTypes) {
    const Tensor input = FiniteBytes({2, 5}, dtype, 3);
    Tensor output = *Tensor::Zeros({10}, dtype);
    ASSERT_TRUE(self.AllGather(output, input).ok()) << DTypeName(dtype);
    EXPECT_EQ(Bytes(output), Bytes(input)) << DTypeName(dtype);
    Tensor v_output = *Tensor::Zeros({10}, dtype);
    const int64_t counts[] = {10};
    ASSERT_TRUE(self.AllGatherV(v_output, input, counts).ok()) << DTypeName(dtype);
    EXPECT_EQ(Bytes(v_output), Bytes(input)) << DTypeName(dtype);
  }
  // In place: the output is its own input.
  Tensor in_place = FiniteBytes({4}, DType::kInt64, 1);
  const std::string before = Bytes(in_place);
  ASSERT_TRUE(self.AllGather(in_place, in_place).ok());
  EXPECT_EQ(Bytes(in_place), before);
}

TEST(SelfCommunicator, BroadcastAndAllReduceLeaveTheData) {
  SelfCommunicator self;
  std::vector<Tensor> tensors = {FiniteBytes({3}, DType::kFloat32, 1),
                                 FiniteBytes({7}, DType::kBFloat16, 2)};
  const std::string first = Bytes(tensors[0]);
  const std::string second = Bytes(tensors[1]);
  ASSERT_TRUE(self.Broadcast(absl::MakeSpan(tensors), 0).ok());
  EXPECT_EQ(Bytes(tensors[0]), first);
  EXPECT_EQ(Bytes(tensors[1]), second);
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    Tensor t = FiniteBytes({9}, DType::kInt32, 4);
    const std::string expected = Bytes(t);
    ASSERT_TRUE(self.AllReduce(t, op).ok()) << ReduceOpName(op);
    EXPECT_EQ(Bytes(t), expected) << ReduceOpName(op);
  }
}

TEST(SelfCommunicator, BytesSplitAndBarrier) {
  SelfCommunicator self;
  std::string bytes = "sdrt";
  ASSERT_TRUE(self.BroadcastBytes(&bytes, 0).ok());
  EXPECT_EQ(bytes, "sdrt");
  absl::StatusOr<std::vector<std::string>> all = self.AllGatherBytes("mine");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, std::vector<std::string>{"mine"});
  absl::StatusOr<std::unique_ptr<Communicator>> none = self.Split(-1, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  absl::StatusOr<std::unique_ptr<Communicator>> child = self.Split(3, 0);
  ASSERT_TRUE(child.ok());
  ASSERT_NE(*child, nullptr);
  EXPECT_EQ((*child)->backend(), "self");
  EXPECT_EQ((*child)->size(), 1);
  EXPECT_TRUE((*child)->Barrier().ok());
}

// Validation is Communicator's: the same mistakes fail as on a real backend.
TEST(SelfCommunicator, ArgumentErrorsAreTheBackendsErrors) {
  SelfCommunicator self;
  const Tensor input = FiniteBytes({4}, DType::kFloat32);
  Tensor small = *Tensor::Zeros({3}, DType::kFloat32);
  absl::Status size = self.AllGather(small, input);
  EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(size.message(), HasSubstr("all_gather (self, rank 0 of 1)"));
  std::vector<Tensor> one = {input};
  absl::Status root = self.Broadcast(absl::MakeSpan(one), 1);
  EXPECT_EQ(root.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(root.message(), HasSubstr("root 1 is not in [0, 1)"));
  // Overlapping tensors are found by address, whatever their order in the list: the first
  // and last of four views of one buffer share bytes, the two between touch neither.
  const Tensor whole = *Tensor::Zeros({64}, DType::kFloat32);
  std::vector<Tensor> views = {*whole.Narrow(0, 0, 16), *whole.Narrow(0, 40, 8),
                               *whole.Narrow(0, 20, 10), *whole.Narrow(0, 12, 8)};
  absl::Status overlap = self.Broadcast(absl::MakeSpan(views), 0);
  EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(overlap.message(), HasSubstr("tensors[3]"));
  EXPECT_THAT(overlap.message(), HasSubstr("overlaps another tensor"));
  views.pop_back();
  EXPECT_TRUE(self.Broadcast(absl::MakeSpan(views), 0).ok());
  Tensor flags = *Tensor::Zeros({2}, DType::kBool);
  absl::Status avg = self.AllReduce(flags, ReduceOp::kAvg);
  EXPECT_EQ(avg.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(avg.message(), HasSubstr("avg"));
}

TEST(SelfCommunicator, ExchangeCopiesEachSendIntoItsReceive) {
  SelfCommunicator self;
  const uint8_t a[3] = {1, 2, 3}, b[2] = {9, 8};
  uint8_t ra[3] = {}, rb[2] = {};
  ASSERT_TRUE(self.Exchange({{0, a, 3}, {0, b, 2}}, {{0, ra, 3}, {0, rb, 2}}).ok());
  EXPECT_THAT(ra, ::testing::ElementsAre(1, 2, 3));
  EXPECT_THAT(rb, ::testing::ElementsAre(9, 8));
  const absl::Status swapped = self.Exchange({{0, a, 3}, {0, b, 2}}, {{0, rb, 2}, {0, ra, 3}});
  EXPECT_EQ(swapped.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(swapped.message(), HasSubstr("exchange (self, rank 0 of 1): receive from self 0"));
  EXPECT_EQ(self.Exchange({{1, a, 3}}, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SelfCommunicator, IsAProcessGroupsCpuCommunicator) {
  auto self = std::make_unique<SelfCommunicator>();
  Communicator* self_ptr = self.get();
  absl::StatusOr<ProcessGroup> group = ProcessGroup::Create(std::move(self), nullptr);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(&group->metadata(), self_ptr);
  EXPECT_EQ(*group->For(Device::CPU()), self_ptr);
  EXPECT_EQ(group->size(), 1);
}

// The stubs of a backend the build lacks (comm/*_nompi.cc, *_nonccl.cc): every way to make
// one of its communicators is Unavailable, naming the call. Skipped where both backends
// are built (their constructors need mpiexec or a GPU).
TEST(BackendStubs, ConstructorsOfABackendNotBuiltAreUnavailable) {
  if (SDRT_BUILT_WITH_MPI && SDRT_BUILT_WITH_NCCL) GTEST_SKIP() << "both backends are built";
  auto expect_unavailable = [](const absl::Status& status, absl::string_view call,
                               absl::string_view backend) {
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat(call, ": sdrt was built without ", backend)));
  };
  if (!SDRT_BUILT_WITH_MPI) {
    expect_unavailable(MpiCommunicator::World().status(), "MpiCommunicator::World", "MPI");
    const int fake = 0;
    expect_unavailable(MpiCommunicator::Duplicate(&fake).status(), "MpiCommunicator::Duplicate",
                       "MPI");
    expect_unavailable(MpiCommunicator::DuplicateFortran(0).status(),
                       "MpiCommunicator::DuplicateFortran", "MPI");
  }
  if (!SDRT_BUILT_WITH_NCCL) {
    expect_unavailable(NcclUniqueId::Generate().status(), "NcclUniqueId::Generate", "NCCL");
    expect_unavailable(NcclCommunicator::Create(0, 1, 0, NcclUniqueId()).status(),
                       "NcclCommunicator::Create", "NCCL");
    SelfCommunicator self;
    expect_unavailable(NcclCommunicator::CreateFromCommunicator(self, 0).status(),
                       "NcclCommunicator::CreateFromCommunicator", "NCCL");
    int fake = 0;
    expect_unavailable(NcclCommunicator::Adopt(&fake, 0, 1, 0, {}).status(),
                       "NcclCommunicator::Adopt", "NCCL");
  }
}

}  // namespace
}  // namespace sdrt
