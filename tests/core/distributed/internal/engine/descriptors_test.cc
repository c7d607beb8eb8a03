// The descriptors of a reshard's one exchange (core/distributed/internal/
// engine/descriptors.h): what a rank encodes decodes to the same leaves, a peer's bytes
// that are cut short, run long or claim huge counts are InvalidArgument naming the rank,
// and merging the ranks' descriptions checks that they agree, turns plain tensors into a
// Replicate layout over their holders and needs a source for every destination leaf.
#include "sdrt/core/distributed/internal/engine/descriptors.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/byte_codec.h"

namespace sdrt::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LeafLayout MeshLeaf(const std::string& path, bool source, const char* placements,
                    std::vector<int64_t> ranks = {0, 1}) {
  LeafLayout l;
  l.path = path;
  l.source = source;
  l.dtype = DType::kBFloat16;
  l.shape = {8, 4};
  l.kind = LeafLayout::Kind::kMesh;
  l.mesh_shape = {static_cast<int64_t>(ranks.size())};
  l.mesh_ranks = std::move(ranks);
  l.placements = *ParsePlacements(placements);
  return l;
}

LeafLayout PlainLeaf(const std::string& path, bool source, IntVector shape = {3}) {
  LeafLayout l;
  l.path = path;
  l.source = source;
  l.shape = std::move(shape);
  l.kind = LeafLayout::Kind::kPlain;
  return l;
}

LeafLayout BoxLeaf(const std::string& path, bool source) {
  LeafLayout l;
  l.path = path;
  l.source = source;
  l.dtype = DType::kBFloat16;
  l.shape = {8, 4};
  l.kind = LeafLayout::Kind::kBoxes;
  l.boxes = {{{0, 0}, {8, 2}, 0}, {{0, 2}, {8, 2}, 1}};
  return l;
}

TEST(ReshardDescriptors, WhatIsEncodedDecodesAlike) {
  const std::vector<LeafLayout> leaves = {MeshLeaf("w", true, "[_S(0, 2)]"), BoxLeaf("w", false),
                                          PlainLeaf("b", true), MeshLeaf("p", true, "[P(max)]")};
  const std::string bytes = EncodeLeafLayouts(leaves);
  absl::StatusOr<std::vector<LeafLayout>> back = DecodeLeafLayouts(bytes, 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(EncodeLeafLayouts(*back), bytes);
  ASSERT_EQ(back->size(), 4u);
  EXPECT_EQ((*back)[0].placements, leaves[0].placements);
  EXPECT_EQ((*back)[1].boxes.size(), 2u);
  EXPECT_EQ((*back)[3].placements[0].reduce_op(), ReduceOp::kMax);
  // Every cut, and a byte too many, is refused.
  for (size_t n = 0; n < bytes.size(); ++n) {
    const absl::Status s = DecodeLeafLayouts(bytes.substr(0, n), 3).status();
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
  }
  const absl::Status longer = DecodeLeafLayouts(bytes + "x", 3).status();
  EXPECT_THAT(std::string(longer.message()),
              HasSubstr("rank 3 sent a malformed description of its leaves"));
}

TEST(ReshardDescriptors, TheSmallestLeavesDecode) {
  // 0-dim plain tensors with short paths take fewer than six words each (a new user's
  // "scale" was refused as malformed); a leaf takes five at least.
  const std::vector<LeafLayout> leaves = {PlainLeaf("scale", true, {}), PlainLeaf("", false, {}),
                                          PlainLeaf("s", true, {})};
  const std::string bytes = EncodeLeafLayouts(leaves);
  EXPECT_EQ(bytes.size(), 8 + 3 * 5 * 8 + 6u);
  absl::StatusOr<std::vector<LeafLayout>> back = DecodeLeafLayouts(bytes, 0);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0].path, "scale");
  EXPECT_TRUE((*back)[0].shape.empty());
  EXPECT_EQ(EncodeLeafLayouts(*back), bytes);
}

TEST(ReshardDescriptors, HugeCountsAndUnknownCodesAreRefusedBeforeAllocating) {
  std::string huge;
  PutU64(&huge, uint64_t{1} << 60);  // leaves
  EXPECT_FALSE(DecodeLeafLayouts(huge, 0).ok());
  std::string dtype;
  PutU64(&dtype, 1);
  PutString(&dtype, "w");
  PutU64(&dtype, 1);
  PutU64(&dtype, 999);  // no such dtype
  for (int i = 0; i < 8; ++i) PutU64(&dtype, 0);
  EXPECT_FALSE(DecodeLeafLayouts(dtype, 0).ok());
  std::string ranks;
  PutU64(&ranks, 1);
  PutString(&ranks, "w");
  PutU64(&ranks, 1);
  PutU64(&ranks, 0);
  PutU64(&ranks, 0);  // 0-dim
  PutU64(&ranks, 0);  // kMesh
  PutU64(&ranks, 1);
  PutU64(&ranks, 2);                  // mesh shape [2]
  PutU64(&ranks, uint64_t{1} << 40);  // mesh ranks: more than arrived
  EXPECT_FALSE(DecodeLeafLayouts(ranks, 0).ok());
}

// The describers refuse what the decoder would (more than kMaxTransferDims dims), naming the
// leaf on the rank that holds it: a peer never learns only that the bytes were malformed.
TEST(ReshardDescriptors, ALeafOfMoreDimsThanMoveIsNamedBeforeItIsSent) {
  const LeafLayout twelve = PlainLeaf("w12", true, IntVector(12, 1));
  EXPECT_TRUE(CheckLeafDims(twelve).ok());
  EXPECT_TRUE(DecodeLeafLayouts(EncodeLeafLayouts({twelve}), 1).ok());
  const LeafLayout thirteen = PlainLeaf("w13", true, IntVector(13, 1));
  EXPECT_EQ(CheckLeafDims(thirteen),
            absl::InvalidArgumentError("'w13': 13 dims; at most 12 move between ranks"));
  EXPECT_FALSE(DecodeLeafLayouts(EncodeLeafLayouts({thirteen}), 1).ok());
  LeafLayout mesh = MeshLeaf("m", true, "[R]", {0});
  mesh.mesh_shape = IntVector(13, 1);
  EXPECT_EQ(CheckLeafDims(mesh),
            absl::InvalidArgumentError("'m': a mesh of 13 dims; at most 12 move between ranks"));
  // DescribeStateDict checks every leaf it describes.
  Map tree;
  tree.Set("w13", Value(*Tensor::Zeros(IntVector(13, 1), DType::kFloat32)));
  std::vector<LeafLayout> out;
  EXPECT_EQ(DescribeStateDict(tree, /*source=*/true, out),
            absl::InvalidArgumentError("'w13': 13 dims; at most 12 move between ranks"));
}

TEST(ReshardDescriptors, MergeAgreesPlainHoldersAndSources) {
  // Rank 0 and 1 hold the fsdp source; ranks 2 and 3 want it as boxes; "b" is held whole
  // by ranks 0 and 1 and wanted by rank 3 (with a placeholder of another shape).
  const std::vector<std::vector<LeafLayout>> per_rank = {
      {MeshLeaf("w", true, "[S(0)]"), PlainLeaf("b", true), PlainLeaf("only_source", true)},
      {MeshLeaf("w", true, "[S(0)]"), PlainLeaf("b", true)},
      {BoxLeaf("w", false)},
      {BoxLeaf("w", false), PlainLeaf("b", false, {1})},
  };
  std::vector<std::string> skipped;
  absl::StatusOr<std::vector<TransferTensor>> tensors = MergeLeafLayouts(per_rank, &skipped);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 2u);
  EXPECT_EQ((*tensors)[0].name, "w");
  EXPECT_EQ((*tensors)[0].destination.boxes.size(), 2u);
  EXPECT_EQ((*tensors)[1].name, "b");
  EXPECT_THAT((*tensors)[1].source.mesh->ranks(), ElementsAre(0, 1));
  EXPECT_THAT((*tensors)[1].destination.mesh->ranks(), ElementsAre(3));
  EXPECT_THAT((*tensors)[1].shape, ElementsAre(3));
  EXPECT_THAT(skipped, ElementsAre("only_source"));

  std::vector<std::vector<LeafLayout>> differ = per_rank;
  differ[1][0] = MeshLeaf("w", true, "[S(1)]");
  EXPECT_THAT(std::string(MergeLeafLayouts(differ).status().message()),
              HasSubstr("ranks 0 and 1 describe the source of 'w' differently: "
                        "bfloat16[8, 4] on mesh [2] of ranks [0, 1] cpu [S(0)] against "
                        "bfloat16[8, 4] on mesh [2] of ranks [0, 1] cpu [S(1)]"));
  std::vector<std::vector<LeafLayout>> orphan = per_rank;
  orphan[2].push_back(MeshLeaf("x", false, "[R]", {2}));
  EXPECT_THAT(std::string(MergeLeafLayouts(orphan).status().message()),
              HasSubstr("no rank holds a source of 'x'"));
  std::vector<std::vector<LeafLayout>> shape = per_rank;
  shape[2][0].shape = {8, 5};
  shape[3][0].shape = {8, 5};
  EXPECT_THAT(std::string(MergeLeafLayouts(shape).status().message()),
              HasSubstr("the source is bfloat16[8, 4] but the destination bfloat16[8, 5]"));
}

}  // namespace
}  // namespace sdrt::internal

namespace sdrt::test {
namespace {

// A fuzzer input (reshard_descriptors_fuzz): what decodes encodes to bytes that decode.
TEST(LeafDescriptorsTest, FuzzInputRoundTrips) {
  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape(
      "AgAAAAAAAAABAAAAAAAAAHcBAAAAAAAAAAgAAAAAAAAAAgAAAAAAAAADAAAAAAAAAAIAAAAAAAAAAgAAAAAAAAAEAAAA"
      "AAAAAHN0ZXABAAAAAAAAAAgAAAAAAAAAAAAAAAAAAAADAAAAAAAAAAoAAAAAAAAAomFrY2ludGF2DA==",
      &bytes));
  absl::StatusOr<std::vector<internal::LeafLayout>> leaves = internal::DecodeLeafLayouts(bytes, 1);
  if (!leaves.ok()) GTEST_SKIP() << leaves.status();
  const std::string encoded = internal::EncodeLeafLayouts(*leaves);
  absl::StatusOr<std::vector<internal::LeafLayout>> again = internal::DecodeLeafLayouts(encoded, 1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(internal::EncodeLeafLayouts(*again), encoded);
}

}  // namespace
}  // namespace sdrt::test
