// The distributed verbs that need no other process, in every build (label cpu; the build
// without CUDA, MPI and NCCL runs them too): LoadStateDict and DistributeStateDict without a
// communicator, one process playing each rank of a 3-rank mesh in turn (LoadOptions::rank,
// DistributeOptions::rank), every piece compared byte for byte with DistributeTensor of the
// full tensor; and the reshard (PlanReshard, ExecuteReshard, ReshardStateDict) over a
// SelfCommunicator, a world of one.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/self_communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kRanks = 3;

struct Case {
  std::string name;
  IntVector shape;
  DType dtype;
  const char* placements;
};

// Uneven and empty pieces over 3 ranks (7 rows, 4 columns, 2 elements), a strided shard.
std::vector<Case> Cases() {
  return {
      {"fsdp.w", {7, 5}, DType::kFloat32, "[S(0)]"},
      {"tp.col", {3, 4}, DType::kBFloat16, "[S(1)]"},
      {"tiny", {2}, DType::kInt64, "[S(0)]"},
      {"strided", {8, 3}, DType::kUInt8, "[_S(0, 2)]"},
      {"replicated", {5}, DType::kFloat64, "[R]"},
  };
}

std::string Bytes(const Tensor& t) {
  const Tensor packed = *t.Contiguous();
  return std::string(static_cast<const char*>(packed.data_ptr()), packed.nbytes());
}

std::shared_ptr<const DeviceMesh> Mesh(int64_t ranks) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create(IntVector{ranks}));
}

class NoPeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const Case& c : Cases()) {
      fulls_.push_back(test::FiniteBytes(c.shape, c.dtype, static_cast<int64_t>(fulls_.size())));
    }
  }

  // Rank `rank`'s local state dict: every case a DTensor over kRanks ranks, made by `make`
  // (its local shape given), and "plain", a plain tensor of 3 int32 zeros.
  template <typename MakeLocal>
  Map Locals(int rank, MakeLocal make) const {
    Map local;
    for (const Case& c : Cases()) {
      const std::vector<Placement> p = *ParsePlacements(c.placements);
      const IntVector shape = *ComputeLocalShape(c.shape, *Mesh(kRanks), p, rank);
      local.Set(c.name, Value(*DTensor::Make(make(shape, c.dtype), Mesh(kRanks), p, c.shape)));
    }
    local.Set("plain", Value(*Tensor::Zeros({3}, DType::kInt32)));
    return local;
  }

  // Each case's piece in `local` is rank `rank`'s piece of its full tensor.
  void ExpectPieces(const Map& local, int rank) const {
    const std::vector<Case> cases = Cases();
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(absl::StrCat(cases[i].name, " ", cases[i].placements, " rank ", rank));
      const DTensor want =
          *DistributeTensor(fulls_[i], Mesh(kRanks), *ParsePlacements(cases[i].placements), rank);
      const Value* got = local.Find(cases[i].name);
      ASSERT_NE(got, nullptr);
      ASSERT_EQ(got->kind(), ValueKind::kDTensor);
      EXPECT_EQ(got->as_dtensor().local().shape(), want.local().shape());
      EXPECT_EQ(Bytes(got->as_dtensor().local()), Bytes(want.local()));
    }
  }

  std::vector<Tensor> fulls_;
};

TEST_F(NoPeerTest, LoadStateDictWithoutACommunicatorReadsEachRanksPieces) {
  const std::string path = absl::StrCat(test::TestTmpRoot(), "/no_peer_test.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  const std::vector<Case> cases = Cases();
  for (size_t i = 0; i < cases.size(); ++i) tensors.emplace_back(cases[i].name, fulls_[i]);
  const Tensor plain = test::FiniteBytes({3}, DType::kInt32, 9);
  tensors.emplace_back("plain", plain);
  tensors.emplace_back("only.in.file", test::FiniteBytes({2}, DType::kFloat16, 10));
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(path);
  ASSERT_TRUE(source.ok()) << source.status();

  for (int rank = 0; rank < kRanks; ++rank) {
    for (bool meta : {true, false}) {
      SCOPED_TRACE(absl::StrCat("rank ", rank, meta ? ", meta locals" : ", preallocated"));
      Map local = Locals(rank, [&](const IntVector& shape, DType dtype) {
        return meta ? *Tensor::Meta(shape, dtype) : *Tensor::Zeros(shape, dtype);
      });
      local.Set("only.in.local", Value(*Tensor::Zeros({4}, DType::kFloat32)));
      LoadOptions options;
      options.rank = rank;
      options.staging_bytes = 4096;
      absl::StatusOr<LoadResult> result = LoadStateDict(*source, local, options);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_THAT(result->missing_keys, ElementsAre("only.in.local"));
      EXPECT_THAT(result->unexpected_keys, ElementsAre("only.in.file"));
      ExpectPieces(local, rank);
      EXPECT_EQ(Bytes(local.Find("plain")->as_tensor()), Bytes(plain));
    }
  }

  // Without a communicator the rank must be given.
  Map local =
      Locals(0, [](const IntVector& shape, DType dtype) { return *Tensor::Meta(shape, dtype); });
  const absl::StatusOr<LoadResult> no_rank = LoadStateDict(*source, local, LoadOptions());
  EXPECT_EQ(no_rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_rank.status().message(), HasSubstr("rank -1 must be >= 0"));
}

TEST_F(NoPeerTest, DistributeStateDictWithoutACommunicatorCutsEachRanksPieces) {
  Map full;
  const std::vector<Case> cases = Cases();
  for (size_t i = 0; i < cases.size(); ++i) full.Set(cases[i].name, Value(fulls_[i]));
  const Tensor plain = test::FiniteBytes({3}, DType::kInt32, 9);
  full.Set("plain", Value(plain));
  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    Map local = Locals(
        rank, [](const IntVector& shape, DType dtype) { return *Tensor::Zeros(shape, dtype); });
    DistributeOptions options;
    options.rank = rank;
    ASSERT_TRUE(DistributeStateDict(full, local, options).ok());
    ExpectPieces(local, rank);
    EXPECT_EQ(Bytes(local.Find("plain")->as_tensor()), Bytes(plain));
  }

  // A local DTensor the full state dict lacks, and no rank: InvalidArgument.
  Map local =
      Locals(1, [](const IntVector& shape, DType dtype) { return *Tensor::Zeros(shape, dtype); });
  local.Set("extra", Value(*DTensor::Make(*Tensor::Zeros({1}, DType::kFloat32), Mesh(kRanks),
                                          *ParsePlacements("[S(0)]"), IntVector{3})));
  DistributeOptions options;
  options.rank = 1;
  const absl::Status missing = DistributeStateDict(full, local, options);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("extra"));
  const absl::Status no_rank = DistributeStateDict(full, local, DistributeOptions());
  EXPECT_EQ(no_rank.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_rank.message(), HasSubstr("give this process's rank or a communicator"));
}

// A repeated call reuses the route of an equal one (route_cache.h); the same names in
// another layout (placements, a mesh of other ranks, a ShardedTensor's boxes) must get
// their own pieces, each call twice.
TEST_F(NoPeerTest, DistributeStateDictAgainInAnotherLayoutUnderTheSameNames) {
  const Tensor w = test::FiniteBytes({6, 4}, DType::kFloat32, 3);
  Map full;
  full.Set("w", Value(w));
  const int rank = 1;
  const auto reversed = std::make_shared<const DeviceMesh>(
      *DeviceMesh::Create(IntVector{kRanks}, std::vector<int64_t>{2, 1, 0}));
  for (const auto& mesh : {Mesh(kRanks), reversed}) {
    for (const char* text : {"[S(0)]", "[S(1)]", "[R]", "[_S(0, 2)]", "[S(0)]"}) {
      for (int repeat = 0; repeat < 2; ++repeat) {
        SCOPED_TRACE(absl::StrCat(mesh->ToString(), " ", text, " call ", repeat));
        const std::vector<Placement> p = *ParsePlacements(text);
        const DTensor want = *DistributeTensor(w, mesh, p, rank);
        Map local;
        local.Set("w", Value(*DTensor::Make(*Tensor::Meta(want.local().shape(), DType::kFloat32),
                                            mesh, p, w.shape())));
        DistributeOptions options;
        options.rank = rank;
        ASSERT_TRUE(DistributeStateDict(full, local, options).ok());
        EXPECT_EQ(Bytes(local.Find("w")->as_dtensor().local()), Bytes(want.local()));
      }
    }
  }
  // A ShardedTensor of this rank's rows [a, b), under the same name.
  for (const auto& [a, b] : {std::pair<int64_t, int64_t>{0, 3}, {2, 6}, {0, 3}}) {
    SCOPED_TRACE(absl::StrCat("rows [", a, ", ", b, ")"));
    const ShardMetadata m{{a, 0}, {b - a, 4}, *ParseRemoteDevice("rank:1/cpu")};
    Map local;
    local.Set("w", Value(*ShardedTensor::Make({6, 4}, DType::kFloat32, {m},
                                              {{*Tensor::Zeros({b - a, 4}, DType::kFloat32), m}})));
    DistributeOptions options;
    options.rank = rank;
    ASSERT_TRUE(DistributeStateDict(full, local, options).ok());
    const Tensor want = *w.Narrow(0, a, b - a);
    EXPECT_EQ(Bytes(local.Find("w")->as_sharded().local_shards()[0].tensor), Bytes(want));
  }
}

// A full state dict that holds one dotted path twice ("a.b" and "a" -> "b"): both full
// tensors go to the one local leaf; the second, of another dtype, must be refused as the
// first would be, not copied at its own element size into the leaf's shards.
TEST_F(NoPeerTest, DistributeStateDictRefusesASecondFullTensorOfAnotherDtype) {
  Map inner;
  inner.Set("b", Value(test::FiniteBytes({6, 4}, DType::kFloat64, 5)));
  Map full;
  full.Set("a.b", Value(test::FiniteBytes({6, 4}, DType::kFloat32, 4)));
  full.Set("a", Value(std::move(inner)));
  const ShardMetadata m{{0, 0}, {3, 4}, *ParseRemoteDevice("rank:0/cpu")};
  for (const bool sharded : {true, false}) {
    SCOPED_TRACE(sharded ? "ShardedTensor" : "DTensor");
    Map local;
    if (sharded) {
      local.Set("a.b", Value(*ShardedTensor::Make({6, 4}, DType::kFloat32, {m},
                                                  {{*Tensor::Zeros({3, 4}, DType::kFloat32), m}})));
    } else {
      local.Set("a.b", Value(*DTensor::Make(*Tensor::Meta({2, 4}, DType::kFloat32), Mesh(kRanks),
                                            *ParsePlacements("[S(0)]"), IntVector{6, 4})));
    }
    DistributeOptions options;
    options.rank = 0;
    const absl::Status status = DistributeStateDict(full, local, options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("float64"));
  }
}

// A world of one: the source held as Shard(0) and a Partial(sum) over one rank, the
// destination Replicate and Shard(1); every byte a local copy.
TEST_F(NoPeerTest, ReshardOverASelfCommunicator) {
  SelfCommunicator self;
  const Tensor w = test::FiniteBytes({6, 4}, DType::kFloat32, 1);
  const Tensor b = test::FiniteBytes({5}, DType::kInt64, 2);
  Map source;
  source.Set("w", Value(*DistributeTensor(w, Mesh(1), *ParsePlacements("[S(0)]"), 0)));
  source.Set("b", Value(*DTensor::Make(b, Mesh(1), *ParsePlacements("[P(sum)]"), b.shape())));
  auto destination = [&] {
    Map d;
    d.Set("w", Value(*DTensor::Make(*Tensor::Zeros({6, 4}, DType::kFloat32), Mesh(1),
                                    *ParsePlacements("[R]"), IntVector{6, 4})));
    d.Set("b", Value(*DTensor::Make(*Tensor::Zeros({5}, DType::kInt64), Mesh(1),
                                    *ParsePlacements("[S(0)]"), IntVector{5})));
    return d;
  };
  ReshardOptions options;
  options.comm = &self;
  absl::StatusOr<ReshardPlan> plan = PlanReshard(source, destination(), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (int step = 0; step < 2; ++step) {
    Map out = destination();
    TransferStats stats;
    ASSERT_TRUE(ExecuteReshard(*plan, source, out, &stats).ok()) << step;
    EXPECT_EQ(stats.wire_bytes, 0);
    EXPECT_EQ(Bytes(out.Find("w")->as_dtensor().local()), Bytes(w));
    EXPECT_EQ(Bytes(out.Find("b")->as_dtensor().local()), Bytes(b));
  }
  Map once = destination();
  ASSERT_TRUE(ReshardStateDict(source, once, options).ok());
  EXPECT_EQ(Bytes(once.Find("w")->as_dtensor().local()), Bytes(w));

  // Without a communicator the reshard refuses (it is collective).
  const absl::StatusOr<ReshardPlan> no_comm = PlanReshard(source, destination(), ReshardOptions());
  EXPECT_EQ(no_comm.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace sdrt
