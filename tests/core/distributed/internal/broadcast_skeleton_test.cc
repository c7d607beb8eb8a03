// The broadcast skeleton codec (core/distributed/internal/broadcast_skeleton.h): the round
// trip of every leaf kind and dtype (tensors as dtype and shape, 0-dim tensors and
// non-tensor values inline), the leaves the root cannot send, and the decoding of bytes
// from another rank that are truncated, corrupted or hostile: InvalidArgument, never a
// crash.
#include "sdrt/core/distributed/internal/broadcast_skeleton.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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

// Encodes `full`, expecting success; `tensors` receives the tensor entries' tensors.
std::string Encode(const Map& full, std::vector<Tensor>* tensors) {
  absl::StatusOr<std::string> bytes = EncodeBroadcastSkeleton(full, tensors);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

TEST(BroadcastSkeleton, TensorsTravelAsDTypeAndShapeInWalkOrder) {
  Map full;
  std::vector<Tensor> sources;
  for (DType dtype : test::kWholeByteDTypes) {
    sources.push_back(test::HashBytes({2, 3}, dtype, 1));
    full.Set(std::string(DTypeName(dtype)), sources.back());
  }
  const Tensor empty = *Tensor::Empty({4, 0}, DType::kInt64);
  full.Set("nested", Map{{"list", List{test::Arange({5}), Tuple{empty}}}});
  sources.push_back(full.Find("nested")->as_map().Find("list")->items()[0].as_tensor());
  sources.push_back(empty);

  std::vector<Tensor> tensors;
  absl::StatusOr<std::vector<SkeletonEntry>> entries =
      DecodeBroadcastSkeleton(Encode(full, &tensors));
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), sources.size());
  ASSERT_EQ(tensors.size(), sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    const SkeletonEntry& e = (*entries)[i];
    SCOPED_TRACE(e.path);
    EXPECT_TRUE(e.is_tensor);
    EXPECT_EQ(e.dtype, sources[i].dtype());
    EXPECT_EQ(e.shape, sources[i].shape());
    EXPECT_TRUE(e.value.is_none());
    // The root's own tensors, not copies: their bytes go in the buckets.
    EXPECT_EQ(tensors[i].data_ptr(), sources[i].data_ptr());
  }
  for (int i = 0; i < test::kNumWholeByteDTypes; ++i) {
    EXPECT_EQ((*entries)[static_cast<size_t>(i)].path, DTypeName(test::kWholeByteDTypes[i]));
  }
  EXPECT_EQ((*entries)[test::kNumWholeByteDTypes].path, "nested.list.0");
  EXPECT_EQ((*entries)[test::kNumWholeByteDTypes + 1].path, "nested.list.1.0");
}

TEST(BroadcastSkeleton, ZeroDimTensorsOfEveryDTypeTravelInline) {
  Map full;
  for (DType dtype : test::kWholeByteDTypes) {
    full.Set(std::string(DTypeName(dtype)), test::HashBytes({}, dtype, 7));
  }
  std::vector<Tensor> tensors;
  absl::StatusOr<std::vector<SkeletonEntry>> entries =
      DecodeBroadcastSkeleton(Encode(full, &tensors));
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(tensors.empty());
  ASSERT_EQ(entries->size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    const SkeletonEntry& e = (*entries)[i];
    SCOPED_TRACE(full.key(i));
    EXPECT_EQ(e.path, full.key(i));
    EXPECT_FALSE(e.is_tensor);
    ASSERT_EQ(e.value.kind(), ValueKind::kTensor);
    const Tensor& got = e.value.as_tensor();
    const Tensor& want = full.value(i).as_tensor();
    EXPECT_EQ(got.dim(), 0);
    EXPECT_TRUE(got.device().is_cpu());
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(TensorBytes(got), TensorBytes(want));
    EXPECT_NE(got.data_ptr(), want.data_ptr());
  }
}

TEST(BroadcastSkeleton, NonTensorLeavesTravelInlineExactly) {
  const std::string text("a\0b\xff", 4);  // an embedded NUL and a byte that is not UTF-8
  const Map full{{"none", None{}},
                 {"yes", true},
                 {"no", false},
                 {"min", std::numeric_limits<int64_t>::min()},
                 {"max", std::numeric_limits<int64_t>::max()},
                 {"third", 1.0 / 3.0},
                 {"negative_zero", -0.0},
                 {"inf", std::numeric_limits<double>::infinity()},
                 {"nan", std::numeric_limits<double>::quiet_NaN()},
                 {"str", text},
                 {"empty_str", ""},
                 {"bytes", Bytes{text}},
                 {"empty_list", List{}},
                 {"empty_map", Map{}}};
  std::vector<Tensor> tensors;
  absl::StatusOr<std::vector<SkeletonEntry>> entries =
      DecodeBroadcastSkeleton(Encode(full, &tensors));
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(tensors.empty());
  // Empty containers have no leaves.
  ASSERT_EQ(entries->size(), 12u);
  std::vector<std::string> paths;
  for (const SkeletonEntry& e : *entries) {
    EXPECT_FALSE(e.is_tensor) << e.path;
    paths.push_back(e.path);
  }
  EXPECT_EQ(paths,
            (std::vector<std::string>{"none", "yes", "no", "min", "max", "third", "negative_zero",
                                      "inf", "nan", "str", "empty_str", "bytes"}));
  const auto value = [&](size_t i) -> const Value& { return (*entries)[i].value; };
  EXPECT_TRUE(value(0).is_none());
  EXPECT_EQ(value(1).kind(), ValueKind::kBool);
  EXPECT_TRUE(value(1).as_bool());
  EXPECT_FALSE(value(2).as_bool());
  EXPECT_EQ(value(3).as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(value(4).as_int(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(value(5).as_double(), 1.0 / 3.0);
  EXPECT_EQ(value(6).as_double(), 0.0);
  EXPECT_TRUE(std::signbit(value(6).as_double()));
  EXPECT_EQ(value(7).as_double(), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(value(8).as_double()));
  EXPECT_EQ(value(9).kind(), ValueKind::kString);
  EXPECT_EQ(value(9).as_string(), text);
  EXPECT_EQ(value(10).as_string(), "");
  EXPECT_EQ(value(11).kind(), ValueKind::kBytes);
  EXPECT_EQ(value(11).as_bytes().data, text);
}

TEST(BroadcastSkeleton, AnEmptyStateDictHasNoEntries) {
  std::vector<Tensor> tensors;
  absl::StatusOr<std::vector<SkeletonEntry>> entries =
      DecodeBroadcastSkeleton(Encode(Map{}, &tensors));
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
}

TEST(BroadcastSkeleton, MetaTensorsCannotBeSent) {
  std::vector<Tensor> tensors;
  const Map full{{"a", Map{{"w", *Tensor::Meta({2, 3}, DType::kFloat32)}}}};
  absl::Status s = EncodeBroadcastSkeleton(full, &tensors).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("'a.w': the full state dict holds a meta tensor (no data)"));
}

TEST(BroadcastSkeleton, DistributedTensorsAndOpaqueObjectsCannotBeSent) {
  auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({1}));
  const DTensor dt = *DTensor::Make(test::Arange({2}), mesh, {Placement::Replicate()}, {2});
  const Opaque opaque{std::make_shared<int>(1), "BytesIO", nullptr};
  for (const auto& [leaf, kind] : std::vector<std::pair<Value, std::string>>{
           {Value(dt), "DTensor"}, {Value(opaque), "object"}}) {
    std::vector<Tensor> tensors;
    const Map full{{"m", List{1, leaf}}};
    absl::Status s = EncodeBroadcastSkeleton(full, &tensors).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << kind;
    EXPECT_THAT(s.message(), HasSubstr("'m.1': a " + kind)) << kind;
    EXPECT_THAT(s.message(), HasSubstr("cannot be broadcast from a full state dict")) << kind;
  }
}

TEST(BroadcastSkeleton, TooDeepANestingCannotBeSent) {
  Value deep = 1;
  for (size_t i = 0; i < kMaxNestingDepth + 1; ++i) deep = Map{{"x", std::move(deep)}};
  std::vector<Tensor> tensors;
  absl::Status s = EncodeBroadcastSkeleton(deep.as_map(), &tensors).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("nested deeper than 1000 levels"));
}

// Decodes `bytes`, which must be refused: InvalidArgument "broadcast skeleton: ...".
void ExpectMalformed(const std::string& bytes, const std::string& words) {
  absl::StatusOr<std::vector<SkeletonEntry>> entries = DecodeBroadcastSkeleton(bytes);
  ASSERT_FALSE(entries.ok()) << "decoded " << entries->size() << " entries";
  EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument) << entries.status();
  EXPECT_THAT(std::string(entries.status().message()), StartsWith("broadcast skeleton: "));
  EXPECT_THAT(entries.status().message(), HasSubstr(words));
}

// A valid skeleton with a tensor entry and an inline entry of every kind.
std::string ValidSkeleton() {
  Map full{{"w", test::Arange({3, 2})},
           {"step", 12},
           {"lr", 0.5},
           {"flag", true},
           {"name", "adam"},
           {"blob", Bytes{"xyz"}},
           {"nothing", None{}},
           {"scalar", test::Arange({}, DType::kBFloat16, 3)}};
  std::vector<Tensor> tensors;
  return Encode(full, &tensors);
}

TEST(BroadcastSkeleton, EveryTruncationIsRefused) {
  const std::string bytes = ValidSkeleton();
  ASSERT_TRUE(DecodeBroadcastSkeleton(bytes).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE(absl::StrCat("first ", n, " of ", bytes.size(), " bytes"));
    ExpectMalformed(bytes.substr(0, n), "not CBOR");
  }
  ExpectMalformed(bytes + "x", "not CBOR");  // trailing bytes
}

TEST(BroadcastSkeleton, CorruptedBytesDecodeOrAreRefusedWithoutCrashing) {
  const std::string good = ValidSkeleton();
  int refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x20}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::string bad = good;
      bad[i] = static_cast<char>(static_cast<uint8_t>(bad[i]) ^ flip);
      absl::StatusOr<std::vector<SkeletonEntry>> entries = DecodeBroadcastSkeleton(bad);
      if (entries.ok()) continue;  // e.g. a changed letter of a path or a value
      ++refused;
      EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument)
          << "byte " << i << " ^ " << int{flip} << ": " << entries.status();
      EXPECT_THAT(std::string(entries.status().message()), StartsWith("broadcast skeleton: "));
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(BroadcastSkeleton, HostileStructuresAreRefused) {
  ExpectMalformed("", "not CBOR");
  ExpectMalformed("\xff\xff\xff", "not CBOR");
  ExpectMalformed(Cbor(json::array({1, 2})), "not CBOR");
  ExpectMalformed(Cbor(json{{"entries", 5}}), "not CBOR");
  ExpectMalformed(Cbor(json{{"error", "boom"}, {"code", 0}}), "not CBOR");
  ExpectMalformed(Cbor(json{{"entries", {5}}}), "an entry without a path");
  ExpectMalformed(Cbor(json{{"entries", {{{"p", 1}}}}}), "an entry without a path");
  ExpectMalformed(Cbor(json{{"entries", {{{"p", "w"}}}}}), "'w' has no dtype or shape");
  ExpectMalformed(Cbor(json{{"entries", {{{"p", "w"}, {"d", "float32"}, {"s", 3}}}}}),
                  "'w' has no dtype or shape");
  ExpectMalformed(Cbor(json{{"entries", {{{"p", "w"}, {"d", 7}, {"s", {3}}}}}}),
                  "'w' has no dtype or shape");
  ExpectMalformed(Cbor(json{{"entries", {{{"p", "w"}, {"d", "complex128"}, {"s", {3}}}}}}),
                  "complex128");
  ExpectMalformed(Cbor(json{{"entries", {{{"p", "w"}, {"d", "float32"}, {"s", {3, -1}}}}}}),
                  "'w' has a bad shape");
  ExpectMalformed(Cbor(json{{"entries", {{{"p", "w"}, {"d", "float32"}, {"s", {2.5}}}}}}),
                  "'w' has a bad shape");
  ExpectMalformed(Cbor(json{{"entries", {{{"p", "w"}, {"d", "float32"}, {"s", {"3"}}}}}}),
                  "'w' has a bad shape");
}

// An array or map header claiming 2^62 items, more than any buffer holds: refused, not an
// exception.
TEST(BroadcastSkeleton, HugeLengthsAreRefused) {
  for (const char header : {'\x9b', '\xbb'}) {  // array, map with an 8-byte length
    std::string bytes(
        "\xa1\x67"
        "entries",
        9);
    bytes += header;
    bytes += std::string("\x40\0\0\0\0\0\0\0", 8);
    ExpectMalformed(bytes, "not CBOR");
  }
}

// Nesting deeper than any skeleton (100,000 arrays in 100 KB): refused, not a stack
// overflow.
TEST(BroadcastSkeleton, DeepNestingIsRefused) {
  std::string deep = Cbor(json{{"entries", json::array()}});
  deep.pop_back();                      // the empty array
  deep += std::string(100000, '\x81');  // arrays of one item ...
  deep += '\x80';                       // ... down to an empty one
  ExpectMalformed(deep, "not CBOR");
}

TEST(BroadcastSkeleton, HostileInlineValuesAreRefused) {
  const auto one = [](json inline_value) {
    return Cbor(json{{"entries", {{{"p", "x"}, {"i", std::move(inline_value)}}}}});
  };
  const json::binary_t two_bytes(std::vector<uint8_t>{1, 2});
  ExpectMalformed(one(5), "an inline value without a kind");
  ExpectMalformed(one(json::object()), "an inline value without a kind");
  ExpectMalformed(one({{"k", 3}}), "an inline value without a kind");
  ExpectMalformed(one({{"k", "int"}}), "an inline int without a value");
  ExpectMalformed(one({{"k", "int"}, {"v", "7"}}), "an inline int of the wrong type");
  ExpectMalformed(one({{"k", "int"}, {"v", 1.5}}), "an inline int of the wrong type");
  ExpectMalformed(one({{"k", "bool"}, {"v", 1}}), "an inline bool of the wrong type");
  ExpectMalformed(one({{"k", "float"}, {"v", "x"}}), "an inline float of the wrong type");
  ExpectMalformed(one({{"k", "str"}, {"v", "text, not binary"}}),
                  "an inline str of the wrong type");
  ExpectMalformed(one({{"k", "bytes"}, {"v", 1}}), "an inline bytes of the wrong type");
  ExpectMalformed(one({{"k", "set"}, {"v", two_bytes}}), "unknown inline kind set");
  ExpectMalformed(one({{"k", "scalar"}, {"v", two_bytes}}), "unknown inline kind scalar");
  ExpectMalformed(one({{"k", "scalar"}, {"d", "complex128"}, {"v", two_bytes}}), "complex128");
  ExpectMalformed(one({{"k", "scalar"}, {"d", "float32"}, {"v", two_bytes}}),
                  "scalar of the wrong size");
  // A well-formed scalar decodes.
  absl::StatusOr<std::vector<SkeletonEntry>> ok =
      DecodeBroadcastSkeleton(one({{"k", "scalar"}, {"d", "bfloat16"}, {"v", two_bytes}}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(TensorBytes((*ok)[0].value.as_tensor()), std::string("\x01\x02", 2));
}

}  // namespace
}  // namespace sdrt::internal
