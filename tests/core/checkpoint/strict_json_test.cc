// ParseStrictJson (core/checkpoint/internal/strict_json.h): the document nlohmann's own parser
// gives, member order and all, for documents of every kind of value; duplicate keys refused at
// any depth (two objects may share keys), nesting refused past kMaxJsonDepth; an object of
// 200,000 members parsed in order (the one-pass builder appends them: nlohmann's DOM builder
// looked each key up, quadratic); AppendNewMember builds what operator[] would.
#include "sdrt/core/checkpoint/internal/strict_json.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sdrt::internal {
namespace {

using Json = nlohmann::ordered_json;

TEST(StrictJson, TheDocumentNlohmannGives) {
  for (const char* text :
       {R"({"b": 1, "a": [1, -2, 3.5, "x", null, true, false, {"z": {}, "y": []}], "c": {}})",
        R"([{"k": 1}, {"k": 2}, [[[]]], "\u00e9\ud83d\ude00", 18446744073709551615])", "7",
        R"("text")", "null", "[]", "{}", R"({"weight_map": {"t.1": "f1", "t.0": "f0"}})"}) {
    const absl::StatusOr<Json> got = ParseStrictJson(text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status();
    EXPECT_EQ(got->dump(), Json::parse(text).dump()) << text;
  }
}

TEST(StrictJson, DuplicateKeysAndDeepNestingAreRefused) {
  const absl::StatusOr<Json> top = ParseStrictJson(R"({"a": 1, "b": 2, "a": 3})");
  ASSERT_FALSE(top.ok());
  EXPECT_EQ(top.status().message(), "duplicate key \"a\" in one object");
  const absl::StatusOr<Json> inner = ParseStrictJson(R"({"x": [{"k": 1, "k": 2}]})");
  ASSERT_FALSE(inner.ok());
  EXPECT_EQ(inner.status().message(), "duplicate key \"k\" in one object");
  // Keys repeat across objects freely.
  EXPECT_TRUE(ParseStrictJson(R"({"k": {"k": {"k": 1}}, "j": {"k": 2}})").ok());
  std::string deep, ok;
  for (int i = 0; i < kMaxJsonDepth; ++i) ok += "[";
  for (int i = 0; i < kMaxJsonDepth; ++i) ok += "]";
  EXPECT_TRUE(ParseStrictJson(ok).ok());
  deep = "[" + ok + "]";
  const absl::StatusOr<Json> refused = ParseStrictJson(deep);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "nested deeper than 64 levels");
  const absl::StatusOr<Json> bad = ParseStrictJson(R"({"a": })");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(std::string(bad.status().message()).rfind("not valid JSON: ", 0), 0u);
}

TEST(StrictJson, AnObjectOfManyMembersKeepsTheirOrder) {
  constexpr int kMembers = 200000;
  Json built = Json::object();
  std::string text = "{";
  for (int i = 0; i < kMembers; ++i) {
    // Descending names: an order no sorted map would keep.
    const std::string key = absl::StrCat("layers.", kMembers - i, ".weight");
    absl::StrAppend(&text, i > 0 ? "," : "", "\"", key, "\":", i);
    AppendNewMember(built, key, i);
  }
  text += "}";
  const absl::StatusOr<Json> got = ParseStrictJson(text);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), static_cast<size_t>(kMembers));
  EXPECT_EQ(got->begin().key(), absl::StrCat("layers.", kMembers, ".weight"));
  EXPECT_EQ(got->dump(), text);
  EXPECT_EQ(built.dump(), text);
  // What operator[] builds, on a few members.
  Json small = Json::object(), indexed = Json::object();
  for (const char* key : {"b", "a", "c"}) {
    AppendNewMember(small, key, key);
    indexed[key] = key;
  }
  EXPECT_EQ(small, indexed);
  EXPECT_EQ(small.dump(), indexed.dump());
}

}  // namespace
}  // namespace sdrt::internal
