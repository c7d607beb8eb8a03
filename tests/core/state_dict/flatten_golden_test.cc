// Flatten, unflatten and set_element against PyTorch's own output
// (tests/data/state_dict/flatten_golden.json, written by
// tests/golden/make_state_dict_golden.py): keys, order, paths, values and errors.
// Covers case-030 (case_030_A/B), case-031 (case_031_*) and case-032
// (case_032_tuple_and_list) among the golden cases.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/state_dict/flatten.h"
#include "sdrt/tests/support/golden_codec.h"

namespace sdrt {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using testing_golden::DecodeGoldenValue;
using testing_golden::EncodeGoldenValue;

const json& Cases() {
  static const json* cases = [] {
    absl::StatusOr<json> j = testing_golden::ReadGoldenJson("state_dict/flatten_golden.json");
    return new json(j.ok() ? *j : json::array());
  }();
  return *cases;
}

// Cases of one op; fails the test when there are none.
std::vector<const json*> CasesOf(const std::string& op) {
  std::vector<const json*> out;
  for (const json& c : Cases()) {
    if (c["op"] == op) out.push_back(&c);
  }
  EXPECT_FALSE(out.empty()) << "no golden cases of op " << op;
  return out;
}

Value Decode(const json& j) {
  absl::StatusOr<Value> v = DecodeGoldenValue(j);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *std::move(v) : Value();
}

// Equal as the golden encoding sees them (opaque objects compare by type name, since a
// decoded golden object is a fresh one).
void ExpectSame(const Value& got, const json& want) {
  EXPECT_EQ(EncodeGoldenValue(got), EncodeGoldenValue(Decode(want))) << "got " << DebugString(got);
}

ObjPath DecodePath(const json& j) {
  ObjPath path;
  for (const json& item : j) {
    if (item.is_string()) {
      path.emplace_back(item.get<std::string>());
    } else {
      path.emplace_back(item.get<int64_t>());
    }
  }
  return path;
}

// Python's exception class -> the status code sdrt returns for it.
absl::StatusCode CodeFor(const std::string& python_class) {
  return python_class == "KeyError" ? absl::StatusCode::kNotFound
                                    : absl::StatusCode::kInvalidArgument;
}

void ExpectError(const absl::Status& status, const json& error) {
  ASSERT_FALSE(status.ok()) << "PyTorch raised " << error.dump();
  const std::string cls = error["class"];
  const std::string message = error["message"];
  EXPECT_EQ(status.code(), CodeFor(cls)) << status;
  if (cls == "ValueError") {
    EXPECT_EQ(status.message(), message);  // "duplicated flatten key <key>", verbatim
  } else if (cls == "KeyError") {
    // Python prints the key quoted: 'b'.
    EXPECT_THAT(status.message(), HasSubstr(message.substr(1, message.size() - 2)));
  } else {
    EXPECT_THAT(status.message(), HasSubstr("SetElement")) << status;
  }
}

TEST(FlattenGolden, FlattenMatchesPyTorch) {
  for (const json* c : CasesOf("flatten")) {
    SCOPED_TRACE((*c)["id"].get<std::string>());
    absl::StatusOr<Value> input = DecodeGoldenValue((*c)["input"]);
    if (!input.ok()) {
      // {1: "x", "1": "y"}: Python holds both keys; sdrt's string-keyed Map cannot, and the
      // codec refuses it. PyTorch's flatten rejects it too (duplicated flatten key 1).
      EXPECT_EQ((*c)["id"], "collision_int_and_str_key");
      EXPECT_THAT(input.status().message(), HasSubstr("duplicate dict key \"1\""));
      EXPECT_EQ((*c)["error"]["message"], "duplicated flatten key 1");
      continue;
    }
    absl::StatusOr<FlatStateDict> flat = FlattenStateDict(input->as_map());
    if (!(*c)["error"].is_null()) {
      ExpectError(flat.status(), (*c)["error"]);
      continue;
    }
    ASSERT_TRUE(flat.ok()) << flat.status();
    ExpectSame(flat->flat, (*c)["flat"]);  // keys, order and values
    const json& mapping = (*c)["mapping"];
    ASSERT_EQ(flat->mapping.size(), mapping.size());
    for (size_t i = 0; i < mapping.size(); ++i) {
      const ObjPath want = DecodePath(mapping[i][1]);
      EXPECT_EQ(flat->mapping.key(i), mapping[i][0].get<std::string>());
      EXPECT_EQ(ObjPath(flat->mapping.path(i).begin(), flat->mapping.path(i).end()), want);
      EXPECT_EQ(PathToString(want), flat->mapping.key(i));
    }
    // _traverse_state_dict visits the same paths and values, in the same order.
    size_t visits = 0;
    ASSERT_TRUE(TraverseStateDict(input->as_map(), [&](PathSpan path, const Value& leaf) {
                  EXPECT_LT(visits, mapping.size());
                  if (visits < mapping.size()) {
                    EXPECT_EQ(ObjPath(path.begin(), path.end()), DecodePath(mapping[visits][1]));
                    EXPECT_EQ(leaf, flat->flat.value(visits));
                  }
                  ++visits;
                  return absl::OkStatus();
                }).ok());
    EXPECT_EQ(visits, mapping.size());
    absl::StatusOr<Map> back = UnflattenStateDict(flat->flat, flat->mapping);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSame(*back, (*c)["unflattened"]);
  }
}

TEST(FlattenGolden, UnflattenMatchesPyTorch) {
  for (const json* c : CasesOf("unflatten")) {
    SCOPED_TRACE((*c)["id"].get<std::string>());
    const Value flat = Decode((*c)["flat"]);
    FlattenMapping mapping;
    for (const json& entry : (*c)["mapping"]) {
      ASSERT_TRUE(mapping.Insert(entry[0].get<std::string>(), DecodePath(entry[1])));
    }
    absl::StatusOr<Map> back = UnflattenStateDict(flat.as_map(), mapping);
    if (!(*c)["error"].is_null()) {
      ExpectError(back.status(), (*c)["error"]);
      continue;
    }
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSame(*back, (*c)["unflattened"]);
  }
}

TEST(FlattenGolden, SetElementMatchesPyTorch) {
  for (const json* c : CasesOf("set_element")) {
    SCOPED_TRACE((*c)["id"].get<std::string>());
    Map root = Decode((*c)["input"]).as_map();
    for (const json& step : (*c)["steps"]) {
      const absl::Status s = SetElement(root, DecodePath(step[0]), Decode(step[1]));
      if (step[2].is_null()) {
        ExpectError(s, (*c)["error"]);
        break;
      }
      ASSERT_TRUE(s.ok()) << s;
      ExpectSame(root, step[2]);
    }
  }
}

TEST(FlattenGolden, HoldsTheNamedCases) {
  std::vector<std::string> ids;
  for (const json& c : Cases()) ids.push_back(c["id"]);
  for (const char* id : {"spec_4_2_example", "case_030_A", "case_030_B", "case_031_dotted_key",
                         "case_032_tuple_and_list", "empty_list_in_list",
                         "collision_dotted_then_nested", "set_element_spec_4_3"}) {
    EXPECT_THAT(ids, ::testing::Contains(id));
  }
}

}  // namespace
}  // namespace sdrt
