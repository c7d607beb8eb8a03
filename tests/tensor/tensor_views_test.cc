#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A contiguous int32 CPU tensor holding 0, 1, 2, ... in row-major order.
Tensor Arange(IntSpan shape) { return test::Arange(shape, DType::kInt32); }

// All elements in row-major logical order, read through the strides.
std::vector<int32_t> Values(const Tensor& t) {
  Tensor packed = *t.Contiguous();
  return std::vector<int32_t>(packed.data<int32_t>(), packed.data<int32_t>() + packed.numel());
}

TEST(Views, NarrowSharesStorageAndOffsets) {
  Tensor t = Arange({4, 5});
  Tensor rows = *t.Narrow(0, 1, 2);
  EXPECT_EQ(rows.storage(), t.storage());
  EXPECT_EQ(rows.storage_offset(), 5);
  EXPECT_THAT(Values(rows), ElementsAre(5, 6, 7, 8, 9, 10, 11, 12, 13, 14));
  EXPECT_THAT(Values(*t.Narrow(-1, -2, 2)), ElementsAre(3, 4, 8, 9, 13, 14, 18, 19));
  EXPECT_EQ(t.Narrow(1, 5, 0)->numel(), 0);  // empty narrow at the end is allowed
  absl::Status bad = t.Narrow(1, 3, 3).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("Narrow"));
  EXPECT_THAT(bad.message(), HasSubstr("dim 1 of size 5"));
  EXPECT_THAT(t.Narrow(2, 0, 1).status().message(), HasSubstr("dim 2 out of range"));
}

TEST(Views, SliceWithStepAndClamping) {
  Tensor t = Arange({10});
  EXPECT_THAT(Values(*t.Slice(0, 1, 8, 3)), ElementsAre(1, 4, 7));
  EXPECT_THAT(Values(*t.Slice(0, -3, 100)), ElementsAre(7, 8, 9));
  EXPECT_EQ(t.Slice(0, 8, 2)->numel(), 0);
  EXPECT_EQ(t.Slice(0, 1, 8, 3)->strides()[0], 3);
  const absl::Status step = t.Slice(0, 0, 5, 0).status();
  EXPECT_EQ(step.code(), absl::StatusCode::kInvalidArgument) << step;
  EXPECT_THAT(step.message(), HasSubstr("step 0"));
  Tensor m = Arange({3, 4});
  EXPECT_THAT(Values(*m.Slice(1, 0, 4, 2)), ElementsAre(0, 2, 4, 6, 8, 10));
}

TEST(Views, SelectRemovesTheDim) {
  Tensor t = Arange({2, 3, 4});
  Tensor s = *t.Select(1, -1);
  EXPECT_THAT(s.shape(), ElementsAre(2, 4));
  EXPECT_THAT(Values(s), ElementsAre(8, 9, 10, 11, 20, 21, 22, 23));
  const absl::Status index = t.Select(0, 2).status();
  EXPECT_EQ(index.code(), absl::StatusCode::kInvalidArgument) << index;
  EXPECT_THAT(index.message(), HasSubstr("index 2 out of range"));
  Tensor scalar = *Arange({3}).Select(0, 1);
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(Values(scalar)[0], 1);
}

TEST(Views, ViewFollowsPyTorchStrideRules) {
  Tensor t = Arange({2, 3, 4});
  Tensor v = *t.View({6, -1});
  EXPECT_THAT(v.shape(), ElementsAre(6, 4));
  EXPECT_EQ(v.data_ptr(), t.data_ptr());
  // A narrowed dim 0 keeps the inner dims viewable together.
  Tensor n = *t.Narrow(0, 1, 1);
  EXPECT_THAT(n.View({3, 4})->strides(), ElementsAre(4, 1));
  // Columns of a matrix cannot be flattened without a copy.
  Tensor cols = *Arange({4, 6}).Narrow(1, 0, 3);
  absl::Status s = cols.View({12}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("Reshape"));
  // ...but merging only its row dim with a new unit dim works.
  EXPECT_THAT(cols.View({4, 1, 3})->strides(), ElementsAre(6, 3, 1));
  s = t.View({5, -1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("invalid for input of size 24"));
  s = t.View({-1, -1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("only one dim"));
  EXPECT_THAT(Arange({}).View({1, 1})->shape(), ElementsAre(1, 1));
  s = Arange({0, 3}).View({3, 0, -1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("invalid"));
  EXPECT_THAT(Arange({0, 3}).View({3, 0})->shape(), ElementsAre(3, 0));
}

TEST(Views, ReshapeCopiesOnlyWhenNeeded) {
  Tensor cols = *Arange({4, 6}).Narrow(1, 2, 2);
  Tensor r = *cols.Reshape({8});
  EXPECT_NE(r.storage(), cols.storage());
  EXPECT_THAT(Values(r), ElementsAre(2, 3, 8, 9, 14, 15, 20, 21));
  Tensor t = Arange({4, 6});
  EXPECT_EQ(t.Reshape({24})->storage(), t.storage());
}

TEST(Views, Flatten) {
  Tensor t = Arange({2, 3, 4, 5});
  EXPECT_THAT(t.Flatten()->shape(), ElementsAre(120));
  EXPECT_THAT(t.Flatten(1, 2)->shape(), ElementsAre(2, 12, 5));
  EXPECT_THAT(t.Flatten(-2)->shape(), ElementsAre(2, 3, 20));
  EXPECT_THAT(Arange({}).Flatten()->shape(), ElementsAre(1));
  const absl::Status order = t.Flatten(2, 1).status();
  EXPECT_EQ(order.code(), absl::StatusCode::kInvalidArgument) << order;
  EXPECT_THAT(order.message(), HasSubstr("start_dim 2 is after end_dim 1"));
  Tensor transposed = *Tensor::FromStorage(t.storage(), DType::kInt32, {4, 30}, {1, 4});
  Tensor flat = *transposed.Flatten();
  EXPECT_EQ(Values(flat)[1], 4);  // copied in logical order
}

}  // namespace
}  // namespace sdrt
