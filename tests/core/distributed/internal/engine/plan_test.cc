// PlanTransfer (core/distributed/internal/engine/plan.h) and its packing, run by the
// one-process simulator: every destination piece bit-exact against DistributeTensor of
// the full tensor, each element delivered once, and wire bytes equal to the optimum,
// checked element by element (ReshardAndCheck). Cases of docs/CASES.md by id.
#include "sdrt/core/distributed/internal/engine/plan.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt::test {
namespace {

using internal::TransferBox;
using internal::TransferPlan;
using internal::TransferTensor;

std::vector<int64_t> Ranks(int64_t first, int64_t count) {
  std::vector<int64_t> ranks;
  for (int64_t r = first; r < first + count; ++r) ranks.push_back(r);
  return ranks;
}

// Plans and simulates one tensor of HashBytes; fails the test on any mismatch.
TransferPlan Check(const TransferTensor& tensor, LocalLayout layout = LocalLayout::kContiguous) {
  const Tensor full = HashBytes(tensor.shape, tensor.dtype, /*seed=*/7);
  absl::StatusOr<TransferPlan> plan = ReshardAndCheck({tensor}, {full}, layout);
  EXPECT_TRUE(plan.ok()) << tensor.name << ": " << plan.status();
  return plan.ok() ? *std::move(plan) : TransferPlan{};
}

// max bytes sent by one rank within 1.05x of the even split over `holders` senders.
void ExpectEvenSenders(const TransferPlan& plan, int64_t holders) {
  EXPECT_GT(plan.stats.wire_bytes, 0);
  EXPECT_LE(static_cast<double>(plan.stats.max_sent_bytes),
            1.05 * static_cast<double>(plan.stats.wire_bytes) / static_cast<double>(holders))
      << "max sent " << plan.stats.max_sent_bytes << " of " << plan.stats.wire_bytes;
}

TEST(ReshardPlanTest, FsdpEightToTpFourTimesTwoReplicas) {
  for (const char* tp : {"[R, S(0)]", "[R, S(1)]"}) {
    const TransferPlan plan =
        Check(Describe("w", DType::kBFloat16, {64, 48}, MeshLayout({8}, {}, "[S(0)]"),
                       MeshLayout({2, 4}, {}, tp)));
    EXPECT_GT(plan.stats.self_bytes, 0);
  }
  Check(Describe("bias", DType::kFloat32, {48}, MeshLayout({8}, {}, "[S(0)]"),
                 MeshLayout({2, 4}, {}, "[R, S(0)]")));
}

TEST(ReshardPlanTest, FourTrainerRanksToFourDisjointEngineRanks) {
  const TransferPlan plan =
      Check(Describe("w", DType::kFloat32, {40, 24}, MeshLayout({4}, Ranks(0, 4), "[S(0)]"),
                     MeshLayout({4}, Ranks(4, 4), "[S(1)]")));
  EXPECT_EQ(plan.stats.wire_bytes, 40 * 24 * 4);
  EXPECT_EQ(plan.stats.messages, 16);
  EXPECT_EQ(plan.stats.max_received_bytes, 40 * 6 * 4);
  // A replicated trainer: each engine piece is shared among the four holders.
  ExpectEvenSenders(
      Check(Describe("r", DType::kFloat32, {1000, 10}, MeshLayout({4}, Ranks(0, 4), "[R]"),
                     MeshLayout({4}, Ranks(4, 4), "[S(0)]"))),
      4);
}

TEST(ReshardPlanTest, ReplicatedSourceSplitsEvenly) {
  ExpectEvenSenders(
      Check(Describe("r", DType::kFloat16, {90, 33}, MeshLayout({3}, Ranks(0, 3), "[R]"),
                     MeshLayout({2}, Ranks(3, 2), "[R]"))),
      3);
  // HSDP-like [R, S(0)] source: two holders per piece.
  ExpectEvenSenders(
      Check(Describe("h", DType::kInt32, {64, 64}, MeshLayout({2, 2}, Ranks(0, 4), "[R, S(0)]"),
                     MeshLayout({3}, Ranks(4, 3), "[S(1)]"))),
      4);
  // Sources on the destination ranks copy to themselves: nothing on the wire.
  const TransferPlan self =
      Check(Describe("s", DType::kFloat32, {8, 8}, MeshLayout({2}, {0, 1}, "[R]"),
                     MeshLayout({2}, {0, 1}, "[S(0)]")));
  EXPECT_EQ(self.stats.wire_bytes, 0);
  EXPECT_EQ(self.stats.self_bytes, 8 * 8 * 4);
}

TEST(ReshardPlanTest, FsdpTpTwoByTwoToThreeRanksUneven) {
  Check(Describe("w", DType::kFloat32, {10, 7}, MeshLayout({2, 2}, {}, "[S(0), S(1)]"),
                 MeshLayout({3}, {}, "[S(0)]")));
  // Three mesh axes: fsdp x tp x cp.
  Check(Describe("w", DType::kFloat32, {10, 7, 6},
                 MeshLayout({2, 2, 2}, {}, "[S(0), _S(1, 2), S(1)]"),
                 MeshLayout({3}, {}, "[S(2)]")));
  Check(Describe("w", DType::kFloat32, {10, 7}, MeshLayout({2, 2}, {3, 1, 0, 2}, "[S(0), S(1)]"),
                 MeshLayout({3}, {2, 5, 1}, "[S(1)]")));
}

TEST(ReshardPlanTest, StridedShardSourcesAndDestinations) {
  // FSDP2 over TP: [_S(0, 2), S(0)] on a 2x2 mesh, to and from plain layouts.
  Check(Describe("w", DType::kFloat32, {13, 6}, MeshLayout({2, 2}, {}, "[_S(0, 2), S(0)]"),
                 MeshLayout({3}, {}, "[S(0)]")));
  Check(Describe("w", DType::kFloat32, {13, 6}, MeshLayout({3}, {}, "[S(1)]"),
                 MeshLayout({2, 2}, {1, 2, 3, 4}, "[_S(0, 2), S(0)]")));
  Check(Describe("w", DType::kUInt8, {11, 9}, MeshLayout({2}, {}, "[_S(1, 3)]"),
                 MeshLayout({3}, {}, "[_S(0, 2)]")));
}

// case-052: [2, 8] Shard(0) over 4 ranks (ranks 2 and 3 hold [0, 8]) to Shard(1) over 3
// ranks and back.
TEST(ReshardPlanTest, Case052EmptyShards) {
  const TransferPlan there = Check(Describe(
      "w", DType::kFloat32, {2, 8}, MeshLayout({4}, {}, "[S(0)]"), MeshLayout({3}, {}, "[S(1)]")));
  EXPECT_EQ(there.tensors[0].source()[2].local_shape, (IntVector{0, 8}));
  Check(Describe("w", DType::kFloat32, {2, 8}, MeshLayout({3}, {}, "[S(1)]"),
                 MeshLayout({4}, {}, "[S(0)]")));
  Check(Describe("w", DType::kFloat32, {2, 8}, MeshLayout({4}, {}, "[S(0)]"),
                 MeshLayout({3}, Ranks(4, 3), "[S(1)]")));
}

// case-053: fsdp over 8 ranks into 3 and 5 ranks with fsdp, and into 2x2 fsdp-tp; every
// rank's rows are its torch.chunk rows (DistributeTensor), in order.
TEST(ReshardPlanTest, Case053FsdpEightToOtherWorldSizes) {
  for (const internal::TransferLayout& destination :
       {MeshLayout({3}, {}, "[S(0)]"), MeshLayout({5}, {}, "[S(0)]"),
        MeshLayout({2, 2}, {}, "[S(0), S(1)]")}) {
    Check(Describe("layers.0.w", DType::kBFloat16, {17, 6}, MeshLayout({8}, {}, "[S(0)]"),
                   destination));
  }
}

// case-050: source locals that are transposed views (stride (1, rows)) or a narrow() of a
// larger buffer; the destination holds the logical values.
TEST(ReshardPlanTest, Case050NonContiguousSourceLocals) {
  for (LocalLayout layout : {LocalLayout::kTransposed, LocalLayout::kNarrowed}) {
    Check(Describe("w", DType::kFloat32, {12, 10}, MeshLayout({2}, {}, "[S(0)]"),
                   MeshLayout({3}, Ranks(2, 3), "[S(1)]")),
          layout);
    Check(Describe("w3", DType::kInt16, {5, 6, 4}, MeshLayout({2, 2}, {}, "[S(2), _S(1, 2)]"),
                   MeshLayout({3}, {}, "[S(0)]")),
          layout);
  }
}

// case-051: an F8_E8M0 scale tensor [rows/128, cols/128] stored as a transpose, beside its
// F8_E4M3 weight, both Shard(0) over 2 ranks, to other layouts.
TEST(ReshardPlanTest, Case051Fp8ScalesTransposed) {
  const TransferTensor weight =
      Describe("w", DType::kFloat8E4M3FN, {512, 256}, MeshLayout({2}, {}, "[S(0)]"),
               MeshLayout({2}, {2, 3}, "[S(1)]"));
  const TransferTensor scale =
      Describe("w.scale", DType::kFloat8E8M0FNU, {4, 2}, MeshLayout({2}, {}, "[S(0)]"),
               MeshLayout({2}, {2, 3}, "[S(1)]"));
  const std::vector<Tensor> fulls = {HashBytes(weight.shape, weight.dtype, 1),
                                     HashBytes(scale.shape, scale.dtype, 2)};
  for (LocalLayout layout : {LocalLayout::kContiguous, LocalLayout::kTransposed}) {
    absl::StatusOr<TransferPlan> plan = ReshardAndCheck({weight, scale}, fulls, layout);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->stats.wire_bytes, 512 * 256 + 4 * 2);
  }
  Check(Describe("w.scale", DType::kFloat8E8M0FNU, {4, 2}, MeshLayout({2}, {}, "[S(0)]"),
                 MeshLayout({3}, {0, 1, 2}, "[R]")),
        LocalLayout::kTransposed);
}

// Destination locals given by the engine (here transposed views of its own buffers) are
// filled in place.
TEST(ReshardPlanTest, GivenDestinationLocalsAreFilledInPlace) {
  const TransferTensor tensor =
      Describe("w", DType::kFloat32, {9, 5}, MeshLayout({3}, {}, "[S(0)]"),
               MeshLayout({2}, {3, 4}, "[S(1)]"));
  const Tensor full = HashBytes(tensor.shape, tensor.dtype, 5);
  const TransferPlan plan = *internal::PlanTransfer({tensor});
  const RankLocals expected = *PieceLocals(full, tensor, /*source=*/false);
  std::vector<RankLocals> destinations(1);
  for (const auto& [rank, locals] : expected) {
    destinations[0][rank].push_back(
        *Relayout(Full(locals[0].shape(), 0.0f), LocalLayout::kTransposed));
  }
  const std::vector<RankLocals> given = destinations;
  ASSERT_TRUE(SimulateReshard(plan, {*PieceLocals(full, tensor, true)}, destinations).ok());
  for (const auto& [rank, locals] : given[0]) {
    // The same storage, now holding the expected values.
    EXPECT_EQ(destinations[0][rank][0].storage(), locals[0].storage());
    const Tensor got = *locals[0].Contiguous();
    EXPECT_EQ(std::memcmp(got.data_ptr(), expected.at(rank)[0].data_ptr(), got.nbytes()), 0);
  }
}

TEST(ReshardPlanTest, ShardedTensorBoxesOnBothSides) {
  std::vector<RemoteDevice> devices;
  for (int64_t r = 0; r < 3; ++r) devices.push_back({r, Device::CPU()});
  std::vector<TransferBox> chunks;
  const std::vector<ShardMetadata> spec = *ChunkShardingSpec(0, devices, IntVector{10, 6});
  for (const ShardMetadata& m : spec) {
    chunks.push_back({m.offsets, m.sizes, m.placement.rank});
  }
  // Rank 4 holds two boxes, rank 5 one; the boxes of rank 4 overlap rank 5's.
  const std::vector<TransferBox> grid = {
      {{0, 0}, {6, 3}, 4}, {{0, 3}, {10, 3}, 5}, {{6, 0}, {4, 3}, 4}, {{2, 2}, {3, 2}, 4}};
  Check(Describe("st", DType::kFloat32, {10, 6}, BoxLayout(chunks), BoxLayout(grid)));
  Check(Describe("st", DType::kFloat32, {10, 6}, BoxLayout(grid), MeshLayout({4}, {}, "[S(1)]")));
  Check(Describe("st", DType::kFloat32, {10, 6}, MeshLayout({2, 2}, {}, "[S(0), R]"),
                 BoxLayout(chunks)));
}

TEST(ReshardPlanTest, ZeroDimAndOneElementTensors) {
  const TransferPlan scalar =
      Check(Describe("step", DType::kInt64, {}, MeshLayout({2}, {0, 1}, "[R]"),
                     MeshLayout({3}, {1, 2, 3}, "[R]")));
  EXPECT_EQ(scalar.stats.wire_bytes, 2 * 8);
  EXPECT_EQ(scalar.stats.self_bytes, 8);
  Check(Describe("one", DType::kFloat32, {1}, MeshLayout({3}, {}, "[S(0)]"),
                 MeshLayout({2}, Ranks(3, 2), "[S(0)]")));
  Check(Describe("one", DType::kFloat32, {1, 1}, MeshLayout({2, 2}, {}, "[S(1), S(0)]"),
                 MeshLayout({2}, {}, "[_S(0, 2)]")));
  Check(Describe("none", DType::kFloat32, {0, 3}, MeshLayout({2}, {}, "[S(0)]"),
                 MeshLayout({3}, {}, "[S(1)]")));
}

// fsdp(512) to [R, S(1)] on 64 x 8 over the same ranks, planned only: every destination
// needs its column block of all 512 row blocks, and holds 8 rows of it.
TEST(ReshardPlanTest, FiveHundredTwelveRanksPlanned) {
  const absl::StatusOr<TransferPlan> plan = internal::PlanTransfer(
      {Describe("embed", DType::kBFloat16, {4096, 4096}, MeshLayout({512}, {}, "[S(0)]"),
                MeshLayout({64, 8}, {}, "[R, S(1)]"))});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int64_t needed = int64_t{4096} * 512 * 2, held = int64_t{8} * 512 * 2;
  EXPECT_EQ(plan->stats.optimum_bytes, 512 * (needed - held));
  EXPECT_EQ(plan->stats.wire_bytes, plan->stats.optimum_bytes);
  EXPECT_EQ(plan->stats.messages, 512 * 511);
  EXPECT_EQ(plan->stats.max_received_bytes, needed - held);
  EXPECT_EQ(plan->stats.max_sent_bytes, int64_t{8} * 4096 * 2 * 64 - held);
}

TEST(ReshardPlanTest, MessagesAreMerged) {
  // A gather to rank 0: one message per other source rank, one box each.
  const TransferPlan gather = Check(Describe(
      "w", DType::kFloat32, {64, 8}, MeshLayout({8}, {}, "[S(0)]"), MeshLayout({1}, {0}, "[R]")));
  EXPECT_EQ(gather.stats.messages, 7);
  for (const internal::TransferMessage& m : gather.tensors[0].messages()) {
    EXPECT_EQ(m.moves.size(), 1u);
  }
  // Same plan twice: a value every rank computes alike.
  const TransferTensor t =
      Describe("w", DType::kFloat32, {13, 6}, MeshLayout({2, 2}, {}, "[_S(0, 2), S(0)]"),
               MeshLayout({3}, {}, "[R]"));
  const TransferPlan a = *internal::PlanTransfer({t}), b = *internal::PlanTransfer({t});
  const std::vector<internal::TransferMessage>&am = a.tensors[0].messages(),
        &bm = b.tensors[0].messages();
  ASSERT_EQ(am.size(), bm.size());
  for (size_t i = 0; i < am.size(); ++i) {
    ASSERT_EQ(am[i].moves.size(), bm[i].moves.size());
    for (size_t j = 0; j < am[i].moves.size(); ++j) {
      EXPECT_EQ(am[i].moves[j].begin, bm[i].moves[j].begin);
      EXPECT_EQ(am[i].moves[j].source, bm[i].moves[j].source);
    }
  }
}

// Tensors that repeat a layout share its TransferLayoutPlan (planned once); the stats count
// each tensor; the plan of one rank keeps its own messages only, with the same stats.
TEST(ReshardPlanTest, RepeatedLayoutsArePlannedOnce) {
  std::vector<TransferTensor> tensors;
  const char* tp[] = {"[R, S(0)]", "[R, S(1)]"};
  for (int i = 0; i < 3000; ++i) {
    // New mesh objects for every tensor: equal meshes count as one layout.
    tensors.push_back(Describe(absl::StrCat("layers.", i / 3, ".w", i % 3), DType::kBFloat16,
                               {256, 64 + 64 * (i % 3 == 2)}, MeshLayout({512}, {}, "[S(0)]"),
                               MeshLayout({64, 8}, {}, tp[i % 2])));
  }
  const absl::StatusOr<TransferPlan> every = internal::PlanTransfer(tensors);
  ASSERT_TRUE(every.ok()) << every.status();
  std::set<const internal::TransferLayoutPlan*> layouts;
  for (const internal::TransferTensorPlan& t : every->tensors) layouts.insert(t.layout.get());
  EXPECT_EQ(layouts.size(), 4u);  // (shape, tp) pairs: i % 6 decides both
  // A side alike in two layouts is made once: tensors 0 and 1 share the shape and the
  // source, not the destination.
  EXPECT_EQ(&every->tensors[0].source(), &every->tensors[1].source());
  EXPECT_NE(&every->tensors[0].destination(), &every->tensors[1].destination());
  EXPECT_EQ(&every->tensors[1].destination(), &every->tensors[3].destination());
  const absl::StatusOr<TransferPlan> one = internal::PlanTransfer({tensors[0]});
  ASSERT_TRUE(one.ok());
  int64_t optimum = 0;
  for (int k = 0; k < 6; ++k) {
    optimum += internal::PlanTransfer({tensors[k]})->stats.optimum_bytes * 500;
  }
  EXPECT_EQ(every->stats.optimum_bytes, optimum);
  EXPECT_EQ(every->stats.wire_bytes, every->stats.optimum_bytes);
  internal::TransferPlanOptions options;
  options.rank = 77;
  const absl::StatusOr<TransferPlan> mine = internal::PlanTransfer(tensors, options);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->rank, 77);
  EXPECT_EQ(mine->stats.wire_bytes, every->stats.wire_bytes);
  EXPECT_EQ(mine->stats.max_sent_bytes, every->stats.max_sent_bytes);
  EXPECT_EQ(mine->stats.max_received_bytes, every->stats.max_received_bytes);
  size_t kept = 0, share = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    for (const internal::TransferMessage& m : mine->tensors[t].messages()) {
      EXPECT_TRUE(m.source_rank == 77 || m.destination_rank == 77);
      ++kept;
    }
    for (const internal::TransferMessage& m : every->tensors[t].messages()) {
      share += (m.source_rank == 77 || m.destination_rank == 77) ? 1 : 0;
    }
  }
  EXPECT_EQ(kept, share);
  EXPECT_GT(kept, 0u);
}

// Node-aware fan-out: ranks 0-1 (node 0) hold the tensor; ranks 2-4 (node 1) and 5-7
// (node 2) want it whole, or rows of it. Each byte a node needs enters it once: one relay
// per cell receives it from the holders and forwards it to the node's other ranks.
TEST(ReshardPlanTest, FanOutEntersEachNodeOnce) {
  const std::vector<int64_t> nodes = {0, 0, 1, 1, 1, 2, 2, 2};
  const Tensor full = HashBytes({12, 5}, DType::kFloat32, 3);
  const int64_t bytes = 12 * 5 * 4;
  const TransferTensor whole =
      Describe("w", DType::kFloat32, {12, 5}, MeshLayout({2}, {0, 1}, "[R]"),
               MeshLayout({6}, Ranks(2, 6), "[R]"));
  absl::StatusOr<TransferPlan> plan =
      ReshardAndCheck({whole}, {full}, LocalLayout::kContiguous, nodes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->stats.internode_bytes, 2 * bytes);
  EXPECT_EQ(plan->stats.wire_bytes, 6 * bytes);
  // Node 0 sends the tensor to each other node; each takes it in once.
  EXPECT_EQ(plan->stats.max_node_sent_bytes, 2 * bytes);
  EXPECT_EQ(plan->stats.max_node_received_bytes, bytes);
  int64_t forwarded = 0;
  for (const internal::TransferMessage& m : plan->tensors[0].messages()) {
    if (m.forward) forwarded += m.bytes;
  }
  EXPECT_EQ(forwarded, 4 * bytes);  // two ranks per node get it from their relay
  // Without nodes every destination rank takes it from the holders: 6 entries.
  absl::StatusOr<TransferPlan> flat = ReshardAndCheck({whole}, {full});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->stats.internode_bytes, 0);  // not counted without nodes
  EXPECT_EQ(flat->stats.max_node_sent_bytes, 0);
  EXPECT_EQ(flat->stats.max_node_received_bytes, 0);
  // A holder on the node: node 1 holds rows 6-11 (fsdp over ranks 0-3 = nodes 0, 0, 1, 1),
  // which its ranks take there; the rest enters once; and [R, S(0)] on 2 x 3 rows.
  for (const char* placements : {"[R, S(0)]", "[S(0), R]"}) {
    SCOPED_TRACE(placements);
    const TransferTensor t =
        Describe("w", DType::kFloat32, {12, 5}, MeshLayout({4}, Ranks(0, 4), "[S(0)]"),
                 MeshLayout({2, 3}, Ranks(2, 6), placements));
    absl::StatusOr<TransferPlan> p = ReshardAndCheck({t}, {full}, LocalLayout::kContiguous, nodes);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->stats.wire_bytes, p->stats.optimum_bytes);
  }
}

// The pieces of a node share what they all need: a replicated tensor over three ranks of
// each of nodes 1 and 2, from two holders (one cell: cut in three blocks per node) or from
// three row shards (three cells: one relay per cell), each rank taking a third in from the
// holders and forwarding it to the other two, so the node's ranks take in and forward the
// same bytes (one relay per cell forwarded every layer's norms alone).
TEST(ReshardPlanTest, FanOutRelaysShareACell) {
  const std::vector<int64_t> nodes = {0, 0, 0, 1, 1, 1, 2, 2, 2};
  for (const char* source : {"[R]", "[S(0)]"}) {
    SCOPED_TRACE(source);
    const int64_t holders = source[1] == 'R' ? 2 : 3;
    std::vector<TransferTensor> tensors;
    std::vector<Tensor> fulls;
    for (int i = 0; i < 4; ++i) {
      tensors.push_back(Describe(absl::StrCat("layers.", i, ".norm"), DType::kFloat32, {12, 5},
                                 MeshLayout({holders}, Ranks(0, holders), source),
                                 MeshLayout({6}, Ranks(3, 6), "[R]")));
      fulls.push_back(HashBytes({12, 5}, DType::kFloat32, 11 + i));
    }
    absl::StatusOr<TransferPlan> plan =
        ReshardAndCheck(tensors, fulls, LocalLayout::kContiguous, nodes);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::vector<int64_t> forwarded(9, 0), entered(9, 0), sent(9, 0);
    for (const internal::TransferTensorPlan& t : plan->tensors) {
      for (const internal::TransferMessage& m : t.messages()) {
        const size_t from = static_cast<size_t>(m.source_rank);
        if (m.forward) forwarded[from] += m.bytes;
        if (!m.forward) entered[static_cast<size_t>(m.destination_rank)] += m.bytes;
        if (!m.forward) sent[from] += m.bytes;
      }
    }
    const int64_t bytes = 12 * 5 * 4;  // a block: 4 rows, a third
    for (int64_t r = 3; r < 9; ++r) {
      EXPECT_EQ(entered[r], 4 * bytes / 3) << "rank " << r;
      EXPECT_EQ(forwarded[r], 4 * 2 * bytes / 3) << "rank " << r;
    }
    EXPECT_EQ(sent[0], sent[1]);  // the holders share the sending
    EXPECT_EQ(plan->stats.wire_bytes, plan->stats.optimum_bytes);
    EXPECT_EQ(plan->stats.internode_bytes, 4 * 2 * bytes);
  }
}

}  // namespace
}  // namespace sdrt::test
