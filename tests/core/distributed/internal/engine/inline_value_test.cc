// The inline values of the leaf codec (core/distributed/internal/engine/inline_value.h), what a
// broadcast root sends of the leaves that are not tensors to move: the round trip of every kind
// (0-dim tensors of every dtype, None, bool, int, float, str, bytes) exactly, through the leaf
// descriptions too (descriptors.h); what cannot travel inline; and bytes from another rank that
// are truncated, corrupted or hostile: InvalidArgument, never a crash.
#include "sdrt/core/distributed/internal/engine/inline_value.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt::internal {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;

std::string Cbor(const json& j) {
  const std::vector<uint8_t> bytes = json::to_cbor(j);
  return std::string(bytes.begin(), bytes.end());
}

std::string TensorBytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.nbytes()));
}

// `value` through the leaf codec: described inline, encoded, decoded.
Value RoundTrip(const Value& value) {
  LeafLayout leaf;
  leaf.path = "x";
  leaf.kind = LeafLayout::Kind::kInline;
  absl::StatusOr<std::string> cbor = EncodeInlineValue("x", value);
  EXPECT_TRUE(cbor.ok()) << cbor.status();
  if (!cbor.ok()) return Value();
  leaf.inline_value = *cbor;
  absl::StatusOr<std::vector<LeafLayout>> decoded = DecodeLeafLayouts(EncodeLeafLayouts({leaf}), 0);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  if (!decoded.ok() || decoded->size() != 1) return Value();
  EXPECT_EQ((*decoded)[0].path, "x");
  EXPECT_NE((*decoded)[0].value, nullptr);
  return (*decoded)[0].value == nullptr ? Value() : *(*decoded)[0].value;
}

TEST(InlineValue, ZeroDimTensorsOfEveryDTypeTravelExactly) {
  for (const DType dtype : test::kWholeByteDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor want = test::ValuePattern({}, dtype, 7);
    const Value got = RoundTrip(Value(want));
    ASSERT_EQ(got.kind(), ValueKind::kTensor);
    EXPECT_EQ(got.as_tensor().dim(), 0);
    EXPECT_TRUE(got.as_tensor().device().is_cpu());
    EXPECT_EQ(got.as_tensor().dtype(), dtype);
    EXPECT_EQ(TensorBytes(got.as_tensor()), TensorBytes(want));
  }
}

TEST(InlineValue, NonTensorLeavesTravelExactly) {
  const std::string text("a\0b\xff", 4);
  EXPECT_TRUE(RoundTrip(Value(None{})).is_none());
  EXPECT_TRUE(RoundTrip(Value(true)).as_bool());
  EXPECT_FALSE(RoundTrip(Value(false)).as_bool());
  EXPECT_EQ(RoundTrip(Value(std::numeric_limits<int64_t>::min())).as_int(),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(RoundTrip(Value(std::numeric_limits<int64_t>::max())).as_int(),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(RoundTrip(Value(1.0 / 3.0)).as_double(), 1.0 / 3.0);
  EXPECT_TRUE(std::signbit(RoundTrip(Value(-0.0)).as_double()));
  EXPECT_EQ(RoundTrip(Value(std::numeric_limits<double>::infinity())).as_double(),
            std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(RoundTrip(Value(std::nan(""))).as_double()));
  EXPECT_EQ(RoundTrip(Value(text)).as_string(), text);
  EXPECT_EQ(RoundTrip(Value(std::string())).as_string(), "");
  EXPECT_EQ(RoundTrip(Value(Bytes{text})).as_bytes().data, text);
}

TEST(InlineValue, WhatIsNotAValueCannotTravelInline) {
  const auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({1}));
  const Value dtensor(*DTensor::Make(test::Arange({2}), mesh, {Placement::Shard(0)}, {2}));
  const ShardMetadata box{{0}, {2}, {0, Device::CPU()}};
  const Value sharded(*ShardedTensor::Make({2}, DType::kFloat32, {box}, {{test::Arange({2}), box}}));
  for (const Value* v : {&dtensor, &sharded}) {
    const absl::StatusOr<std::string> s = EncodeInlineValue("m.1", *v);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    EXPECT_THAT(s.status().message(), HasSubstr("'m.1': a "));
    EXPECT_THAT(s.status().message(), HasSubstr("cannot be broadcast from a full state dict"));
  }
}

// Decodes `cbor`, which must be refused: InvalidArgument "inline value: ...".
void ExpectMalformed(const std::string& cbor, const std::string& words) {
  const absl::StatusOr<Value> value = DecodeInlineValue(cbor);
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument) << value.status();
  EXPECT_THAT(std::string(value.status().message()), StartsWith("inline value: "));
  EXPECT_THAT(value.status().message(), HasSubstr(words));
}

// Nesting deeper than any value (100,000 arrays in 100 KB): refused, not a stack overflow;
// so is a header claiming 2^62 items.
TEST(InlineValue, DeepNestingAndHugeLengthsAreRefused) {
  std::string deep(100000, '\x81');  // arrays of one item ...
  deep += '\x80';                    // ... down to an empty one
  ExpectMalformed(deep, "not one bounded CBOR item");
  for (const char header : {'\x9b', '\xbb'}) {  // array, map with an 8-byte length
    std::string huge(1, header);
    huge += std::string("\x40\0\0\0\0\0\0\0", 8);
    ExpectMalformed(huge, "not one bounded CBOR item");
  }
  ExpectMalformed("", "not one bounded CBOR item");
  ExpectMalformed(Cbor(1) + "x", "not one bounded CBOR item");
}

TEST(InlineValue, HostileValuesAreRefused) {
  const json::binary_t two_bytes(std::vector<uint8_t>{1, 2});
  ExpectMalformed(Cbor(5), "an inline value without a kind");
  ExpectMalformed(Cbor(json::object()), "an inline value without a kind");
  ExpectMalformed(Cbor({{"k", 3}}), "an inline value without a kind");
  ExpectMalformed(Cbor({{"k", "int"}}), "an inline int without a value");
  ExpectMalformed(Cbor({{"k", "int"}, {"v", "7"}}), "an inline int of the wrong type");
  ExpectMalformed(Cbor({{"k", "int"}, {"v", 1.5}}), "an inline int of the wrong type");
  ExpectMalformed(Cbor({{"k", "bool"}, {"v", 1}}), "an inline bool of the wrong type");
  ExpectMalformed(Cbor({{"k", "float"}, {"v", "x"}}), "an inline float of the wrong type");
  ExpectMalformed(Cbor({{"k", "str"}, {"v", "text, not binary"}}),
                  "an inline str of the wrong type");
  ExpectMalformed(Cbor({{"k", "bytes"}, {"v", 1}}), "an inline bytes of the wrong type");
  ExpectMalformed(Cbor({{"k", "set"}, {"v", two_bytes}}), "unknown inline kind set");
  ExpectMalformed(Cbor({{"k", "scalar"}, {"v", two_bytes}}), "unknown inline kind scalar");
  ExpectMalformed(Cbor({{"k", "scalar"}, {"d", "complex128"}, {"v", two_bytes}}), "complex128");
  ExpectMalformed(Cbor({{"k", "scalar"}, {"d", "float32"}, {"v", two_bytes}}),
                  "scalar of the wrong size");
  // A well-formed scalar decodes.
  const absl::StatusOr<Value> ok =
      DecodeInlineValue(Cbor({{"k", "scalar"}, {"d", "bfloat16"}, {"v", two_bytes}}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(TensorBytes(ok->as_tensor()), std::string("\x01\x02", 2));
}

// A skeleton of plain tensors and inline values, as a broadcast root sends it: every
// truncation and many corruptions are refused or decode, never crash.
TEST(InlineValue, TruncatedAndCorruptedDescriptionsAreRefusedWithoutCrashing) {
  std::vector<LeafLayout> leaves(3);
  leaves[0].path = "w";
  leaves[0].shape = {3, 2};
  leaves[1].path = "step";
  leaves[1].kind = LeafLayout::Kind::kInline;
  leaves[1].inline_value = *EncodeInlineValue("step", Value(int64_t{12}));
  leaves[2].path = "scalar";
  leaves[2].kind = LeafLayout::Kind::kInline;
  leaves[2].inline_value = *EncodeInlineValue("scalar", Value(test::Arange({}, DType::kBFloat16, 3)));
  const std::string good = EncodeLeafLayouts(leaves);
  ASSERT_TRUE(DecodeLeafLayouts(good, 0).ok());
  for (size_t n = 0; n < good.size(); ++n) {
    const absl::StatusOr<std::vector<LeafLayout>> cut = DecodeLeafLayouts(good.substr(0, n), 2);
    ASSERT_FALSE(cut.ok()) << n;
    EXPECT_THAT(cut.status().message(), HasSubstr("rank 2 sent a malformed description"));
  }
  EXPECT_FALSE(DecodeLeafLayouts(good + "x", 0).ok());
  int refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x20}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::string bad = good;
      bad[i] = static_cast<char>(static_cast<uint8_t>(bad[i]) ^ flip);
      const absl::StatusOr<std::vector<LeafLayout>> got = DecodeLeafLayouts(bad, 0);
      if (got.ok()) continue;  // e.g. a changed letter of a path or a value
      ++refused;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    }
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace sdrt::internal
