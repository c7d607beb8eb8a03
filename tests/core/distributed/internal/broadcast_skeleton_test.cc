// The broadcast skeleton codec (core/distributed/internal/broadcast_skeleton.h): the round
// trip of every leaf kind and dtype (tensors as dtype and shape words, 0-dim tensors and
// non-tensor values inline as CBOR), the leaves the root cannot send, and the decoding of
// bytes from another rank that are truncated, corrupted or hostile: InvalidArgument, never
// a crash.
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
#include "sdrt/core/distributed/internal/byte_codec.h"
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
  const std::string bytes = Encode(full, &tensors);  // the entries' paths view it
  absl::StatusOr<std::vector<SkeletonEntry>> entries = DecodeBroadcastSkeleton(bytes);
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
  const std::string bytes = Encode(full, &tensors);  // the entries' paths view it
  absl::StatusOr<std::vector<SkeletonEntry>> entries = DecodeBroadcastSkeleton(bytes);
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
  const std::string bytes = Encode(full, &tensors);  // the entries' paths view it
  absl::StatusOr<std::vector<SkeletonEntry>> entries = DecodeBroadcastSkeleton(bytes);
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(tensors.empty());
  // Empty containers have no leaves.
  ASSERT_EQ(entries->size(), 12u);
  std::vector<std::string> paths;
  for (const SkeletonEntry& e : *entries) {
    EXPECT_FALSE(e.is_tensor) << e.path;
    paths.emplace_back(e.path);
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
  const std::string bytes = Encode(Map{}, &tensors);
  absl::StatusOr<std::vector<SkeletonEntry>> entries = DecodeBroadcastSkeleton(bytes);
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
    ExpectMalformed(bytes.substr(0, n), "");
  }
  ExpectMalformed(bytes + "x", "trailing bytes");
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

// Builds skeleton bytes word by word (the format of broadcast_skeleton.cc: version 1,
// entry count, then per entry its path, kind 0 = tensor (dtype, ndim, extents) or
// 1 = inline (its CBOR)).
class Words {
 public:
  Words& U(uint64_t v) {
    PutU64(&bytes_, v);
    return *this;
  }
  Words& S(absl::string_view s) {
    PutString(&bytes_, s);
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// One tensor entry "w" of dtype code `dtype` with extents `dims`.
std::string OneTensor(uint64_t dtype, std::vector<uint64_t> dims) {
  Words w;
  w.U(1).U(1).S("w").U(0).U(dtype).U(dims.size());
  for (uint64_t d : dims) w.U(d);
  return w.bytes();
}

TEST(BroadcastSkeleton, HostileStructuresAreRefused) {
  const uint64_t f32 = static_cast<uint64_t>(DType::kFloat32);
  ExpectMalformed("", "not a broadcast skeleton");
  ExpectMalformed("\xff\xff\xff", "not a broadcast skeleton");
  ExpectMalformed(Words().U(2).U(0).bytes(), "not a broadcast skeleton");  // another version
  ExpectMalformed(Words().U(1).U(uint64_t{1} << 62).bytes(), "not a broadcast skeleton");
  ExpectMalformed(Words().U(1).U(1).S("w").bytes(), "not a broadcast skeleton");  // too short
  ExpectMalformed(Words().U(1).U(1).S("w").U(0).bytes(), "'w' has no dtype or shape");
  ExpectMalformed(Words().U(1).U(1).U(uint64_t{1} << 62).U(0).U(0).bytes(), "a truncated entry");
  ExpectMalformed(Words().U(1).U(1).S("w").U(7).U(0).U(0).bytes(), "'w' has no dtype or shape");
  ExpectMalformed(OneTensor(kNumDTypes, {3}), "'w' has no dtype or shape");
  ExpectMalformed(Words().U(1).U(1).S("w").U(0).U(f32).U(uint64_t{1} << 40).bytes(),
                  "'w' has no dtype or shape");
  ExpectMalformed(OneTensor(f32, {3, uint64_t(-1)}), "'w' has a bad shape");
  ExpectMalformed(OneTensor(f32, {uint64_t{1} << 63}), "'w' has a bad shape");
  ExpectMalformed(OneTensor(f32, {3}) + "x", "trailing bytes");
  // The well-formed entry decodes.
  const std::string good = OneTensor(f32, {3, 4});
  absl::StatusOr<std::vector<SkeletonEntry>> ok = DecodeBroadcastSkeleton(good);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].path, "w");
  EXPECT_EQ((*ok)[0].shape, (IntVector{3, 4}));
}

// One inline entry "x" holding `cbor`.
std::string OneInline(const std::string& cbor) { return Words().U(1).U(1).S("x").U(1).S(cbor).bytes(); }

// Nesting deeper than any skeleton (100,000 arrays in 100 KB) in an inline value: refused,
// not a stack overflow; so is a header claiming 2^62 items.
TEST(BroadcastSkeleton, DeepNestingAndHugeLengthsInlineAreRefused) {
  std::string deep(100000, '\x81');  // arrays of one item ...
  deep += '\x80';                    // ... down to an empty one
  ExpectMalformed(OneInline(deep), "'x' has a malformed inline value");
  for (const char header : {'\x9b', '\xbb'}) {  // array, map with an 8-byte length
    std::string huge(1, header);
    huge += std::string("\x40\0\0\0\0\0\0\0", 8);
    ExpectMalformed(OneInline(huge), "'x' has a malformed inline value");
  }
}

TEST(BroadcastSkeleton, HostileInlineValuesAreRefused) {
  const auto one = [](json inline_value) { return OneInline(Cbor(inline_value)); };
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
  const std::string good = one({{"k", "scalar"}, {"d", "bfloat16"}, {"v", two_bytes}});
  absl::StatusOr<std::vector<SkeletonEntry>> ok = DecodeBroadcastSkeleton(good);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(TensorBytes((*ok)[0].value.as_tensor()), std::string("\x01\x02", 2));
}

}  // namespace
}  // namespace sdrt::internal
