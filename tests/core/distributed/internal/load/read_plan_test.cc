// The read planner of LoadStateDict (core/distributed/internal/load/read_plan.h), against a
// brute-force definition: the bytes a rank keeps of a tensor are, element by element,
// those of Full[I_0 x I_1 x ...] (OwnedIndices of ComputeLocalShapeAndGlobalOffset); the
// segments must cover exactly those bytes, once each, in (file, offset) order, and every
// read must hold its segments, fit max_read_bytes and read through gaps only by the rule.
#include "sdrt/core/distributed/internal/load/read_plan.h"

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/sharding/sharding.h"

namespace sdrt::internal {
namespace {

using ::testing::HasSubstr;

LocalShardInfo InfoOf(const IntVector& shape, const IntVector& mesh_shape, const char* placements,
                      int64_t rank) {
  const DeviceMesh mesh = *DeviceMesh::Create(mesh_shape);
  return *ComputeLocalShapeAndGlobalOffset(shape, mesh, *ParsePlacements(placements), rank);
}

// A ReadTensor borrows its shape and runs: these keep them for the test's whole run.
ReadTensor Borrowing(int file, int64_t offset, int bits, IntVector shape, ShardRuns runs) {
  static auto* const shapes = new std::deque<IntVector>;
  static auto* const kept_runs = new std::deque<ShardRuns>;
  shapes->push_back(std::move(shape));
  kept_runs->push_back(std::move(runs));
  return ReadTensor{file, offset, bits, shapes->back(), &kept_runs->back()};
}

ReadTensor TensorOf(int file, int64_t offset, int64_t element_size, const IntVector& shape,
                    const LocalShardInfo& info) {
  return Borrowing(file, offset, static_cast<int>(8 * element_size), shape, OwnedRuns(info));
}

// The kept byte offsets of `t` (whose runs came from `info`), element by element.
std::set<std::pair<int, int64_t>> BruteForceBytes(const ReadTensor& t, const LocalShardInfo& info) {
  std::set<std::pair<int, int64_t>> out;
  const int n = static_cast<int>(t.shape.size());
  std::vector<std::vector<int64_t>> sets;
  for (int d = 0; d < n; ++d) sets.push_back(OwnedIndices(info, d));
  std::vector<size_t> at(static_cast<size_t>(n), 0);
  for (int d = 0; d < n; ++d) {
    if (sets[d].empty()) return out;
  }
  while (true) {
    int64_t lin = 0;
    for (int d = 0; d < n; ++d) lin = lin * t.shape[d] + sets[d][at[d]];
    const int64_t element_size = t.element_bits / 8;
    for (int64_t b = 0; b < element_size; ++b)
      out.insert({t.file, t.offset + lin * element_size + b});
    int d = n - 1;
    while (d >= 0 && ++at[d] == sets[d].size()) at[d--] = 0;
    if (d < 0) break;
  }
  return out;
}

// Checks `plan` against the brute force and the rules of read_plan.h.
void ExpectValidPlan(const ReadPlan& plan, const std::vector<ReadTensor>& tensors,
                     const std::vector<LocalShardInfo>& infos, const ReadPlanOptions& options) {
  std::set<std::pair<int, int64_t>> want;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto b = BruteForceBytes(tensors[i], infos[i]);
    want.insert(b.begin(), b.end());
  }
  std::set<std::pair<int, int64_t>> got;
  int64_t kept = 0;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    const ReadTensor& t = tensors[s.tensor];
    EXPECT_GT(s.bytes, 0);
    EXPECT_LE(s.bytes, options.max_read_bytes);
    // The segment's box is its bytes.
    IntVector begin, end;
    SegmentBox(s, t.shape, begin, end);
    int64_t numel = 1;
    for (size_t d = 0; d < begin.size(); ++d) numel *= end[d] - begin[d];
    EXPECT_EQ(numel * t.element_bits / 8, s.bytes);
    for (int64_t b = 0; b < s.bytes; ++b) {
      EXPECT_TRUE(got.insert({t.file, s.file_offset + b}).second) << "byte read twice";
    }
    kept += s.bytes;
    if (i > 0) {
      const Segment& p = plan.segments[i - 1];
      const int pf = tensors[p.tensor].file;
      EXPECT_TRUE(pf < t.file || (pf == t.file && p.file_offset < s.file_offset));
    }
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(plan.kept_bytes, kept);
  int64_t read = 0;
  size_t next = 0;
  for (const Read& r : plan.reads) {
    EXPECT_EQ(r.first_segment, next);
    EXPECT_GE(r.segment_count, 1u);
    EXPECT_LE(r.bytes, options.max_read_bytes);
    next += r.segment_count;
    const Segment& first = plan.segments[r.first_segment];
    const Segment& last = plan.segments[r.first_segment + r.segment_count - 1];
    EXPECT_EQ(r.offset, first.file_offset);
    EXPECT_EQ(r.offset + r.bytes, last.file_offset + last.bytes);
    for (size_t i = r.first_segment + 1; i < r.first_segment + r.segment_count; ++i) {
      const Segment& a = plan.segments[i - 1];
      const int64_t gap = plan.segments[i].file_offset - (a.file_offset + a.bytes);
      EXPECT_EQ(tensors[plan.segments[i].tensor].file, r.file);
      EXPECT_GE(gap, 0);
      EXPECT_LE(gap, options.max_gap_bytes);
      EXPECT_LE(gap * kGapDivisor, a.bytes);
    }
    read += r.bytes;
  }
  EXPECT_EQ(next, plan.segments.size());
  EXPECT_EQ(plan.read_bytes, read);
  EXPECT_LE(static_cast<double>(read), static_cast<double>(kept) * (1.0 + 1.0 / kGapDivisor));
}

// One tensor per case, every rank of the mesh.
struct Case {
  IntVector shape;
  IntVector mesh;
  const char* placements;
  int64_t element_size;
};

TEST(PlanReadsTest, MatchesBruteForceForEveryRank) {
  const std::vector<Case> cases = {
      {{7, 5}, {3}, "[S(0)]", 4},  // uneven: 3, 3, 1 rows
      {{2, 8}, {3}, "[S(0)]", 4},  // empty piece on rank 2 (case-052)
      {{6, 7}, {3}, "[S(1)]", 2},  // Shard(1): one run per row
      {{6, 2}, {3}, "[S(1)]", 2},  // Shard(1), rank 2 empty
      {{8, 6}, {2, 2}, "[S(0), S(1)]", 4},
      {{8, 6}, {2, 2}, "[R, S(0)]", 4},          // HSDP: replicated over dim 0
      {{12, 3}, {2, 2}, "[_S(0, 2), S(0)]", 8},  // fsdp-tp's strided shard
      {{5}, {2}, "[_S(0, 2)]", 1},
      {{4, 3, 5}, {3}, "[S(1)]", 4},  // 3-D, middle dim
      {{4, 3, 5}, {3}, "[S(2)]", 4},  // innermost
      {{}, {3}, "[R]", 4},            // 0-dim
      {{0, 4}, {3}, "[S(0)]", 4},     // no elements at all
      {{9}, {3}, "[R]", 2},           // replicated: every holder reads it all
  };
  for (const Case& c : cases) {
    const int64_t ranks = [&] {
      int64_t n = 1;
      for (int64_t s : c.mesh) n *= s;
      return n;
    }();
    for (int64_t rank = 0; rank < ranks; ++rank) {
      SCOPED_TRACE(absl::StrCat(c.placements, " rank ", rank, " shape ", c.shape.size()));
      const LocalShardInfo info = InfoOf(c.shape, c.mesh, c.placements, rank);
      const std::vector<ReadTensor> tensors = {TensorOf(0, 40, c.element_size, c.shape, info)};
      ReadPlanOptions options;
      absl::StatusOr<ReadPlan> plan = PlanReads(tensors, options);
      ASSERT_TRUE(plan.ok()) << plan.status();
      ExpectValidPlan(*plan, tensors, {info}, options);
    }
  }
}

TEST(PlanReadsTest, ShardZeroIsOneRunShardOneIsOneRunPerRow) {
  const IntVector shape = {10, 8};
  const LocalShardInfo row = InfoOf(shape, {2}, "[S(0)]", 1);
  absl::StatusOr<ReadPlan> plan = PlanReads({TensorOf(0, 100, 4, shape, row)}, {});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->segments.size(), 1u);
  ASSERT_EQ(plan->reads.size(), 1u);
  EXPECT_EQ(plan->reads[0].offset, 100 + 5 * 8 * 4);
  EXPECT_EQ(plan->reads[0].bytes, 5 * 8 * 4);

  const LocalShardInfo col = InfoOf(shape, {2}, "[S(1)]", 1);
  plan = PlanReads({TensorOf(0, 100, 4, shape, col)}, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->segments.size(), 10u);
  // The 16-byte gaps are as large as the runs: never read through.
  EXPECT_EQ(plan->reads.size(), 10u);
  EXPECT_EQ(plan->read_bytes, plan->kept_bytes);
}

TEST(PlanReadsTest, SmallGapsAreReadThroughLargeOnesAreNot) {
  // Two tensors in one file: rows 0..63 of each (Shard(0) over 2 of [128, 64] float32),
  // the second starting 64 bytes after the first ends: a gap of 64 bytes after a run of
  // 16 KiB (<= 1/32 of it) is read through; with max_gap_bytes 32 it is not.
  const IntVector shape = {128, 64};
  const LocalShardInfo info = InfoOf(shape, {2}, "[S(0)]", 0);
  const int64_t half = 64 * 64 * 4;
  std::vector<ReadTensor> tensors = {TensorOf(0, 0, 4, shape, info),
                                     TensorOf(0, half + 64, 4, shape, info)};
  absl::StatusOr<ReadPlan> plan = PlanReads(tensors, {});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->reads.size(), 1u);
  EXPECT_EQ(plan->read_bytes, plan->kept_bytes + 64);
  ReadPlanOptions no_gap;
  no_gap.max_gap_bytes = 32;
  plan = PlanReads(tensors, no_gap);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->reads.size(), 2u);
  EXPECT_EQ(plan->read_bytes, plan->kept_bytes);
  // Another file never joins.
  tensors[1].file = 1;
  tensors[1].offset = half;
  plan = PlanReads(tensors, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->reads.size(), 2u);
}

TEST(PlanReadsTest, LongRunsAreCutToTheStagingBuffer) {
  // [64, 3, 5] float32, whole: 3840 bytes. Reads of at most 4096 bytes: one. Of 100: one
  // row (60 bytes) per read. Of 16: a row of dim 1 (20 bytes) does not fit, so each is cut
  // into 4 + 1 elements: 64 x 3 x 2 reads (16 + 4 bytes never share a read).
  const IntVector shape = {64, 3, 5};
  const LocalShardInfo info = InfoOf(shape, {1}, "[R]", 0);
  const std::vector<std::pair<int64_t, size_t>> expected = {{4096, 1}, {100, 64}, {16, 384}};
  for (const auto& [max, reads] : expected) {
    SCOPED_TRACE(max);
    ReadPlanOptions options;
    options.max_read_bytes = max;
    const std::vector<ReadTensor> tensors = {TensorOf(0, 8, 4, shape, info)};
    absl::StatusOr<ReadPlan> plan = PlanReads(tensors, options);
    ASSERT_TRUE(plan.ok());
    ExpectValidPlan(*plan, tensors, {info}, options);
    EXPECT_EQ(plan->reads.size(), reads);
    EXPECT_EQ(plan->read_bytes, 3840);
  }
}

TEST(PlanReadsTest, RefusesBadInput) {
  const IntVector shape = {4, 4};
  ShardRuns runs = BoxRuns(IntVector{2, 0}, IntVector{3, 4});
  const ReadTensor t{0, 0, 32, shape, &runs};
  EXPECT_THAT(PlanReads({t}, {}).status().message(), HasSubstr("outside dim 0"));
  runs.pop_back();
  EXPECT_THAT(PlanReads({t}, {}).status().message(), HasSubstr("runs for 1 dims"));
  // Null runs: nothing read, even of a 0-dim tensor.
  absl::StatusOr<ReadPlan> none =
      PlanReads({ReadTensor{0, 0, 32, shape, nullptr}, ReadTensor{0, 64, 32, {}, nullptr}}, {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->segments.empty());
  EXPECT_TRUE(none->reads.empty());
  ReadPlanOptions bad;
  bad.max_read_bytes = 8;
  EXPECT_FALSE(PlanReads({}, bad).ok());
  const IntVector huge_shape = {int64_t{1} << 40, int64_t{1} << 30};
  const ShardRuns huge_runs = BoxRuns(IntVector{0, 0}, huge_shape);
  EXPECT_THAT(PlanReads({ReadTensor{0, 0, 64, huge_shape, &huge_runs}}, {}).status().message(),
              HasSubstr("overflows"));
}

// Sub-byte elements (4 and 6 bits): segments and cuts fall on whole bytes; a kept run that
// would begin or end inside a byte is refused.
TEST(PlanReadsTest, SubByteSegmentsAreWholeBytes) {
  const IntVector w = {4, 8};
  const LocalShardInfo right = InfoOf(w, {2}, "[S(1)]", 1);
  ShardRuns f4_runs = OwnedRuns(right);
  const ReadTensor f4{0, 40, 4, w, &f4_runs};
  absl::StatusOr<ReadPlan> plan = PlanReads({f4}, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->segments.size(), 4u);  // one per row: elements 4..7 are bytes 2..3
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(plan->segments[r].file_offset, 40 + 4 * static_cast<int64_t>(r) + 2);
    EXPECT_EQ(plan->segments[r].bytes, 2);
  }
  f4_runs = OwnedRuns(InfoOf(w, {3}, "[S(1)]", 0));
  EXPECT_THAT(PlanReads({f4}, {}).status().message(),
              HasSubstr("begins or ends inside a byte (4-bit elements)"));
  // One long row cut to fit 16-byte reads: 32 4-bit or 20 6-bit elements per cut.
  ReadPlanOptions small;
  small.max_read_bytes = 16;
  for (const auto& [bits, bytes_per_cut] : {std::pair{4, 16}, std::pair{6, 15}}) {
    const IntVector row = {1, 96};
    ShardRuns runs = BoxRuns(IntVector{0, 0}, row);
    runs[0][0].length = 1;
    const ReadTensor t{0, 8, bits, row, &runs};
    plan = PlanReads({t}, small);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->kept_bytes, 96 * bits / 8);
    EXPECT_EQ(plan->segments[0].bytes, bytes_per_cut) << bits;
    int64_t at = 8;
    for (const Segment& s : plan->segments) {
      EXPECT_EQ(s.file_offset, at) << bits;
      at += s.bytes;
    }
  }
}

}  // namespace
}  // namespace sdrt::internal
