// Tests of the host copy paths against naive per-element reference loops written here,
// bit for bit, on awkward shapes, every element size, non-contiguous and misaligned
// layouts; and of the argument validation the CUDA launchers share.
#include "sdrt/tensor/backend/strided_copy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/tensor/backend/copy_test_util.h"

namespace sdrt {
namespace {

using ::sdrt::test::Contiguous;
using ::sdrt::test::ContiguousStrides;
using ::sdrt::test::Extent;
using ::sdrt::test::FirstMismatch;
using ::sdrt::test::HashByteVector;
using ::sdrt::test::kElemSizes;
using ::sdrt::test::Layout;
using ::sdrt::test::Numel;
using ::testing::HasSubstr;

// `bytes` random bytes, a function of `seed` only, at a base address `misalign` bytes
// past a 64-byte boundary.
class Buffer {
 public:
  Buffer(int64_t bytes, int64_t misalign, uint64_t seed) : storage_(bytes + 128), bytes_(bytes) {
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    start_ = static_cast<int64_t>((64 - address % 64) % 64) + misalign;
    const std::vector<uint8_t> contents = HashByteVector(bytes, seed);
    std::copy(contents.begin(), contents.end(), data());
  }
  uint8_t* data() { return storage_.data() + start_; }
  std::vector<uint8_t> bytes() const {
    return std::vector<uint8_t>(storage_.begin() + start_, storage_.begin() + start_ + bytes_);
  }

 private:
  std::vector<uint8_t> storage_;
  int64_t bytes_;
  int64_t start_ = 0;
};

// The reference: one element at a time, by an odometer over the multi-index.
void NaiveStridedCopy(uint8_t* dst, const uint8_t* src, int64_t elem_size,
                      const std::vector<int64_t>& sizes, const std::vector<int64_t>& dst_strides,
                      const std::vector<int64_t>& src_strides) {
  const int64_t numel = Numel(sizes);
  std::vector<int64_t> index(sizes.size(), 0);
  for (int64_t count = 0; count < numel; ++count) {
    int64_t d = 0, s = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      d += index[k] * dst_strides[k];
      s += index[k] * src_strides[k];
    }
    std::memcpy(dst + d * elem_size, src + s * elem_size, elem_size);
    for (int k = static_cast<int>(sizes.size()) - 1; k >= 0; --k) {
      if (++index[k] < sizes[k]) break;
      index[k] = 0;
    }
  }
}

// Runs StridedCopyHost and the naive loop on the same random src and the same random
// dst contents (so bytes the copy must not touch are checked too); expects equal bytes.
void ExpectMatchesNaive(int64_t elem_size, const Layout& l, int64_t dst_misalign = 0,
                        int64_t src_misalign = 0, uint64_t seed = 1) {
  SCOPED_TRACE(testing::Message() << "elem_size " << elem_size << " sizes "
                                  << testing::PrintToString(l.sizes) << " dst_misalign "
                                  << dst_misalign << " src_misalign " << src_misalign);
  const int64_t dst_bytes = Extent(l.sizes, l.dst_strides) * elem_size;
  const int64_t src_bytes = (l.src_offset + Extent(l.sizes, l.src_strides)) * elem_size;
  Buffer src(src_bytes, src_misalign, seed);
  Buffer expected(dst_bytes, dst_misalign, seed + 1);
  Buffer actual(dst_bytes, dst_misalign, seed + 1);
  const uint8_t* origin = src.data() + l.src_offset * elem_size;
  NaiveStridedCopy(expected.data(), origin, elem_size, l.sizes, l.dst_strides, l.src_strides);
  ASSERT_TRUE(
      StridedCopyHost(actual.data(), origin, elem_size, l.sizes, l.dst_strides, l.src_strides)
          .ok());
  EXPECT_EQ(FirstMismatch(actual.bytes(), expected.bytes()), -1);
}

TEST(StridedCopyHostTest, ContiguousAwkwardShapes) {
  const std::vector<std::vector<int64_t>> shapes = {
      {33, 17, 2, 1}, {}, {7}, {1}, {0}, {3, 0, 5}, {1, 1, 1}, {5, 1, 3}, {1000003}};
  for (int64_t elem_size : kElemSizes) {
    for (const auto& shape : shapes) ExpectMatchesNaive(elem_size, Contiguous(shape));
  }
}

TEST(StridedCopyHostTest, TransposedSources) {
  for (int64_t elem_size : kElemSizes) {
    // A [33, 17] tensor read as its transpose into a contiguous [17, 33].
    ExpectMatchesNaive(elem_size, {{17, 33}, {33, 1}, {1, 17}});
    // A [4, 5, 6] tensor permuted (2, 0, 1) into a contiguous [6, 4, 5].
    ExpectMatchesNaive(elem_size, {{6, 4, 5}, {20, 5, 1}, {1, 30, 6}});
    // The inverse: a contiguous source scattered into a transposed destination.
    ExpectMatchesNaive(elem_size, {{17, 33}, {1, 17}, {33, 1}});
  }
}

TEST(StridedCopyHostTest, SlicedWithStepAndBroadcast) {
  for (int64_t elem_size : kElemSizes) {
    // x[3::2, 5::3, :] of a contiguous [40, 30, 3].
    ExpectMatchesNaive(elem_size, {{18, 9, 3}, {27, 3, 1}, {180, 9, 1}, 3 * 90 + 5 * 3});
    // A [5] row expanded to [7, 5] (src stride 0).
    ExpectMatchesNaive(elem_size, {{7, 5}, {5, 1}, {0, 1}});
  }
}

TEST(StridedCopyHostTest, NarrowIntoContiguousAndBack) {
  // x.narrow(1, 4, 9) of a contiguous [33, 17, 2, 1], then written back into the same
  // sub-block of a buffer holding other bytes: the sub-block must equal x's and the rest
  // must be untouched.
  const std::vector<int64_t> full = {33, 17, 2, 1};
  const std::vector<int64_t> block = {33, 9, 2, 1};
  const std::vector<int64_t> full_strides = ContiguousStrides(full);
  const int64_t offset = 4 * full_strides[1];
  for (int64_t elem_size : kElemSizes) {
    SCOPED_TRACE(elem_size);
    ExpectMatchesNaive(elem_size, {block, ContiguousStrides(block), full_strides, offset});

    const int64_t full_bytes = Numel(full) * elem_size;
    Buffer x(full_bytes, 0, 5);
    Buffer narrowed(Numel(block) * elem_size, 0, 6);
    ASSERT_TRUE(StridedCopyHost(narrowed.data(), x.data() + offset * elem_size, elem_size, block,
                                ContiguousStrides(block), full_strides)
                    .ok());
    Buffer back(full_bytes, 0, 7);
    Buffer expected(full_bytes, 0, 7);
    ASSERT_TRUE(StridedCopyHost(back.data() + offset * elem_size, narrowed.data(), elem_size, block,
                                full_strides, ContiguousStrides(block))
                    .ok());
    NaiveStridedCopy(expected.data() + offset * elem_size, x.data() + offset * elem_size, elem_size,
                     block, full_strides, full_strides);
    EXPECT_EQ(FirstMismatch(back.bytes(), expected.bytes()), -1);
  }
}

TEST(StridedCopyHostTest, UnalignedBasePointers) {
  // Misalignments that force every narrower access width, on contiguous, narrowed and
  // transposed layouts.
  for (int64_t elem_size : kElemSizes) {
    for (int64_t dst_misalign : {0, 1, 2, 4, 8}) {
      for (int64_t src_misalign : {0, 3, 4, 12}) {
        ExpectMatchesNaive(elem_size, Contiguous({33, 17}), dst_misalign, src_misalign);
        ExpectMatchesNaive(elem_size, {{64, 32}, {32, 1}, {40, 1}, 8}, dst_misalign, src_misalign);
        ExpectMatchesNaive(elem_size, {{17, 33}, {33, 1}, {1, 17}}, dst_misalign, src_misalign);
      }
    }
  }
}

TEST(StridedCopyHostTest, TwelveDimsAfterMergingAreEnough) {
  std::vector<int64_t> sizes(12, 2), reversed(12);
  for (int d = 0; d < 12; ++d) reversed[d] = int64_t{1} << d;
  for (int64_t elem_size : kElemSizes) {
    ExpectMatchesNaive(elem_size, {sizes, ContiguousStrides(sizes), reversed});
  }
  // Twenty dims that merge into one.
  ExpectMatchesNaive(4, Contiguous(std::vector<int64_t>(20, 2)));
}

TEST(StridedCopyHostTest, RandomLayouts) {
  // Random permutations and slices of random 4-D tensors, as a net for cases not
  // thought of above.
  std::mt19937_64 gen(2024);
  for (int trial = 0; trial < 200; ++trial) {
    const Layout layout = test::RandomSlicedPermutation(gen, 7);
    const int64_t elem_size = kElemSizes[gen() % 5];
    ExpectMatchesNaive(elem_size, layout, static_cast<int64_t>(gen() % 16),
                       static_cast<int64_t>(gen() % 16), gen());
  }
}

TEST(StridedCopyHostTest, ZeroElementCopiesAcceptNullPointers) {
  const std::vector<int64_t> sizes = {3, 0, 5};
  EXPECT_TRUE(StridedCopyHost(nullptr, nullptr, 4, sizes, {0, 5, 1}, {0, 5, 1}).ok());
}

void ExpectInvalid(const absl::Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(message));
}

TEST(StridedCopyHostTest, RejectsBadArguments) {
  uint8_t dst[64], src[64];
  ExpectInvalid(StridedCopyHost(dst, src, 4, {2, 3, -1}, {3, 1, 1}, {3, 1, 1}),
                "StridedCopyHost: dim 2 has size -1");
  ExpectInvalid(StridedCopyHost(dst, src, 4, {2, 3}, {3}, {3, 1}),
                "StridedCopyHost: sizes has 2 dims but dst_strides has 1 and src_strides has 2");
  for (int64_t bad : {0, 3, 32, -4}) {
    ExpectInvalid(
        StridedCopyHost(dst, src, bad, {2}, {1}, {1}),
        "StridedCopyHost: elem_size must be 1, 2, 4, 8 or 16 bytes, got " + std::to_string(bad));
  }
  ExpectInvalid(StridedCopyHost(dst, src, 4, {2, 3}, {3, 1}, {3, -1}),
                "StridedCopyHost: dim 1 has a negative stride");
  ExpectInvalid(StridedCopyHost(dst, src, 4, {int64_t{1} << 32, int64_t{1} << 32}, {1, 1}, {1, 1}),
                "hold more than 2^63 - 1 elements");
  ExpectInvalid(StridedCopyHost(dst, src, 8, {2, 2}, {2, 1}, {int64_t{1} << 61, 1}),
                "StridedCopyHost: the src layout");
  ExpectInvalid(StridedCopyHost(nullptr, src, 4, {2}, {1}, {1}),
                "StridedCopyHost: null dst for a copy of 2 elements");
  ExpectInvalid(StridedCopyHost(dst, nullptr, 4, {2}, {1}, {1}), "null src");

  ExpectInvalid(StridedCopyHost(dst, src, 4, {3, 2}, {0, 1}, {2, 1}),
                "StridedCopyHost: dst has stride 0 on dim 0 of size 3");

  std::vector<int64_t> sizes(13, 2), dst_strides(13), src_strides(13);
  for (int d = 0; d < 13; ++d) {
    dst_strides[d] = int64_t{1} << (12 - d);
    src_strides[d] = int64_t{1} << d;
  }
  std::vector<uint8_t> big(8192);
  ExpectInvalid(StridedCopyHost(big.data(), big.data(), 1, sizes, dst_strides, src_strides),
                "StridedCopyHost: 13 dims remain after merging");
}

// A destination with stride 0 on a dim of size > 1 would have one location written
// several times: the host path would keep the last write and the kernel an arbitrary one.
// The validation both share (PrepareStridedCopy) refuses it, whatever the op's name; a
// stride 0 on a size-1 dim, on the source (a broadcast read) or in an empty copy is fine.
TEST(StridedCopyHostTest, AliasedDestinationIsRefusedByTheSharedValidation) {
  uint8_t dst[64] = {}, src[64] = {};
  for (const char* op : {"StridedCopyHost", "StridedCopyDevice"}) {
    SCOPED_TRACE(op);
    ExpectInvalid(
        internal::PrepareStridedCopy(op, dst, src, 4, {2, 3, 2}, {2, 0, 1}, {6, 2, 1}).status(),
        std::string(op) + ": dst has stride 0 on dim 1 of size 3");
    EXPECT_TRUE(internal::PrepareStridedCopy(op, dst, src, 4, {1, 2}, {0, 1}, {2, 1}).ok());
    EXPECT_TRUE(internal::PrepareStridedCopy(op, dst, src, 4, {3, 2}, {2, 1}, {0, 1}).ok());
    EXPECT_TRUE(internal::PrepareStridedCopy(op, nullptr, nullptr, 4, {3, 0}, {0, 1}, {0, 1}).ok());
  }
  for (int i = 0; i < 64; ++i) src[i] = static_cast<uint8_t>(i + 1);
  ExpectInvalid(StridedCopyHost(dst, src, 1, {4}, {0}, {1}), "dst has stride 0 on dim 0");
  EXPECT_EQ(dst[0], 0);  // refused before any byte moved
}

}  // namespace
}  // namespace sdrt
