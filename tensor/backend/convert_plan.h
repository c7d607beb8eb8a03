// Index arithmetic of the float conversion kernel (cuda/kernels.h ConvertFloatsDevice),
// compiled for the host and the GPU, so that it is tested on any machine
// (tests/tensor/backend/convert_plan_test.cc runs a plan on the host with the kernel's own
// functions and compares it with ConvertFloats, tensor/internal/float_cast.h).
//
// Note [Convert plans]: a dense conversion of `count` elements of `src_bytes` bytes each at
// `src` into elements of `dst_bytes` bytes each at `dst` (a different number of bytes per
// element on the two sides, so a copy plan's byte runs do not apply) is cut into
//   1. a head of elements converted one at a time, read and written byte by byte (any
//      address), until both sides sit on a group boundary;
//   2. `groups` groups of `vector` elements, each read in one access of vector * src_bytes
//      bytes and written in one of vector * dst_bytes bytes;
//   3. a tail of the elements left, one at a time like the head.
// `vector` is GroupElements (16-byte accesses on the wider side) when one head puts both
// sides on such a boundary, else 1 (an access per element, of its own width) when both
// sides are element aligned, else nothing is grouped (head = count): a conversion between a
// bucket slot and a local may start at any byte. The kernel has an instance for each of the
// two vectors. Every offset is int64.
//
// This header has no CUDA or absl dependencies; every function is constexpr or inline.
// Not API: in namespace sdrt::internal (hidden, never in libsdrt.so's exported symbols).
#ifndef SDRT_TENSOR_BACKEND_CONVERT_PLAN_H_
#define SDRT_TENSOR_BACKEND_CONVERT_PLAN_H_

#include <cstdint>
#include <initializer_list>

#include "sdrt/tensor/backend/index_math.h"

namespace sdrt::internal {

// Elements in a group of a conversion between elements of `src_bytes` and `dst_bytes`
// bytes: 16 bytes on the wider side (4 float32, 8 bfloat16, 16 float8).
SDRT_HD constexpr int64_t GroupElements(int64_t src_bytes, int64_t dst_bytes) {
  return 16 / (src_bytes > dst_bytes ? src_bytes : dst_bytes);
}

// A dense conversion cut as Note [Convert plans] says. Plain data: passed to kernels by
// value. The tail is count - head - groups * vector elements.
struct ConvertPlan {
  int64_t count;   // elements
  int64_t head;    // elements before the first group
  int64_t groups;  // groups after the head
  int64_t vector;  // elements per group: GroupElements(src_bytes, dst_bytes) or 1
};

// The plan of converting `count` >= 0 elements of `src_bytes` bytes at `src_address` into
// elements of `dst_bytes` bytes at `dst_address` (both sizes in {1, 2, 4, 8}).
inline ConvertPlan BuildConvertPlan(uintptr_t dst_address, int64_t dst_bytes, uintptr_t src_address,
                                    int64_t src_bytes, int64_t count) {
  const uint64_t dst = dst_address, src = src_address;
  if (src % static_cast<uint64_t>(src_bytes) == 0 && dst % static_cast<uint64_t>(dst_bytes) == 0) {
    for (const int64_t vector : {GroupElements(src_bytes, dst_bytes), int64_t{1}}) {
      const uint64_t src_group = static_cast<uint64_t>(vector * src_bytes);
      const uint64_t dst_group = static_cast<uint64_t>(vector * dst_bytes);
      // The elements up to src's next group boundary; dst must reach one with them.
      const int64_t head =
          static_cast<int64_t>((src_group - src % src_group) % src_group) / src_bytes;
      if ((dst + static_cast<uint64_t>(head * dst_bytes)) % dst_group != 0) continue;
      if (head >= count) return {count, count, 0, vector};
      return {count, head, (count - head) / vector, vector};
    }
  }
  return {count, count, 0, 1};
}

// Units of work of `plan`, one per kernel access pair: each head and tail element, each group.
SDRT_HD inline int64_t ConvertPlanItems(const ConvertPlan& plan) {
  return plan.count - plan.groups * (plan.vector - 1);
}

// One unit of work: the elements from `first`, a whole group or a single element.
struct ConvertItem {
  int64_t first;
  bool group;
};

// Unit `item` (0 <= item < ConvertPlanItems(plan)): head elements first, then the groups,
// then the tail elements, in element order.
SDRT_HD inline ConvertItem ConvertPlanItemAt(const ConvertPlan& plan, int64_t item) {
  if (item < plan.head) return {item, false};
  item -= plan.head;
  if (item < plan.groups) return {plan.head + item * plan.vector, true};
  return {plan.head + plan.groups * plan.vector + (item - plan.groups), false};
}

}  // namespace sdrt::internal

#endif  // SDRT_TENSOR_BACKEND_CONVERT_PLAN_H_
