// DTensor sharding arithmetic (tensor/sharding/sharding.h): docs/SEMANTICS.md 1.3's chunk
// table, 1.4's _StridedShard examples, 1.5's worked examples, case-004 and case-006 directly, and
// every row of PyTorch's own compute_local_shape_and_global_offset output
// (tests/data/sharding/local_shape_golden.json, from tests/golden/make_sharding_golden.py).
#include "sdrt/tensor/sharding/sharding.h"

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace sdrt {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const Placement kR = Placement::Replicate();
Placement S(int d) { return Placement::Shard(d); }
Placement SS(int d, int64_t sf) { return Placement::StridedShard(d, sf); }

DeviceMesh Mesh(std::vector<int64_t> shape) { return *DeviceMesh::Create(shape); }

LocalShardInfo Info(IntVector shape, const DeviceMesh& mesh, std::vector<Placement> placements,
                    int64_t rank) {
  absl::StatusOr<LocalShardInfo> info =
      ComputeLocalShapeAndGlobalOffset(shape, mesh, placements, rank);
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? *std::move(info) : LocalShardInfo{};
}

// (local size, offset) along dim 0 for every rank of `mesh`, rank order.
std::vector<std::pair<int64_t, int64_t>> Dim0(IntVector shape, const DeviceMesh& mesh,
                                              std::vector<Placement> placements) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t rank = 0; rank < mesh.num_ranks(); ++rank) {
    LocalShardInfo info = Info(shape, mesh, placements, rank);
    out.emplace_back(info.local_shape[0], info.global_offset[0]);
  }
  return out;
}
using P = std::pair<int64_t, int64_t>;

TEST(Sharding, ChunkTableOfSpec13) {
  struct Row {
    int64_t n, k;
    std::vector<int64_t> sizes, offsets;
  };
  const std::vector<Row> rows = {{10, 4, {3, 3, 3, 1}, {0, 3, 6, 9}},
                                 {3, 4, {1, 1, 1, 0}, {0, 1, 2, 3}},
                                 {5, 4, {2, 2, 1, 0}, {0, 2, 4, 5}},
                                 {6, 4, {2, 2, 2, 0}, {0, 2, 4, 6}},
                                 {9, 8, {2, 2, 2, 2, 1, 0, 0, 0}, {0, 2, 4, 6, 8, 9, 9, 9}},
                                 {0, 3, {0, 0, 0}, {0, 0, 0}},
                                 {8, 4, {2, 2, 2, 2}, {0, 2, 4, 6}}};
  for (const Row& row : rows) {
    std::vector<int64_t> sizes, offsets;
    for (int64_t r = 0; r < row.k; ++r) {
      sizes.push_back(ShardPiece(row.n, row.k, r).size);
      offsets.push_back(ShardPiece(row.n, row.k, r).offset);
    }
    EXPECT_EQ(sizes, row.sizes) << row.n << " over " << row.k;
    EXPECT_EQ(offsets, row.offsets) << row.n << " over " << row.k;
  }
  EXPECT_EQ(ChunkSize(10, 4), 3);
  EXPECT_EQ(ChunkSize(8, 4), 2);
  EXPECT_EQ(ChunkSize(0, 4), 0);
  EXPECT_EQ(ChunkSize(INT64_MAX, 2), INT64_MAX / 2 + 1);
  // A piece near the end of a huge dim: int64 throughout.
  EXPECT_EQ(ShardPiece(int64_t{1} << 40, 3, 2).offset, 2 * ChunkSize(int64_t{1} << 40, 3));
}

TEST(Sharding, StridedShardExamplesOfSpec14) {
  EXPECT_THAT(StridedShardIndices(8, 4, 2, 0), ElementsAre(0, 4));
  EXPECT_THAT(StridedShardIndices(8, 4, 2, 3), ElementsAre(3, 7));
  EXPECT_THAT(StridedShardIndices(9, 4, 2, 0), ElementsAre(0, 1, 5));
  EXPECT_THAT(StridedShardIndices(9, 4, 2, 1), ElementsAre(2, 3, 6));
  EXPECT_THAT(StridedShardIndices(9, 4, 2, 2), ElementsAre(4, 7));
  EXPECT_THAT(StridedShardIndices(9, 4, 2, 3), ElementsAre(8));
  // case-006: uneven _StridedShard as PyTorch computes it today.
  EXPECT_THAT(StridedShardIndices(5, 2, 2, 0), ElementsAre(0, 1, 3));
  EXPECT_THAT(StridedShardIndices(5, 2, 2, 1), ElementsAre(2, 4));
  // split_factor 1 is Shard.
  EXPECT_THAT(StridedShardIndices(10, 4, 1, 3), ElementsAre(9));
  for (int64_t n : {0, 1, 5, 9, 13}) {
    for (int64_t sf : {1, 2, 3, 5}) {
      int64_t total = 0;
      for (int64_t r = 0; r < 4; ++r) {
        int64_t size = StridedShardSize(n, 4, sf, r);
        EXPECT_EQ(size, static_cast<int64_t>(StridedShardIndices(n, 4, sf, r).size()));
        total += size;
      }
      EXPECT_EQ(total, n) << "n=" << n << " sf=" << sf;
    }
  }
}

// The closed-form StridedShardSize against its definition (the sum over the split_factor
// outer pieces of their ShardPiece over k), split factors above n included.
TEST(Sharding, StridedShardSizeIsTheSumOverOuterPieces) {
  for (int64_t n = 0; n <= 40; ++n) {
    for (int64_t k = 1; k <= 6; ++k) {
      for (int64_t sf = 1; sf <= 50; ++sf) {
        for (int64_t r = 0; r < k; ++r) {
          int64_t expected = 0;
          for (int64_t j = 0; j < sf; ++j) {
            expected += ShardPiece(ShardPiece(n, sf, j).size, k, r).size;
          }
          ASSERT_EQ(StridedShardSize(n, k, sf, r), expected)
              << "n=" << n << " k=" << k << " sf=" << sf << " r=" << r;
          ASSERT_EQ(static_cast<int64_t>(StridedShardIndices(n, k, sf, r).size()), expected);
        }
      }
    }
  }
  // O(1) for the largest split factor allowed, on a large dim.
  EXPECT_EQ(StridedShardSize(int64_t{1} << 40, 2, kMaxSplitFactor, 1), int64_t{1} << 39);
}

// Issue 12 finding 3: a split factor of 9e18 (from index.json or PLAN.json) looped that
// many times; it is refused before any arithmetic, naming the bound.
TEST(Sharding, SplitFactorAboveTheCapIsRefused) {
  const DeviceMesh mesh = Mesh({2, 2});
  for (int64_t sf : {int64_t{9000000000000000000}, kMaxSplitFactor + 1, int64_t{0}}) {
    const std::vector<Placement> placements = {SS(0, sf), S(0)};
    absl::StatusOr<IntVector> local = ComputeLocalShape({8, 4}, mesh, placements, 0);
    EXPECT_EQ(local.status().code(), absl::StatusCode::kInvalidArgument) << sf;
    EXPECT_THAT(local.status().message(),
                AllOf(HasSubstr(absl::StrCat("split factor ", sf)), HasSubstr("[1, 1048576]")));
    EXPECT_EQ(ComputeLocalShapeAndGlobalOffset({8, 4}, mesh, placements, 0).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // Split factor 2^20 on a dim of 8: eight outer pieces of one index, all on coordinate 0.
  EXPECT_EQ(*ComputeLocalShape({8, 4}, mesh, {SS(0, kMaxSplitFactor), S(0)}, 0), IntVector({4, 4}));
}

TEST(Sharding, StridedShardOf2dTensorTakesColumns) {
  LocalShardInfo r0 = Info({2, 4}, Mesh({2}), {SS(1, 2)}, 0);
  EXPECT_THAT(r0.local_shape, ElementsAre(2, 2));
  EXPECT_THAT(r0.global_offset, ElementsAre(0, 0));
  EXPECT_FALSE(r0.is_slice);
  EXPECT_THAT(r0.index_lists[0], IsEmpty());
  EXPECT_THAT(r0.index_lists[1], ElementsAre(0, 2));
  EXPECT_THAT(OwnedIndices(r0, 0), ElementsAre(0, 1));
  EXPECT_THAT(Info({2, 4}, Mesh({2}), {SS(1, 2)}, 1).index_lists[1], ElementsAre(1, 3));
}

TEST(Sharding, WorkedExamplesOfSpec15) {
  EXPECT_THAT(Dim0({10}, Mesh({4}), {S(0)}), ElementsAre(P{3, 0}, P{3, 3}, P{3, 6}, P{1, 9}));
  EXPECT_THAT(Dim0({3}, Mesh({4}), {S(0)}), ElementsAre(P{1, 0}, P{1, 1}, P{1, 2}, P{0, 3}));
  DeviceMesh m22 = Mesh({2, 2});
  EXPECT_THAT(Dim0({8, 4}, m22, {S(0), S(0)}), ElementsAre(P{2, 0}, P{2, 2}, P{2, 4}, P{2, 6}));
  EXPECT_THAT(Dim0({5, 4}, m22, {S(0), S(0)}), ElementsAre(P{2, 0}, P{1, 2}, P{1, 3}, P{1, 4}));
  EXPECT_THAT(Dim0({3, 4}, m22, {S(0), S(0)}), ElementsAre(P{1, 0}, P{1, 1}, P{1, 2}, P{0, 3}));
  const std::vector<IntVector> shapes = {{3, 2}, {3, 1}, {2, 2}, {2, 1}};
  const std::vector<IntVector> offsets = {{0, 0}, {0, 2}, {3, 0}, {3, 2}};
  for (int64_t rank = 0; rank < 4; ++rank) {
    LocalShardInfo info = Info({5, 3}, m22, {S(0), S(1)}, rank);
    EXPECT_EQ(info.local_shape, shapes[rank]);
    EXPECT_EQ(info.global_offset, offsets[rank]);
    EXPECT_TRUE(info.is_slice);
  }
  EXPECT_THAT(Dim0({8}, m22, {SS(0, 2), S(0)}), ElementsAre(P{2, 0}, P{2, 4}, P{2, 2}, P{2, 6}));
  EXPECT_THAT(
      Dim0({15, 5}, Mesh({4, 2}), {SS(0, 2), S(0)}),
      ElementsAre(P{2, 0}, P{2, 8}, P{2, 2}, P{2, 10}, P{2, 4}, P{2, 12}, P{2, 6}, P{1, 14}));
  // mesh (4, 2), [S(0), _S(0, 2)], (18, 2): non-contiguous shards.
  DeviceMesh m42 = Mesh({4, 2});
  const std::vector<Placement> s_ss = {S(0), SS(0, 2)};
  EXPECT_THAT(Info({18, 2}, m42, s_ss, 0).index_lists[0], ElementsAre(0, 1, 3));
  LocalShardInfo r1 = Info({18, 2}, m42, s_ss, 1);
  EXPECT_THAT(r1.local_shape, ElementsAre(2, 2));
  EXPECT_THAT(r1.global_offset, ElementsAre(2, 0));
  EXPECT_THAT(r1.index_lists[0], ElementsAre(2, 4));
  EXPECT_FALSE(r1.is_slice);
  EXPECT_THAT(Info({18, 2}, m42, s_ss, 6).index_lists[0], ElementsAre(15, 17));
  LocalShardInfo r7 = Info({18, 2}, m42, s_ss, 7);
  EXPECT_THAT(r7.local_shape, ElementsAre(1, 2));
  EXPECT_THAT(r7.global_offset, ElementsAre(16, 0));
  EXPECT_TRUE(r7.is_slice);
}

TEST(Sharding, EmptyShardsReportTheGlobalDimSize) {
  // docs/SEMANTICS.md 9 item 8: mesh (30, 8), [_S(0, 8), S(0)], (4096, 4096).
  DeviceMesh mesh = Mesh({30, 8});
  for (int64_t tp : {0, 5}) {
    LocalShardInfo dp3 = Info({4096, 4096}, mesh, {SS(0, 8), S(0)}, 3 * 8 + tp);
    EXPECT_THAT(dp3.local_shape, ElementsAre(18, 4096));
    EXPECT_THAT(dp3.global_offset, ElementsAre(512 * tp + 18 * 3, 0));
    EXPECT_TRUE(dp3.is_slice);
    EXPECT_THAT(Info({4096, 4096}, mesh, {SS(0, 8), S(0)}, 28 * 8 + tp).local_shape,
                ElementsAre(8, 4096));
    LocalShardInfo dp29 = Info({4096, 4096}, mesh, {SS(0, 8), S(0)}, 29 * 8 + tp);
    EXPECT_THAT(dp29.local_shape, ElementsAre(0, 4096));
    EXPECT_THAT(dp29.global_offset, ElementsAre(4096, 0));
  }
  // Once empty, a dim stays empty at the global size through later shards.
  LocalShardInfo last = Info({3, 4}, Mesh({4, 2}), {S(0), S(0)}, 7);
  EXPECT_THAT(last.local_shape, ElementsAre(0, 4));
  EXPECT_THAT(last.global_offset, ElementsAre(3, 0));
  EXPECT_THAT(OwnedIndices(last, 0), IsEmpty());
}

TEST(Sharding, RankNotInMeshGetsPyTorchsEmptyAnswer) {
  DeviceMesh mesh = *DeviceMesh::Create({2}, {4, 6});
  LocalShardInfo info = Info({8, 3}, mesh, {S(0)}, 5);
  EXPECT_THAT(info.local_shape, ElementsAre(0));
  EXPECT_THAT(info.global_offset, IsEmpty());
  EXPECT_THAT(info.index_lists, IsEmpty());
  EXPECT_THAT(*ComputeLocalShape({8, 3}, mesh, {S(0)}, 5), ElementsAre(0));
  EXPECT_THAT(Info({8, 3}, mesh, {S(0)}, 6).global_offset, ElementsAre(4, 0));
}

TEST(Sharding, RejectsBadArguments) {
  DeviceMesh mesh = Mesh({2, 2});
  absl::StatusOr<LocalShardInfo> count = ComputeLocalShapeAndGlobalOffset({4}, mesh, {S(0)}, 0);
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(count.status().message(), HasSubstr("1 placements [S(0)] for a 2-d mesh"));
  absl::StatusOr<IntVector> dim = ComputeLocalShape({4, 4}, mesh, {S(0), S(2)}, 0);
  EXPECT_EQ(dim.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dim.status().message(), HasSubstr("S(2) shards dim 2"));
  absl::StatusOr<LocalShardInfo> negative =
      ComputeLocalShapeAndGlobalOffset({4, -1}, mesh, {S(0), kR}, 0);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument) << negative.status();
  EXPECT_THAT(negative.status().message(), HasSubstr("negative global shape [4, -1]"));
  const absl::Status split = ComputeLocalShape({4}, Mesh({2}), {SS(0, 0)}, 0).status();
  EXPECT_EQ(split.code(), absl::StatusCode::kInvalidArgument) << split;
  EXPECT_THAT(split.message(), HasSubstr("split factor 0, outside [1, 1048576]"));
  const absl::Status placements = MeshDimsToReplicate(mesh, {kR}).status();
  EXPECT_EQ(placements.code(), absl::StatusCode::kInvalidArgument) << placements;
  EXPECT_THAT(placements.message(), HasSubstr("1 placements [R] for a 2-d mesh [2, 2]"));
}

TEST(Sharding, ValidateLocalShapeNamesExpectedAndActual) {
  // case-004: (2, 14), [S(1)] over 4 ranks, locals 2, 3, 4, 5 wide; chunks are 4, 4, 4, 2.
  DeviceMesh mesh = Mesh({4});
  for (int64_t rank = 0; rank < 4; ++rank) {
    absl::Status s = ValidateLocalShape({2, 2 + rank}, {2, 14}, mesh, {S(1)}, rank, "w");
    if (rank == 2) {
      EXPECT_TRUE(s.ok()) << s;
      continue;
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("'w': rank " + std::to_string(rank)));
    EXPECT_THAT(s.message(), HasSubstr("holds local shape [2, " + std::to_string(2 + rank)));
    EXPECT_THAT(s.message(),
                HasSubstr(rank == 3 ? "needs local shape [2, 2]" : "needs local shape [2, 4]"));
  }
  EXPECT_TRUE(ValidateLocalShape({2, 2}, {2, 14}, mesh, {S(1)}, 3).ok());
  DeviceMesh sub = *DeviceMesh::Create({2}, {0, 1});
  EXPECT_TRUE(ValidateLocalShape({0}, {4}, sub, {S(0)}, 2).ok());
  const absl::Status outside = ValidateLocalShape({1}, {4}, sub, {S(0)}, 2);
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument) << outside;
  EXPECT_THAT(outside.message(), HasSubstr("must hold no elements"));
  const absl::Status dim = ValidateLocalShape({2}, {4}, sub, {S(1)}, 0);
  EXPECT_EQ(dim.code(), absl::StatusCode::kInvalidArgument) << dim;
  EXPECT_THAT(dim.message(), HasSubstr("S(1) shards dim 1 of a tensor of global shape [4]"));
}

TEST(Sharding, MeshDimsToReplicateOrder) {
  DeviceMesh m222 = Mesh({2, 2, 2});
  EXPECT_EQ(NumShards(m222, {S(0), kR, S(1)}), 4);
  EXPECT_THAT(*MeshDimsToReplicate(m222, {S(0), kR, Placement::Partial()}), ElementsAre(2, 0));
  EXPECT_THAT(*MeshDimsToReplicate(m222, {Placement::Partial(), kR, Placement::Partial()}),
              ElementsAre(0, 2));
  // A shard on a size-1 mesh dim is one shard: first to last, size-1 dims skipped.
  DeviceMesh m12 = Mesh({1, 2});
  EXPECT_EQ(NumShards(m12, {S(0), Placement::Partial()}), 1);
  EXPECT_THAT(*MeshDimsToReplicate(m12, {S(0), Placement::Partial()}), ElementsAre(1));
  EXPECT_THAT(*MeshDimsToReplicate(m222, {kR, kR, kR}), IsEmpty());
}

IntVector ToInts(const nlohmann::json& j) {
  IntVector out;
  for (const nlohmann::json& v : j) out.push_back(v.get<int64_t>());
  return out;
}

TEST(ShardingGolden, MatchesPyTorchForEveryRow) {
  std::ifstream in(std::string(SDRT_TEST_DATA_DIR) + "/sharding/local_shape_golden.json");
  ASSERT_TRUE(in.good());
  nlohmann::json golden = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(golden.is_object());
  const nlohmann::json& rows = golden["rows"];
  ASSERT_GE(rows.size(), 300u);
  std::set<std::string> sources;
  int non_slices = 0;
  for (const nlohmann::json& row : rows) {
    IntVector shape = ToInts(row["global_shape"]);
    DeviceMesh mesh =
        Mesh(std::vector<int64_t>(row["mesh_shape"].begin(), row["mesh_shape"].end()));
    std::vector<Placement> placements = *ParsePlacements(row["placements"].get<std::string>());
    int64_t rank = row["rank"].get<int64_t>();
    SCOPED_TRACE(row.dump());
    sources.insert(row["source"].get<std::string>());
    LocalShardInfo info = Info(shape, mesh, placements, rank);
    EXPECT_EQ(info.local_shape, ToInts(row["local_shape"]));
    EXPECT_EQ(info.global_offset, ToInts(row["global_offset"]));
    EXPECT_EQ(*ComputeLocalShape(shape, mesh, placements, rank), info.local_shape);
    EXPECT_EQ(info.is_slice, !row.contains("index_lists"));
    for (size_t d = 0; d < info.index_lists.size(); ++d) {
      const nlohmann::json* list = row.contains("index_lists") ? &row["index_lists"][d] : nullptr;
      if (list == nullptr || list->is_null()) {
        EXPECT_THAT(info.index_lists[d], IsEmpty()) << "dim " << d;
      } else {
        EXPECT_THAT(info.index_lists[d], ElementsAreArray(list->get<std::vector<int64_t>>()))
            << "dim " << d;
      }
    }
    non_slices += info.is_slice ? 0 : 1;
  }
  EXPECT_GT(non_slices, 100);
  for (const char* source : {"spec1.3", "spec1.4", "spec1.5", "spec9.8", "spec9.14", "spec9.18",
                             "spec9.23", "case-006", "random"}) {
    EXPECT_EQ(sources.count(source), 1u) << source;
  }
}

}  // namespace
}  // namespace sdrt
