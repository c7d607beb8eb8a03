// The golden JSON codec: every type decodes to the Value the Python side meant, encodes
// back to the same JSON, and malformed input is rejected with a message naming it.
#include "sdrt/tests/support/golden_codec.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt {
namespace testing_golden {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

Value Decode(const std::string& text) {
  absl::StatusOr<Value> v = DecodeGoldenValue(json::parse(text));
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : Value();
}

// Decodes `text`, checks the result against `want`, and that encoding gives `text` back.
void ExpectRoundTrip(const std::string& text, const Value& want) {
  const Value got = Decode(text);
  EXPECT_EQ(got, want) << DebugString(got);
  EXPECT_EQ(EncodeGoldenValue(got), json::parse(text));
}

TEST(GoldenCodec, Scalars) {
  ExpectRoundTrip(R"({"type":"none"})", None{});
  ExpectRoundTrip(R"({"type":"bool","value":true})", true);
  ExpectRoundTrip(R"({"type":"bool","value":false})", false);
  ExpectRoundTrip(R"({"type":"int","value":-5})", -5);
  ExpectRoundTrip(R"({"type":"int","value":9223372036854775807})", INT64_MAX);
  ExpectRoundTrip(R"({"type":"float","value":1.5})", 1.5);
  ExpectRoundTrip(R"({"type":"float","value":0.1})", 0.1);
  ExpectRoundTrip(R"({"type":"str","value":"a.b \u00e9"})", "a.b \xc3\xa9");
  ExpectRoundTrip(R"({"type":"bytes","hex":"000aff"})", Bytes{std::string("\x00\x0a\xff", 3)});
  ExpectRoundTrip(R"({"type":"bytes","hex":""})", Bytes{});
  EXPECT_EQ(Decode(R"({"type":"bool","value":true})").kind(), ValueKind::kBool);
  EXPECT_EQ(Decode(R"({"type":"float","value":2})").kind(), ValueKind::kDouble);
}

TEST(GoldenCodec, NonFiniteFloatsAreStrings) {
  ExpectRoundTrip(R"({"type":"float","value":"inf"})", std::numeric_limits<double>::infinity());
  ExpectRoundTrip(R"({"type":"float","value":"-inf"})", -std::numeric_limits<double>::infinity());
  const Value nan = Decode(R"({"type":"float","value":"nan"})");
  EXPECT_TRUE(std::isnan(nan.as_double()));
  EXPECT_EQ(EncodeGoldenValue(nan), json::parse(R"({"type":"float","value":"nan"})"));
}

TEST(GoldenCodec, TensorBytesAreRowMajorLittleEndian) {
  const Value v = Decode(R"({"type":"tensor","dtype":"float32","shape":[2,2],
                             "hex":"0000803f000000400000404000008040"})");
  ASSERT_EQ(v.kind(), ValueKind::kTensor);
  const Tensor& t = v.as_tensor();
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(t.shape(), (IntVector{2, 2}));
  EXPECT_EQ(t.data<float>()[0], 1.0f);
  EXPECT_EQ(t.data<float>()[3], 4.0f);
  EXPECT_EQ(EncodeGoldenValue(v)["hex"], "0000803f000000400000404000008040");

  ExpectRoundTrip(R"({"type":"tensor","dtype":"bfloat16","shape":[3],"hex":"803f0040c0ff"})",
                  Decode(R"({"type":"tensor","dtype":"bfloat16","shape":[3],
                             "hex":"803f0040c0ff"})"));
  const Value i64 = Decode(R"({"type":"tensor","dtype":"int64","shape":[],
                               "hex":"feffffffffffffff"})");
  EXPECT_EQ(i64.as_tensor().data<int64_t>()[0], -2);
  ExpectRoundTrip(R"({"type":"tensor","dtype":"int64","shape":[],"hex":"feffffffffffffff"})", i64);
  const Value empty = Decode(R"({"type":"tensor","dtype":"int32","shape":[2,0],"hex":""})");
  EXPECT_EQ(empty.as_tensor().numel(), 0);
  EXPECT_EQ(EncodeGoldenValue(empty)["hex"], "");
}

TEST(GoldenCodec, StridedTensorsEncodeContiguously) {
  const Value v = Decode(R"({"type":"tensor","dtype":"int8","shape":[2,3],
                             "hex":"010203040506"})");
  const Tensor column = *v.as_tensor().Select(1, 1);  // {2, 5}, stride 3
  EXPECT_EQ(EncodeGoldenValue(column)["hex"], "0205");
}

TEST(GoldenCodec, MetaTensorsHaveNoBytes) {
  const std::string text = R"({"type":"tensor","dtype":"float16","shape":[4,2],"device":"meta"})";
  const Value v = Decode(text);
  EXPECT_TRUE(v.as_tensor().is_meta());
  EXPECT_EQ(v.as_tensor().shape(), (IntVector{4, 2}));
  EXPECT_EQ(EncodeGoldenValue(v), json::parse(text));
}

TEST(GoldenCodec, DTensor) {
  const std::string text = R"({"type":"dtensor","mesh_shape":[2,2],"placements":"[S(0), R]",
      "global_shape":[4,2],"global_stride":[2,1],
      "local":{"type":"tensor","dtype":"int16","shape":[2,2],"hex":"0100020003000400"}})";
  const Value v = Decode(text);
  ASSERT_EQ(v.kind(), ValueKind::kDTensor);
  const DTensor& d = v.as_dtensor();
  EXPECT_EQ(d.mesh()->shape(), (IntVector{2, 2}));
  EXPECT_EQ(d.mesh()->ranks(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(d.placements()[0], Placement::Shard(0));
  EXPECT_EQ(d.placements()[1], Placement::Replicate());
  EXPECT_EQ(d.global_shape(), (IntVector{4, 2}));
  EXPECT_EQ(d.local().data<int16_t>()[3], 4);
  EXPECT_EQ(EncodeGoldenValue(v), json::parse(text));
}

TEST(GoldenCodec, ContainersKeepKindAndOrder) {
  const std::string text = R"({"type":"dict","items":[
      ["z", {"type":"list","items":[{"type":"int","value":1},{"type":"none"}]}],
      ["a", {"type":"tuple","items":[{"type":"str","value":"x"}]}],
      ["m", {"type":"dict","items":[]}]]})";
  ExpectRoundTrip(text, Map{{"z", List{1, None{}}}, {"a", Tuple{"x"}}, {"m", Map{}}});
  EXPECT_NE(Decode(R"({"type":"list","items":[]})"), Decode(R"({"type":"tuple","items":[]})"));
}

TEST(GoldenCodec, IntegerDictKeysBecomeDecimalStrings) {
  const Value v = Decode(R"({"type":"dict","items":[[5, {"type":"none"}], [-1, {"type":"none"}],
                                                     ["5x", {"type":"none"}]]})");
  EXPECT_EQ(v, (Map{{"5", None{}}, {"-1", None{}}, {"5x", None{}}}));
  EXPECT_EQ(EncodeGoldenValue(v)["items"][0][0], "5");  // encoded back as a string
}

TEST(GoldenCodec, ObjectsAreFreshOpaqueValues) {
  const std::string text = R"({"type":"object","name":"BytesIO"})";
  const Value a = Decode(text);
  const Value b = Decode(text);
  ASSERT_EQ(a.kind(), ValueKind::kOpaque);
  EXPECT_EQ(a.as_opaque().type_name, "BytesIO");
  ASSERT_NE(a.as_opaque().object, nullptr);
  EXPECT_NE(a, b);  // two Python objects, two identities
  EXPECT_EQ(a, a);
  ASSERT_TRUE(a.as_opaque().clone);
  const Opaque copy = a.as_opaque().clone(a.as_opaque());
  EXPECT_EQ(copy.type_name, "BytesIO");
  EXPECT_NE(copy.object, a.as_opaque().object);
  EXPECT_EQ(EncodeGoldenValue(a), json::parse(text));
}

TEST(GoldenCodec, RejectsMalformedValuesNamingTheProblem) {
  struct Bad {
    const char* text;
    const char* message;
  };
  const Bad cases[] = {
      {R"([1])", "not an object"},
      {R"({"type":"complex"})", "unknown type \"complex\""},
      {R"({"type":"int","value":1.5})", "expected an int64"},
      {R"({"type":"int","value":18446744073709551615})", "expected an int64"},
      {R"({"type":"bool","value":1})", "bad bool"},
      {R"({"type":"float","value":"NaN"})", "bad float"},
      {R"({"type":"bytes","hex":"0g"})", "non-hex digit"},
      {R"({"type":"bytes","hex":"abc"})", "odd-length"},
      {R"({"type":"tensor","dtype":"float32","shape":[2],"hex":"00"})",
       "hex holds 1 bytes, shape needs 8"},
      {R"({"type":"tensor","dtype":"float32","shape":[1],"device":"cuda:0","hex":"00"})",
       "\"cpu\" or \"meta\""},
      {R"({"type":"tensor","dtype":"float32","hex":""})", "missing array field \"shape\""},
      {R"({"type":"dict","items":[["a",{"type":"none"}],["a",{"type":"none"}]]})",
       "duplicate dict key \"a\""},
      {R"({"type":"dict","items":[[1.5,{"type":"none"}]]})", "neither a string nor an int64"},
      {R"({"type":"list","items":[{"type":"int"}]})", "missing \"value\""},
  };
  for (const Bad& c : cases) {
    absl::StatusOr<Value> v = DecodeGoldenValue(json::parse(c.text));
    ASSERT_FALSE(v.ok()) << c.text;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(v.status().message(), HasSubstr(c.message)) << c.text;
  }
  absl::StatusOr<Value> bad_dtype =
      DecodeGoldenValue(json::parse(R"({"type":"tensor","dtype":"complex64","shape":[]})"));
  EXPECT_EQ(bad_dtype.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_dtype.status().message(), HasSubstr("complex64"));
}

TEST(GoldenCodec, ReadGoldenJson) {
  absl::StatusOr<json> j = ReadGoldenJson("state_dict/flatten_golden.json");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_TRUE(j->is_array());
  const absl::Status missing = ReadGoldenJson("state_dict/no_such_file.json").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("cannot open golden file"));
  // A binary file is not JSON.
  const absl::Status binary = ReadGoldenJson("safetensors/dtypes.safetensors").status();
  EXPECT_EQ(binary.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(binary.message(), HasSubstr("invalid JSON in"));
}

}  // namespace
}  // namespace testing_golden
}  // namespace sdrt
