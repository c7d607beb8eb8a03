// The planner's grid (core/distributed/internal/engine/grid.h) made once per box: on seeded
// random layouts (random.h), each piece of a side's outline owns the runs its rank's
// sharding gives it, and the grid, the cells each piece covers and the holders of each cell
// are those made piece by piece (an outline of one box per piece), in the same order.
#include "sdrt/core/distributed/internal/engine/grid.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/engine/pieces.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/core/distributed/internal/engine/random.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"

namespace sdrt::test {
namespace {

using internal::Grid;
using internal::ShardRuns;
using internal::SideOutline;

// The cells of every piece through SideCells, in piece order (-1 between pieces; an
// identity piece has none).
std::vector<int64_t> AllCells(const Grid& grid, const SideOutline& pieces) {
  internal::SideCells side(grid, pieces);
  std::vector<int64_t> out;
  for (size_t p = 0; p < pieces.size(); ++p) {
    if (!pieces[p].identity) {
      const int slot = side.Of(p, int64_t{1} << 40);
      EXPECT_GE(slot, 0);
      for (int64_t cell : side.Cells(slot)) out.push_back(cell);
    }
    out.push_back(-1);
  }
  return out;
}

// The outline with a box of its own for each piece.
SideOutline OneBoxEach(const SideOutline& side) {
  SideOutline alone;
  std::vector<internal::OutlinePiece> pieces = side.pieces();
  for (size_t p = 0; p < side.size(); ++p) {
    pieces[p].box = static_cast<int>(p);
    alone.boxes.push_back(side.boxes[static_cast<size_t>(side[p].box)]);
  }
  alone.shared_pieces = std::make_shared<const std::vector<internal::OutlinePiece>>(pieces);
  return alone;
}

// The runs piece p of `layout` owns, made for its rank alone.
ShardRuns RunsOfPiece(const internal::TransferLayout& layout, IntSpan shape, size_t p) {
  if (layout.mesh == nullptr) {
    const internal::TransferBox& box = layout.boxes[p];
    for (int64_t size : box.sizes) {
      if (size == 0) return ShardRuns(shape.size());
    }
    return internal::BoxRuns(box.offsets, box.sizes);
  }
  const absl::StatusOr<LocalShardInfo> info = ComputeLocalShapeAndGlobalOffset(
      shape, *layout.mesh, layout.placements, layout.mesh->ranks()[p]);
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? internal::OwnedRuns(*info) : ShardRuns();
}

TEST(ReshardGridTest, BoxesCoveredOnceAsPieceByPiece) {
  int64_t shared = 0;  // pieces that share an earlier piece's box
  for (int c = 0; c < 2000; ++c) {
    Random rng(static_cast<uint64_t>(c) * 7717u + 5u);
    const int ndim = static_cast<int>(rng.Uniform(1, 3));
    IntVector shape;
    for (int d = 0; d < ndim; ++d) shape.push_back(rng.Uniform(1, 9));
    const int64_t world = rng.Uniform(1, 12);
    const ReduceOp op = ReduceOp::kSum;
    auto layout = [&](bool source) {
      return rng.Chance(15) ? RandomBoxes(rng, world, shape)
                            : RandomMesh(rng, world, ndim, 0, rng.Chance(20) ? &op : nullptr);
    };
    internal::TransferTensor tensor{absl::StrCat("case", c), DType::kFloat32, shape, layout(true),
                                    layout(false)};
    internal::PieceCache cache(1 << 20);
    internal::TransferLayoutPlan plan;
    internal::LayoutOutlines sides;
    ASSERT_TRUE(internal::LayoutPieces(tensor, "source", "destination", cache, plan, sides).ok())
        << LayoutString(tensor.source) << " -> " << LayoutString(tensor.destination);
    const SideOutline& source = *sides.source;
    const SideOutline& destination = *sides.destination;
    for (const bool is_source : {true, false}) {
      const SideOutline& side = is_source ? source : destination;
      const internal::TransferLayout& layout = is_source ? tensor.source : tensor.destination;
      shared += static_cast<int64_t>(side.size() - side.boxes.size());
      for (size_t p = 0; p < side.size(); ++p) {
        const ShardRuns alone = RunsOfPiece(layout, shape, p);
        const ShardRuns& runs = side.runs(p);
        ASSERT_EQ(runs.size(), alone.size()) << "case " << c;
        for (size_t d = 0; d < runs.size(); ++d) {
          ASSERT_EQ(runs[d].size(), alone[d].size()) << "case " << c << " piece " << p;
          for (size_t r = 0; r < runs[d].size(); ++r) {
            EXPECT_EQ(runs[d][r].global, alone[d][r].global) << "case " << c;
            EXPECT_EQ(runs[d][r].length, alone[d][r].length) << "case " << c;
          }
        }
      }
    }
    const SideOutline source_alone = OneBoxEach(source);
    const SideOutline destination_alone = OneBoxEach(destination);
    const Grid grid = internal::MakeGrid(shape, source, destination);
    const Grid alone = internal::MakeGrid(shape, source_alone, destination_alone);
    ASSERT_EQ(grid.cuts, alone.cuts) << "case " << c;
    EXPECT_EQ(AllCells(grid, source), AllCells(grid, source_alone)) << "case " << c;
    EXPECT_EQ(AllCells(grid, destination), AllCells(grid, destination_alone)) << "case " << c;
    // The walk's cells, kept per box or made per piece (nothing kept), are the same.
    internal::WalkCells kept(grid, DType::kFloat32, destination, int64_t{1} << 20);
    internal::WalkCells made(grid, DType::kFloat32, destination, 0);
    for (size_t p = 0; p < destination.size(); ++p) {
      if (destination[p].identity) continue;
      const std::vector<internal::GridCell>* a = kept.Of(p, int64_t{1} << 40);
      const std::vector<internal::GridCell> b = *made.Of(p, int64_t{1} << 40);
      ASSERT_NE(a, nullptr);
      ASSERT_EQ(a->size(), b.size()) << "case " << c;
      for (size_t i = 0; i < b.size(); ++i) {
        EXPECT_EQ((*a)[i].cell, b[i].cell);
        EXPECT_EQ((*a)[i].begin, b[i].begin);
        EXPECT_EQ((*a)[i].end, b[i].end);
        EXPECT_EQ((*a)[i].bytes, b[i].bytes);
      }
    }
    // A box's cells, once made, are refused for a limit exactly when CoverOf refuses the
    // piece (an empty dim after a long one included).
    internal::SideCells side(grid, destination);
    internal::Cover cover;
    for (size_t p = 0; p < destination.size(); ++p) {
      if (destination[p].identity) continue;
      ASSERT_GE(side.Of(p, int64_t{1} << 40), 0);
      for (int64_t limit : {0, 1, 2, 3, 5, 8}) {
        EXPECT_EQ(side.Of(p, limit) >= 0,
                  internal::CoverOf(grid, destination.runs(p), limit, cover) >= 0)
            << "case " << c << " piece " << p << " limit " << limit;
      }
    }
    int64_t cells = 1;
    for (int64_t n : grid.counts) cells *= n;
    std::vector<int64_t> first, first_alone;
    std::vector<int> holders, holders_alone;
    int64_t budget = int64_t{1} << 40, budget_alone = budget;
    ASSERT_TRUE(internal::CoverCells(grid, cells, source, budget, first, holders));
    ASSERT_TRUE(
        internal::CoverCells(grid, cells, source_alone, budget_alone, first_alone, holders_alone));
    EXPECT_EQ(first, first_alone) << "case " << c;
    EXPECT_EQ(holders, holders_alone) << "case " << c;
    EXPECT_EQ(budget, budget_alone) << "case " << c;
  }
  EXPECT_GT(shared, 1000);  // pieces sharing a box: replicas are common in random meshes
}

// The budget counts every piece's cells, as piece by piece: a box shared by many pieces
// runs out of it as often.
TEST(ReshardGridTest, SharedBoxesSpendTheBudgetPerPiece) {
  const IntVector shape = {8};
  internal::TransferTensor tensor{"t", DType::kFloat32, shape, MeshLayout({4}, {}, "[S(0)]"),
                                  MeshLayout({4}, {}, "[R]")};
  internal::PieceCache cache(1 << 20);
  internal::TransferLayoutPlan plan;
  internal::LayoutOutlines sides;
  ASSERT_TRUE(internal::LayoutPieces(tensor, "s", "d", cache, plan, sides).ok());
  const Grid grid = internal::MakeGrid(shape, *sides.source, *sides.destination);
  ASSERT_EQ(grid.counts, IntVector{4});
  std::vector<int64_t> first;
  std::vector<int> holders;
  // Four destination pieces of one box, 4 cells each: 16 fit, 15 do not.
  int64_t budget = 16;
  EXPECT_TRUE(internal::CoverCells(grid, 4, *sides.destination, budget, first, holders));
  EXPECT_EQ(budget, 0);
  EXPECT_EQ(holders, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  budget = 15;
  EXPECT_FALSE(internal::CoverCells(grid, 4, *sides.destination, budget, first, holders));
}

}  // namespace
}  // namespace sdrt::test
