// The bucket planner of the distributed state-dict operations
// (core/distributed/internal/buckets.h), a pure function: whole tensors when they fit,
// alignment of every piece, tensors larger than a bucket cut into row-major contiguous
// boxes, no piece for zero-element tensors; and ByteView over a bucket.
#include "sdrt/core/distributed/internal/buckets.h"

#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt::internal {
namespace {

using ::testing::HasSubstr;

PlannedTensor Planned(const IntVector& shape, int64_t element_size) {
  PlannedTensor t;
  t.shape = shape;
  t.element_bits = static_cast<int>(8 * element_size);
  return t;
}

// A piece and the index of its bucket.
struct Flat {
  size_t bucket;
  const Piece* piece;
};
// The pieces of every bucket, in bucket order.
std::vector<Flat> Pieces(const std::vector<Bucket>& buckets) {
  std::vector<Flat> out;
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (const Piece& p : buckets[b].pieces) out.push_back({b, &p});
  }
  return out;
}

void ExpectPiece(const Piece& p, size_t tensor, const IntVector& begin, const IntVector& end,
                 int64_t bytes, int64_t offset) {
  EXPECT_EQ(p.tensor, tensor);
  EXPECT_EQ(p.begin, begin);
  EXPECT_EQ(p.end, end);
  EXPECT_EQ(p.bytes, bytes);
  EXPECT_EQ(p.offset, offset);
}

TEST(PlanBuckets, NoTensorsNoBuckets) { EXPECT_TRUE(PlanBuckets({}, 64).empty()); }

TEST(PlanBuckets, TensorsThatFitGoWholeAtAlignedOffsets) {
  // 12, 20 and 24 bytes in a bucket of 100: offsets 0, 16 and 48 (AlignUp(16 + 20)).
  const std::vector<Bucket> buckets =
      PlanBuckets({Planned({3}, 4), Planned({5}, 4), Planned({2, 3}, 4)}, 100);
  ASSERT_EQ(buckets.size(), 1u);
  ASSERT_EQ(buckets[0].pieces.size(), 3u);
  ExpectPiece(buckets[0].pieces[0], 0, {0}, {3}, 12, 0);
  ExpectPiece(buckets[0].pieces[1], 1, {0}, {5}, 20, 16);
  ExpectPiece(buckets[0].pieces[2], 2, {0, 0}, {2, 3}, 24, 48);
  EXPECT_EQ(buckets[0].bytes, 72);
  EXPECT_EQ(kBucketAlignment, 16);
  EXPECT_EQ(AlignUp(0), 0);
  EXPECT_EQ(AlignUp(1), 16);
  EXPECT_EQ(AlignUp(16), 16);
  EXPECT_EQ(AlignUp(17), 32);
}

TEST(PlanBuckets, ATensorThatDoesNotFitAfterAlignmentStartsANewBucket) {
  // 40 bytes, then 20: AlignUp(40) + 20 = 68 > 64, a new bucket.
  std::vector<Bucket> buckets = PlanBuckets({Planned({10}, 4), Planned({5}, 4)}, 64);
  ASSERT_EQ(buckets.size(), 2u);
  ExpectPiece(buckets[0].pieces.at(0), 0, {0}, {10}, 40, 0);
  ExpectPiece(buckets[1].pieces.at(0), 1, {0}, {5}, 20, 0);
  EXPECT_EQ(buckets[0].bytes, 40);
  EXPECT_EQ(buckets[1].bytes, 20);
  // 40 bytes, then 16: 48 + 16 = 64 fills the bucket exactly.
  buckets = PlanBuckets({Planned({10}, 4), Planned({4}, 4)}, 64);
  ASSERT_EQ(buckets.size(), 1u);
  ExpectPiece(buckets[0].pieces.at(1), 1, {0}, {4}, 16, 48);
  EXPECT_EQ(buckets[0].bytes, 64);
}

TEST(PlanBuckets, ALargerTensorIsCutIntoRowsAndLaterTensorsFillTheLastBucket) {
  // float32 [10, 4] (160 bytes) in buckets of 48: 3 rows (48 bytes) a piece; the 16-byte
  // last row leaves room for the next tensor at offset 16.
  const std::vector<Bucket> buckets = PlanBuckets({Planned({10, 4}, 4), Planned({2}, 4)}, 48);
  ASSERT_EQ(buckets.size(), 4u);
  ExpectPiece(buckets[0].pieces.at(0), 0, {0, 0}, {3, 4}, 48, 0);
  ExpectPiece(buckets[1].pieces.at(0), 0, {3, 0}, {6, 4}, 48, 0);
  ExpectPiece(buckets[2].pieces.at(0), 0, {6, 0}, {9, 4}, 48, 0);
  ASSERT_EQ(buckets[3].pieces.size(), 2u);
  ExpectPiece(buckets[3].pieces[0], 0, {9, 0}, {10, 4}, 16, 0);
  ExpectPiece(buckets[3].pieces[1], 1, {0}, {2}, 8, 16);
  EXPECT_EQ(buckets[3].bytes, 24);
}

TEST(PlanBuckets, ARowLargerThanABucketIsCutAlongTheLastDim) {
  // int64 [2, 10]: a row is 80 bytes > 32, so each row is cut into runs of 4 elements.
  const std::vector<Bucket> buckets = PlanBuckets({Planned({2, 10}, 8)}, 32);
  const std::vector<Flat> pieces = Pieces(buckets);
  ASSERT_EQ(pieces.size(), 6u);
  ExpectPiece(*pieces[0].piece, 0, {0, 0}, {1, 4}, 32, 0);
  ExpectPiece(*pieces[1].piece, 0, {0, 4}, {1, 8}, 32, 0);
  ExpectPiece(*pieces[2].piece, 0, {0, 8}, {1, 10}, 16, 0);
  ExpectPiece(*pieces[3].piece, 0, {1, 0}, {2, 4}, 32, 0);
  ExpectPiece(*pieces[4].piece, 0, {1, 4}, {2, 8}, 32, 0);
  ExpectPiece(*pieces[5].piece, 0, {1, 8}, {2, 10}, 16, 0);
  // Each piece is alone in its bucket: after the 16-byte piece, AlignUp(16) + 32 > 32.
  EXPECT_EQ(buckets.size(), 6u);
  for (size_t i = 0; i < pieces.size(); ++i) EXPECT_EQ(pieces[i].bucket, i);
}

TEST(PlanBuckets, ZeroElementTensorsGetNoPiece) {
  const std::vector<Bucket> buckets =
      PlanBuckets({Planned({0}, 4), Planned({3}, 2), Planned({4, 0, 2}, 8), Planned({1}, 1)}, 64);
  ASSERT_EQ(buckets.size(), 1u);
  ASSERT_EQ(buckets[0].pieces.size(), 2u);
  ExpectPiece(buckets[0].pieces[0], 1, {0}, {3}, 6, 0);
  ExpectPiece(buckets[0].pieces[1], 3, {0}, {1}, 1, 16);
  EXPECT_TRUE(PlanBuckets({Planned({0, 5}, 4)}, 64).empty());
}

TEST(PlanBuckets, ZeroDimTensorsGoWholeEvenWhenLargerThanABucket) {
  const std::vector<Bucket> buckets = PlanBuckets({Planned({}, 8), Planned({}, 2)}, 4);
  ASSERT_EQ(buckets.size(), 2u);
  ExpectPiece(buckets[0].pieces.at(0), 0, {}, {}, 8, 0);
  ExpectPiece(buckets[1].pieces.at(0), 1, {}, {}, 2, 0);
}

TEST(PlanBuckets, BucketBytesOneGivesOneElementPerBucket) {
  // Every piece is one element (the least a piece holds), alone in its bucket.
  const std::vector<Bucket> buckets = PlanBuckets({Planned({2, 3}, 4), Planned({2}, 1)}, 1);
  ASSERT_EQ(buckets.size(), 8u);
  for (size_t b = 0; b < 6; ++b) {
    SCOPED_TRACE(b);
    const int64_t row = static_cast<int64_t>(b) / 3;
    const int64_t col = static_cast<int64_t>(b) % 3;
    ASSERT_EQ(buckets[b].pieces.size(), 1u);
    ExpectPiece(buckets[b].pieces[0], 0, {row, col}, {row + 1, col + 1}, 4, 0);
    EXPECT_EQ(buckets[b].bytes, 4);
  }
  ExpectPiece(buckets[6].pieces.at(0), 1, {0}, {1}, 1, 0);
  ExpectPiece(buckets[7].pieces.at(0), 1, {1}, {2}, 1, 0);
}

// The row-major (linear) index of `index` in `shape`.
int64_t Linear(const IntVector& shape, const IntVector& index) {
  int64_t at = 0;
  for (size_t d = 0; d < shape.size(); ++d) at = at * shape[d] + index[d];
  return at;
}

// For random shapes, element sizes and bucket sizes: the pieces of each tensor, in plan
// order, are boxes that are contiguous row-major runs following one another from element
// 0 to the last (so they tile the tensor), every piece is aligned and inside its bucket,
// no piece is over bucket_bytes unless it is a single element, a bucket of several pieces
// is never over bucket_bytes, and pieces never overlap within a bucket.
TEST(PlanBuckets, PiecesTileEachTensorInRowMajorOrder) {
  std::mt19937_64 gen(10);
  for (int round = 0; round < 300; ++round) {
    std::vector<PlannedTensor> tensors;
    const int n = 1 + static_cast<int>(gen() % 5);
    for (int i = 0; i < n; ++i) {
      IntVector shape(gen() % 4);
      for (int64_t& s : shape) s = static_cast<int64_t>(gen() % 6);
      tensors.push_back(Planned(shape, int64_t{1} << (gen() % 4)));
    }
    const int64_t bucket_bytes = 1 + static_cast<int64_t>(gen() % 200);
    SCOPED_TRACE(absl::StrCat("round ", round, ", bucket_bytes ", bucket_bytes));
    const std::vector<Bucket> buckets = PlanBuckets(tensors, bucket_bytes);
    std::vector<int64_t> next(tensors.size(), 0);  // next linear element expected, per tensor
    for (const Bucket& bucket : buckets) {
      ASSERT_FALSE(bucket.pieces.empty());
      int64_t end = 0;
      for (const Piece& p : bucket.pieces) {
        ASSERT_LT(p.tensor, tensors.size());
        const PlannedTensor& t = tensors[p.tensor];
        EXPECT_EQ(p.offset % kBucketAlignment, 0);
        EXPECT_GE(p.offset, end);
        end = p.offset + p.bytes;
        IntVector index = p.begin;
        int64_t count = 1;
        for (size_t d = 0; d < t.shape.size(); ++d) count *= p.end[d] - p.begin[d];
        ASSERT_GT(count, 0);
        EXPECT_EQ(p.bytes, count * t.element_bits / 8);
        if (count > 1) {
          EXPECT_LE(p.bytes, bucket_bytes);
        }
        // Walk the box in row-major order: its elements are consecutive in the tensor.
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(Linear(t.shape, index), next[p.tensor] + i);
          for (int d = static_cast<int>(index.size()) - 1; d >= 0; --d) {
            if (++index[d] < p.end[d]) break;
            index[d] = p.begin[d];
          }
        }
        next[p.tensor] += count;
      }
      EXPECT_EQ(bucket.bytes, end);
      if (bucket.pieces.size() > 1) {
        EXPECT_LE(bucket.bytes, bucket_bytes);
      }
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      int64_t numel = 1;
      for (int64_t s : tensors[t].shape) numel *= s;
      EXPECT_EQ(next[t], numel) << "tensor " << t;
    }
  }
}

TEST(ByteView, ViewsAnAlignedRangeOfTheBucketAndRefusesAMisalignedOne) {
  Tensor bucket = *Tensor::Zeros({64}, DType::kUInt8);
  absl::StatusOr<Tensor> view = ByteView(bucket, 16, DType::kFloat32, IntVector{2, 3});
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->shape(), (IntVector{2, 3}));
  EXPECT_TRUE(view->is_contiguous());
  EXPECT_EQ(view->storage(), bucket.storage());
  EXPECT_EQ(view->data_ptr(), static_cast<void*>(bucket.data<uint8_t>() + 16));
  view->data<float>()[5] = 1.0f;
  EXPECT_EQ(bucket.data<uint8_t>()[16 + 5 * 4 + 3], 0x3f);
  // An offset that is not a multiple of the element size.
  absl::Status s = ByteView(bucket, 6, DType::kFloat32, IntVector{1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("byte offset 6 is not aligned for float32"));
  // A bucket that itself starts at an odd byte of its storage.
  const Tensor odd = *bucket.Narrow(0, 1, 32);
  s = ByteView(odd, 0, DType::kInt16, IntVector{2}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("is not aligned for int16"));
}

}  // namespace
}  // namespace sdrt::internal
