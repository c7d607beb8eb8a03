// Sub-byte tensors (4- and 6-bit elements, tensor/dtype.h): whole bytes or an error.
#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tensor/backend/dlpack.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

constexpr DType kF4 = DType::kFloat4E2M1FNx2;
constexpr DType kF6 = DType::kFloat6E2M3FN;

std::string Bytes(const Tensor& t) {
  const Tensor c = *t.Contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.nbytes()));
}

// A contiguous tensor whose byte k is k.
Tensor Counting(IntSpan shape, DType dtype) {
  Tensor t = *Tensor::Empty(shape, dtype);
  for (int64_t k = 0; k < t.nbytes(); ++k) t.data<uint8_t>()[k] = static_cast<uint8_t>(k);
  return t;
}

TEST(SubByte, FactoriesNeedWholeBytes) {
  EXPECT_EQ(Tensor::Empty({4, 8}, kF4)->nbytes(), 16);
  EXPECT_EQ(Tensor::Empty({4, 3}, kF4)->nbytes(), 6);  // rows of 12 bits, 48 bits in all
  EXPECT_EQ(Tensor::Zeros({2, 4}, kF6)->nbytes(), 6);
  absl::Status odd = Tensor::Empty({3}, kF4).status();
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(odd.message(), HasSubstr("12 bits, not a whole number of bytes"));
  EXPECT_FALSE(Tensor::Empty({}, kF4).ok());  // one 4-bit element
  EXPECT_TRUE(Tensor::Meta({4, 8}, kF6).ok());
}

TEST(SubByte, ViewsCutOnlyAtByteBoundaries) {
  const Tensor w = Counting({4, 8}, kF4);  // rows of 4 bytes
  absl::StatusOr<Tensor> left = w.Narrow(1, 0, 4);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(Bytes(*left), std::string("\x00\x01\x04\x05\x08\x09\x0c\x0d", 8));
  absl::StatusOr<Tensor> right = w.Narrow(1, 4, 4);
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_EQ(Bytes(*right), std::string("\x02\x03\x06\x07\x0a\x0b\x0e\x0f", 8));
  absl::Status three = w.Narrow(1, 0, 3).status();
  EXPECT_EQ(three.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(three.message(), HasSubstr("Narrow: float4_e2m1fn_x2[4, 3]"));
  EXPECT_THAT(three.message(), HasSubstr("its contiguous runs hold 3 elements"));
  EXPECT_THAT(three.message(), HasSubstr("a 4-bit element cannot be cut inside a byte"));
  EXPECT_THAT(w.Narrow(1, 1, 2).status().message(), HasSubstr("it starts at element 1"));
  EXPECT_THAT(w.Slice(1, 0, 8, 2).status().message(), HasSubstr("not adjacent"));
  EXPECT_FALSE(w.Select(1, 2).ok());
  // Rows of 12 bits: two rows together are whole bytes, one alone is not.
  const Tensor odd = Counting({4, 3}, kF4);
  absl::StatusOr<Tensor> two_rows = odd.Narrow(0, 2, 2);
  ASSERT_TRUE(two_rows.ok()) << two_rows.status();
  EXPECT_EQ(Bytes(*two_rows), std::string("\x03\x04\x05", 3));
  EXPECT_FALSE(odd.Narrow(0, 1, 1).ok());
  EXPECT_FALSE(odd.Narrow(0, 0, 1).ok());
  // Reshapes keep the elements; an empty view is fine anywhere.
  EXPECT_EQ(Bytes(*w.View({32})), Bytes(w));
  EXPECT_EQ(Bytes(*w.View({2, 16})), Bytes(w));
  EXPECT_TRUE(w.Narrow(1, 3, 0).ok());
}

TEST(SubByte, SixBitElementsGoFourToThreeBytes) {
  const Tensor w = Counting({2, 8}, kF6);  // rows of 6 bytes
  absl::StatusOr<Tensor> right = w.Narrow(1, 4, 4);
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_EQ(Bytes(*right), std::string("\x03\x04\x05\x09\x0a\x0b", 6));
  EXPECT_FALSE(w.Narrow(1, 2, 4).ok());  // starts at bit 12
  // CopyFrom into a strided destination: the bytes land where they belong.
  Tensor dst = *Tensor::Zeros({2, 8}, kF6);
  Tensor dst_right = *dst.Narrow(1, 4, 4);
  ASSERT_TRUE(dst_right.CopyFrom(*right).ok());
  EXPECT_EQ(Bytes(dst), std::string("\0\0\0\x03\x04\x05\0\0\0\x09\x0a\x0b", 12));
}

TEST(SubByte, AtByteOffsetBorrowsWhenTheOffsetIsNoWholeElement) {
  std::shared_ptr<Storage> storage = *Storage::AllocateCpu(64);
  for (int k = 0; k < 64; ++k) static_cast<uint8_t*>(storage->data())[k] = static_cast<uint8_t>(k);
  absl::StatusOr<Tensor> at16 = Tensor::AtByteOffset(storage, 16, kF6, {4});  // 21.3 elements
  ASSERT_TRUE(at16.ok()) << at16.status();
  EXPECT_EQ(at16->data_ptr(), static_cast<char*>(storage->data()) + 16);
  EXPECT_EQ(Bytes(*at16), std::string("\x10\x11\x12", 3));
  absl::StatusOr<Tensor> f4 = Tensor::AtByteOffset(storage, 5, kF4, {2, 2});
  ASSERT_TRUE(f4.ok()) << f4.status();
  EXPECT_EQ(f4->storage(), storage);  // 10 elements: a view of the same storage
  EXPECT_EQ(f4->storage_offset(), 10);
  EXPECT_EQ(Tensor::AtByteOffset(storage, 62, kF6, {4}).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Tensor::AtByteOffset(storage, 2, DType::kFloat32, {1})->data_ptr(),
            static_cast<char*>(storage->data()) + 2);
}

TEST(SubByte, DLPackRoundTripIsPackedAsDLPack11Says) {
  const Tensor w = Counting({4, 8}, kF4);
  absl::StatusOr<DLManagedTensor*> managed = ToDLPack(*w.Narrow(1, 4, 4));
  ASSERT_TRUE(managed.ok()) << managed.status();
  const DLTensor& dl = (*managed)->dl_tensor;
  EXPECT_EQ(dl.dtype.code, 17);  // kDLFloat4_e2m1fn
  EXPECT_EQ(dl.dtype.bits, 4);
  EXPECT_EQ(dl.shape[1], 4);
  EXPECT_EQ(dl.strides[0], 8);  // elements
  EXPECT_EQ(dl.data, static_cast<const char*>(w.data_ptr()) + 2);
  absl::StatusOr<Tensor> back = FromDLPack(*managed);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype(), kF4);
  EXPECT_EQ(Bytes(*back), Bytes(*w.Narrow(1, 4, 4)));
}

}  // namespace
}  // namespace sdrt
