// Tests of the convert plan (tensor/backend/convert_plan.h), the index arithmetic of the
// float conversion kernel: which group size a pair of addresses gets, that the units cover
// every element once in order with every group's accesses aligned, and a host run of the
// kernel's loop (the same plan, units and FloatCodec conversions, accesses as memcpy) against
// ConvertFloats for every dtype pair at awkward addresses.
#include "sdrt/tensor/backend/convert_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "sdrt/tensor/internal/float_cast.h"

namespace sdrt::internal {
namespace {

constexpr DType kFloatDTypes[] = {DType::kFloat32,      DType::kBFloat16,   DType::kFloat16,
                                  DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E8M0FNU};

TEST(ConvertPlanTest, GroupsAreSixteenBytesOnTheWiderSide) {
  EXPECT_EQ(GroupElements(4, 2), 4);
  EXPECT_EQ(GroupElements(2, 4), 4);
  EXPECT_EQ(GroupElements(1, 4), 4);
  EXPECT_EQ(GroupElements(2, 1), 8);
  EXPECT_EQ(GroupElements(2, 2), 8);
  EXPECT_EQ(GroupElements(1, 1), 16);
}

TEST(ConvertPlanTest, PicksTheGroupBothSidesCanReach) {
  // float32 -> bfloat16, both 16-byte aligned: groups of 4 from the first element.
  ConvertPlan p = BuildConvertPlan(0x1000, 2, 0x2000, 4, 10);
  EXPECT_EQ(p.head, 0);
  EXPECT_EQ(p.groups, 2);
  EXPECT_EQ(p.vector, 4);
  EXPECT_EQ(ConvertPlanItems(p), 4);  // 2 groups and a tail of 2
  // Both one element past a boundary: a head of 3 puts both on the next one.
  p = BuildConvertPlan(0x1002, 2, 0x2004, 4, 10);
  EXPECT_EQ(p.head, 3);
  EXPECT_EQ(p.groups, 1);
  EXPECT_EQ(p.vector, 4);
  // The sides apart by one element: no head reaches both boundaries; one access per element.
  p = BuildConvertPlan(0x1002, 2, 0x2000, 4, 10);
  EXPECT_EQ(p.head, 0);
  EXPECT_EQ(p.groups, 10);
  EXPECT_EQ(p.vector, 1);
  // A bfloat16 at an odd address: every element byte by byte.
  p = BuildConvertPlan(0x1001, 2, 0x2000, 4, 10);
  EXPECT_EQ(p.head, 10);
  EXPECT_EQ(p.groups, 0);
  EXPECT_EQ(ConvertPlanItems(p), 10);
  // Fewer elements than the head: all head.
  p = BuildConvertPlan(0x1001, 1, 0x2001, 1, 5);
  EXPECT_EQ(p.head, 5);
  EXPECT_EQ(p.groups, 0);
  // float8 -> float8 at the same offset from a boundary: groups of 16 after a head of 15.
  p = BuildConvertPlan(0x1001, 1, 0x3001, 1, 100);
  EXPECT_EQ(p.head, 15);
  EXPECT_EQ(p.groups, 5);
  EXPECT_EQ(p.vector, 16);
  // Nothing to convert.
  p = BuildConvertPlan(0x1000, 2, 0x2000, 4, 0);
  EXPECT_EQ(ConvertPlanItems(p), 0);
}

TEST(ConvertPlanTest, UnitsCoverEveryElementOnceWithAlignedGroups) {
  const int64_t sizes[] = {1, 2, 4};
  std::mt19937_64 gen(11);
  for (int trial = 0; trial < 20000; ++trial) {
    const int64_t src_bytes = sizes[gen() % 3], dst_bytes = sizes[gen() % 3];
    const uintptr_t src = 0x10000 + gen() % 64, dst = 0x40000 + gen() % 64;
    const int64_t count = static_cast<int64_t>(gen() % 80);
    const ConvertPlan p = BuildConvertPlan(dst, dst_bytes, src, src_bytes, count);
    SCOPED_TRACE(testing::Message() << "src " << src << "/" << src_bytes << " dst " << dst << "/"
                                    << dst_bytes << " count " << count);
    ASSERT_EQ(p.count, count);
    ASSERT_TRUE(p.vector == GroupElements(src_bytes, dst_bytes) || p.vector == 1);
    ASSERT_GE(p.head, 0);
    ASSERT_GE(p.groups, 0);
    ASSERT_LE(p.head + p.groups * p.vector, count);
    if (p.groups > 0) {
      ASSERT_LT(p.head, p.vector);
    }
    int64_t next = 0;
    for (int64_t i = 0; i < ConvertPlanItems(p); ++i) {
      const ConvertItem item = ConvertPlanItemAt(p, i);
      ASSERT_EQ(item.first, next);
      if (item.group) {
        ASSERT_EQ((src + item.first * src_bytes) % (p.vector * src_bytes), 0u);
        ASSERT_EQ((dst + item.first * dst_bytes) % (p.vector * dst_bytes), 0u);
        next += p.vector;
      } else {
        ++next;
      }
    }
    ASSERT_EQ(next, count);
  }
}

// The kernel's loop on the host: each unit of `plan` converted as ConvertKernel converts it.
template <DType From, DType To>
void RunPlan(const ConvertPlan& plan, char* dst, const char* src) {
  using In = typename FloatCodec<From>::Bits;
  using Out = typename FloatCodec<To>::Bits;
  for (int64_t i = 0; i < ConvertPlanItems(plan); ++i) {
    const ConvertItem item = ConvertPlanItemAt(plan, i);
    const int64_t n = item.group ? plan.vector : 1;
    for (int64_t k = 0; k < n; ++k) {
      In in;
      std::memcpy(&in, src + (item.first + k) * static_cast<int64_t>(sizeof(In)), sizeof(In));
      const Out out = ConvertFloat<From, To>(in);
      std::memcpy(dst + (item.first + k) * static_cast<int64_t>(sizeof(Out)), &out, sizeof(Out));
    }
  }
}

TEST(ConvertPlanTest, HostRunOfTheKernelLoopMatchesConvertFloats) {
  std::mt19937_64 gen(5);
  for (DType from : kFloatDTypes) {
    for (DType to : kFloatDTypes) {
      if (from == to) continue;
      const int64_t in_bytes = ElementBits(from) / 8, out_bytes = ElementBits(to) / 8;
      for (const int64_t count : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{1000}}) {
        for (const auto& [src_misalign, dst_misalign] :
             std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 0}, {4, 2}, {3, 3}, {8, 12}}) {
          SCOPED_TRACE(testing::Message()
                       << DTypeName(from) << " -> " << DTypeName(to) << " count " << count
                       << " misalign " << src_misalign << "/" << dst_misalign);
          // Random bits: NaNs, infinities, subnormals and ties among them.
          std::vector<char> src(static_cast<size_t>(count * in_bytes + 32));
          for (char& c : src) c = static_cast<char>(gen());
          std::vector<char> want(static_cast<size_t>(count * out_bytes + 32), 0x5a);
          std::vector<char> got = want;
          const char* in = src.data() + src_misalign;
          ASSERT_TRUE(ConvertFloats(in, from, want.data() + dst_misalign, to, count));
          const ConvertPlan plan =
              BuildConvertPlan(reinterpret_cast<uintptr_t>(got.data() + dst_misalign), out_bytes,
                               reinterpret_cast<uintptr_t>(in), in_bytes, count);
          VisitFloatDType(from, false, [&](auto f) {
            return VisitFloatDType(to, false, [&](auto t) {
              if constexpr (decltype(f)::value != decltype(t)::value) {
                RunPlan<decltype(f)::value, decltype(t)::value>(plan, got.data() + dst_misalign,
                                                                in);
              }
              return true;
            });
          });
          ASSERT_EQ(got, want);  // the bytes around the destination included
        }
      }
    }
  }
}

}  // namespace
}  // namespace sdrt::internal
