// Region copies (tensor/sharding/region_copy.h) on the CPU: runs of owned global indices made from
// the sharding arithmetic (slices, uneven and empty shards, _StridedShard index lists) and
// from ShardedTensor boxes, clipped to boxes, and copied both ways between strided views.
// Every copy is checked element by element against index arithmetic done here.
#include "sdrt/tensor/sharding/region_copy.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using test::Arange;

IndexRun IR(int64_t global, int64_t local, int64_t length) { return {global, local, length}; }

LocalShardInfo Info(IntVector shape, IntVector mesh_shape, const char* placements, int64_t rank) {
  const DeviceMesh mesh = *DeviceMesh::Create(mesh_shape);
  absl::StatusOr<LocalShardInfo> info =
      ComputeLocalShapeAndGlobalOffset(shape, mesh, *ParsePlacements(placements), rank);
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? *std::move(info) : LocalShardInfo{};
}

// The global indices the runs of one dim name, in local order (runs sorted by local).
std::vector<int64_t> Expand(const IndexRuns& runs) {
  std::vector<int64_t> indices;
  for (const IndexRun& r : runs) {
    EXPECT_EQ(r.local, static_cast<int64_t>(indices.size())) << "runs are in local order";
    for (int64_t i = 0; i < r.length; ++i) indices.push_back(r.global + i);
  }
  return indices;
}

// Element `index` of a float32 CPU tensor of any strides.
float At(const Tensor& t, IntSpan index) {
  int64_t offset = 0;
  for (int d = 0; d < t.dim(); ++d) offset += index[d] * t.strides()[d];
  return t.data<float>()[offset];
}

TEST(RegionCopy, OwnedRunsOfASliceAreOneRunPerDim) {
  // 10 rows over 4 ranks: 3, 3, 3, 1 rows.
  const LocalShardInfo info = Info({10, 3}, {4}, "[S(0)]", 1);
  const ShardRuns runs = OwnedRuns(info);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_THAT(runs[0], ElementsAre(IR(3, 0, 3)));
  EXPECT_THAT(runs[1], ElementsAre(IR(0, 0, 3)));
  EXPECT_EQ(RunsNumel(runs), 9);
}

TEST(RegionCopy, OwnedRunsOfAnEmptyShardHaveNoRunOnItsDim) {
  // case-001: 5 rows over 4 ranks, rank 3 holds none (offset 5).
  const ShardRuns runs = OwnedRuns(Info({5, 10}, {4}, "[S(0)]", 3));
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_THAT(runs[0], IsEmpty());
  EXPECT_THAT(runs[1], ElementsAre(IR(0, 0, 10)));
  EXPECT_EQ(RunsNumel(runs), 0);
}

TEST(RegionCopy, OwnedRunsOfStridedShardFollowTheIndexList) {
  // docs/SEMANTICS.md 1.4: n=5, k=2, sf=2 -> rank 0 holds [0, 1, 3], rank 1 [2, 4].
  EXPECT_THAT(OwnedRuns(Info({5}, {2}, "[_S(0, 2)]", 0))[0], ElementsAre(IR(0, 0, 2), IR(3, 2, 1)));
  EXPECT_THAT(OwnedRuns(Info({5}, {2}, "[_S(0, 2)]", 1))[0], ElementsAre(IR(2, 0, 1), IR(4, 1, 1)));
  // On dim 1 of a 2-D tensor, dim 0 stays one run.
  const ShardRuns runs = OwnedRuns(Info({3, 8}, {2}, "[_S(1, 2)]", 1));
  EXPECT_THAT(runs[0], ElementsAre(IR(0, 0, 3)));
  EXPECT_THAT(runs[1], ElementsAre(IR(2, 0, 2), IR(6, 2, 2)));
  EXPECT_EQ(RunsNumel(runs), 12);
}

// Every rank of a set of layouts: the runs name exactly OwnedIndices, in local order.
TEST(RegionCopy, OwnedRunsExpandToOwnedIndices) {
  struct Case {
    IntVector shape;
    IntVector mesh;
    const char* placements;
  };
  const std::vector<Case> cases = {
      {{10, 3}, {4}, "[S(0)]"},
      {{3, 9}, {2}, "[S(1)]"},
      {{9}, {4}, "[_S(0, 2)]"},
      {{4, 6}, {3}, "[_S(1, 3)]"},
      {{8}, {2, 2}, "[_S(0, 2), S(0)]"},
      {{15, 5}, {2, 2}, "[_S(0, 2), S(0)]"},
      {{18, 2}, {2, 2}, "[S(0), _S(0, 2)]"},
      {{3, 4}, {2, 2}, "[S(0), S(0)]"},
      {{5, 4}, {2, 2}, "[R, S(1)]"},
      {{7, 5}, {2, 3}, "[_S(0, 3), _S(1, 2)]"},
      {{}, {3}, "[R]"},
  };
  for (const Case& c : cases) {
    int64_t ranks = 1;
    for (int64_t s : c.mesh) ranks *= s;
    for (int64_t rank = 0; rank < ranks; ++rank) {
      SCOPED_TRACE(::testing::Message()
                   << ShapeToString(c.shape) << " " << c.placements << " rank " << rank);
      const LocalShardInfo info = Info(c.shape, c.mesh, c.placements, rank);
      const ShardRuns runs = OwnedRuns(info);
      ASSERT_EQ(runs.size(), c.shape.size());
      int64_t numel = 1;
      for (int d = 0; d < static_cast<int>(c.shape.size()); ++d) {
        EXPECT_EQ(Expand(runs[d]), OwnedIndices(info, d)) << "dim " << d;
        for (size_t i = 1; i < runs[d].size(); ++i) {
          EXPECT_NE(runs[d][i - 1].global + runs[d][i - 1].length, runs[d][i].global)
              << "runs are maximal";
        }
        numel *= info.local_shape[d];
      }
      EXPECT_EQ(RunsNumel(runs), numel);
    }
  }
}

TEST(RegionCopy, BoxRunsAreOneRunPerNonEmptyDim) {
  const int64_t offsets[] = {2, 0, 7};
  const int64_t sizes[] = {3, 0, 1};
  const ShardRuns runs = BoxRuns(offsets, sizes);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_THAT(runs[0], ElementsAre(IR(2, 0, 3)));
  EXPECT_THAT(runs[1], IsEmpty());
  EXPECT_THAT(runs[2], ElementsAre(IR(7, 0, 1)));
  EXPECT_EQ(RunsNumel(runs), 0);
  EXPECT_THAT(BoxRuns({}, {}), IsEmpty());
}

TEST(RegionCopy, ClipRunsKeepsLocalIndices) {
  const ShardRuns runs = {{IR(0, 0, 2), IR(3, 2, 1), IR(6, 3, 4)}, {IR(0, 0, 5)}};
  const int64_t begin[] = {1, 2};
  const int64_t end[] = {8, 10};
  const ShardRuns clipped = ClipRuns(runs, begin, end);
  EXPECT_THAT(clipped[0], ElementsAre(IR(1, 1, 1), IR(3, 2, 1), IR(6, 3, 2)));
  EXPECT_THAT(clipped[1], ElementsAre(IR(2, 2, 3)));
  EXPECT_EQ(RunsNumel(clipped), 12);
  // A box that misses every run of dim 0.
  const int64_t miss_begin[] = {2, 0};
  const int64_t miss_end[] = {3, 5};
  const ShardRuns none = ClipRuns(runs, miss_begin, miss_end);
  EXPECT_THAT(none[0], IsEmpty());
  EXPECT_EQ(RunsNumel(none), 0);
  // An empty box.
  const int64_t empty_end[] = {1, 2};
  EXPECT_EQ(RunsNumel(ClipRuns(runs, begin, empty_end)), 0);
  // 0-dim runs stay 0-dim.
  EXPECT_THAT(ClipRuns({}, {}, {}), IsEmpty());
}

TEST(RegionCopy, RunsNumel) {
  EXPECT_EQ(RunsNumel({}), 1);  // 0-dim: one element
  EXPECT_EQ(RunsNumel({{IR(0, 0, 2), IR(5, 2, 3)}, {IR(1, 0, 4)}}), 20);
  EXPECT_EQ(RunsNumel({{IR(0, 0, 2)}, {}}), 0);
}

// Full -> local and back for a _StridedShard piece, both tensors strided views.
TEST(RegionCopy, CopyRunsBothWaysWithStridedViews) {
  // The box: the transpose of an 8x7 arange, i.e. a 7x8 view with strides (1, 7), holding
  // global element (i, j) = 7 * j + i.
  const Tensor base = Arange({8, 7});
  Tensor transposed = *Tensor::FromStorage(base.storage(), DType::kFloat32, {7, 8}, {1, 7});
  ASSERT_FALSE(transposed.is_contiguous());
  // Rank 1 of _S(1, 2) over 2 ranks of a 7x8 tensor: columns [2, 3, 6, 7].
  const LocalShardInfo info = Info({7, 8}, {2}, "[_S(1, 2)]", 1);
  const ShardRuns runs = OwnedRuns(info);
  ASSERT_EQ(runs[1].size(), 2u);
  // The local: every other column of a 7x8 buffer (strides (8, 2)).
  Tensor buffer = test::Full({7, 8}, -1.0f);
  Tensor local = *buffer.Slice(1, 0, 8, 2);
  ASSERT_EQ(local.shape(), (IntVector{7, 4}));
  const int64_t origin[] = {0, 0};
  ASSERT_TRUE(CopyRuns(transposed, origin, local, runs, /*to_local=*/true).ok());
  const std::vector<int64_t> columns = OwnedIndices(info, 1);
  for (int64_t i = 0; i < 7; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t index[] = {i, j};
      EXPECT_EQ(At(local, index), static_cast<float>(7 * columns[j] + i)) << i << "," << j;
    }
  }
  // The odd columns of the buffer were not touched.
  for (int64_t i = 0; i < 7; ++i) {
    for (int64_t j = 1; j < 8; j += 2) EXPECT_EQ(buffer.data<float>()[i * 8 + j], -1.0f);
  }

  // Back: into a box holding global rows [2, 6) of the 7x8 tensor, itself a strided view
  // (every other row of an 8x8 buffer).
  Tensor box_buffer = test::Full({8, 8}, -2.0f);
  Tensor rows = *box_buffer.Slice(0, 0, 8, 2);
  ASSERT_EQ(rows.shape(), (IntVector{4, 8}));
  const int64_t begin[] = {2, 0};
  const int64_t end[] = {6, 8};
  const ShardRuns clipped = ClipRuns(runs, begin, end);
  ASSERT_TRUE(CopyRuns(rows, begin, local, clipped, /*to_local=*/false).ok());
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 8; ++c) {
      const int64_t index[] = {r, c};
      const bool owned = c == 2 || c == 3 || c == 6 || c == 7;
      EXPECT_EQ(At(rows, index), owned ? static_cast<float>(7 * c + (r + 2)) : -2.0f)
          << r << "," << c;
    }
  }
  for (int64_t r = 1; r < 8; r += 2) {
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(box_buffer.data<float>()[r * 8 + c], -2.0f);
  }
}

// Every rank's piece of a 2-D mesh layout copied out of the full tensor and back into a
// zeroed one rebuilds the full tensor (the pieces tile it).
TEST(RegionCopy, PiecesOfEveryRankRebuildTheFullTensor) {
  for (const char* placements : {"[_S(0, 2), S(0)]", "[S(0), _S(0, 2)]", "[S(1), _S(0, 3)]"}) {
    SCOPED_TRACE(placements);
    const IntVector shape = {15, 5};
    const Tensor full = Arange(shape, DType::kFloat32, 1);
    Tensor rebuilt = test::Full(shape, 0.0f);
    const int64_t origin[] = {0, 0};
    int64_t covered = 0;
    for (int64_t rank = 0; rank < 4; ++rank) {
      const LocalShardInfo info = Info(shape, {2, 2}, placements, rank);
      const ShardRuns runs = OwnedRuns(info);
      Tensor local = *Tensor::Empty(info.local_shape, DType::kFloat32);
      ASSERT_TRUE(CopyRuns(full, origin, local, runs, /*to_local=*/true).ok());
      ASSERT_TRUE(CopyRuns(rebuilt, origin, local, runs, /*to_local=*/false).ok());
      covered += RunsNumel(runs);
    }
    EXPECT_EQ(covered, full.numel());
    for (int64_t i = 0; i < full.numel(); ++i) {
      EXPECT_EQ(rebuilt.data<float>()[i], full.data<float>()[i]) << i;
    }
  }
}

TEST(RegionCopy, CopyRunsOfABoxIntoAFullTensorAtAnOffset) {
  // A ShardedTensor shard at offsets (1, 2), sizes (2, 3) of a 4x6 tensor.
  Tensor full = test::Full({4, 6}, 0.0f);
  const Tensor shard = Arange({2, 3}, DType::kFloat32, 1);
  const int64_t offsets[] = {1, 2};
  const int64_t sizes[] = {2, 3};
  const int64_t origin[] = {0, 0};
  ASSERT_TRUE(CopyRuns(full, origin, shard, BoxRuns(offsets, sizes), /*to_local=*/false).ok());
  const std::vector<float> want = {0, 0, 0, 0, 0, 0,  //
                                   0, 0, 1, 2, 3, 0,  //
                                   0, 0, 4, 5, 6, 0,  //
                                   0, 0, 0, 0, 0, 0};
  EXPECT_EQ(std::vector<float>(full.data<float>(), full.data<float>() + 24), want);
}

TEST(RegionCopy, ZeroDimCopiesOneElement) {
  Tensor box = *Tensor::Empty({}, DType::kInt64);
  box.data<int64_t>()[0] = 42;
  Tensor local = *Tensor::Empty({}, DType::kInt64);
  local.data<int64_t>()[0] = 0;
  ASSERT_TRUE(CopyRuns(box, {}, local, {}, /*to_local=*/true).ok());
  EXPECT_EQ(local.data<int64_t>()[0], 42);
  local.data<int64_t>()[0] = 7;
  ASSERT_TRUE(CopyRuns(box, {}, local, {}, /*to_local=*/false).ok());
  EXPECT_EQ(box.data<int64_t>()[0], 7);
  // Through OwnedRuns of a replicated 0-dim DTensor.
  const ShardRuns runs = OwnedRuns(Info({}, {2}, "[R]", 1));
  EXPECT_THAT(runs, IsEmpty());
  EXPECT_EQ(RunsNumel(runs), 1);
}

TEST(RegionCopy, EmptyRunsCopyNothing) {
  Tensor box = test::Full({3, 4}, 1.0f);
  Tensor local = test::Full({2, 0}, 2.0f);
  const int64_t origin[] = {0, 0};
  // A dim with no run.
  EXPECT_TRUE(CopyRuns(box, origin, local, {{IR(0, 0, 2)}, {}}, /*to_local=*/false).ok());
  // Runs of length 0.
  EXPECT_TRUE(
      CopyRuns(box, origin, local, {{IR(0, 0, 2)}, {IR(1, 0, 0)}}, /*to_local=*/false).ok());
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(box.data<float>()[i], 1.0f);
  // Tensors with no elements at all.
  Tensor empty_box = *Tensor::Empty({0, 5}, DType::kFloat32);
  EXPECT_TRUE(CopyRuns(empty_box, origin, local, {{}, {}}, /*to_local=*/true).ok());
}

TEST(RegionCopy, OutOfRangeRunsAreErrorsAndCopyNothing) {
  const Tensor full = Arange({4, 5});
  Tensor local = test::Full({2, 5}, -1.0f);
  const int64_t origin[] = {0, 0};
  const int64_t origin2[] = {2, 0};
  auto expect_error = [&](const Tensor& box, IntSpan at, const ShardRuns& runs,
                          const char* substring) {
    const absl::Status s = CopyRuns(box, at, local, runs, /*to_local=*/true);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(substring));
    for (int64_t i = 0; i < local.numel(); ++i) EXPECT_EQ(local.data<float>()[i], -1.0f) << i;
  };
  // Past the end of the box on dim 0 (the first run is fine and is not copied either).
  expect_error(full, origin, {{IR(0, 0, 1), IR(3, 1, 2)}, {IR(0, 0, 5)}},
               "run of global indices [3, 5) at local index 1 on dim 0");
  // Before the box's origin.
  expect_error(full.Narrow(0, 2, 2).value(), origin2, {{IR(1, 0, 2)}, {IR(0, 0, 5)}},
               "[1, 3) at local index 0 on dim 0 is outside the box");
  // Past the end of the local tensor on dim 1.
  expect_error(full, origin, {{IR(0, 0, 2)}, {IR(0, 1, 5)}}, "on dim 1");
  // A negative local index, and a negative length.
  expect_error(full, origin, {{IR(0, -1, 2)}, {IR(0, 0, 5)}}, "on dim 0");
  expect_error(full, origin, {{IR(2, 0, -1)}, {IR(0, 0, 5)}}, "on dim 0");
  // Reported even when another dim has no run (nothing would be copied).
  expect_error(full, origin, {{}, {IR(4, 0, 5)}}, "on dim 1");
  // dtype, rank, runs and origin mismatches.
  const Tensor ints = Arange({4, 5}, DType::kInt32);
  expect_error(ints, origin, {{IR(0, 0, 2)}, {IR(0, 0, 5)}}, "same dtype and rank");
  expect_error(Arange({20}), origin, {{IR(0, 0, 2)}, {IR(0, 0, 5)}}, "same dtype and rank");
  expect_error(full, origin, {{IR(0, 0, 2)}}, "same dtype and rank");
  const int64_t short_origin[] = {0};
  expect_error(full, short_origin, {{IR(0, 0, 2)}, {IR(0, 0, 5)}}, "same dtype and rank");
}

}  // namespace
}  // namespace sdrt::internal
