// Traverse / flatten / unflatten / set_element: docs/SEMANTICS.md 4.2-4.4 vectors,
// case-030/031/032, aliasing, error codes and messages, and the mapping container.
#include "sdrt/core/state_dict/flatten.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ObjPath P(std::initializer_list<PathItem> items) { return ObjPath(items); }

std::vector<std::string> Keys(const FlattenMapping& m) {
  std::vector<std::string> out;
  for (size_t i = 0; i < m.size(); ++i) out.emplace_back(m.key(i));
  return out;
}

TEST(PathToString, JoinsItemsWithDots) {
  EXPECT_EQ(PathToString(P({"a", "c", 1, 0})), "a.c.1.0");
  EXPECT_EQ(PathToString(P({"a.b"})), "a.b");
  EXPECT_EQ(PathToString(P({"", "", -3})), "..-3");
  EXPECT_EQ(PathToString(ObjPath{}), "");
}

TEST(Flatten, Spec42Example) {
  const Map sd{{"a", Map{{"b", 1}, {"c", List{2, Tuple{3, 4}}}, {"e", Map{}}}},
               {"5", Map{{"x", None{}}}},
               {"t", Tuple{7}}};
  absl::StatusOr<FlatStateDict> flat = FlattenStateDict(sd);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_THAT(flat->flat.keys(), ElementsAre("a.b", "a.c.0", "a.c.1.0", "a.c.1.1", "5.x", "t.0"));
  EXPECT_THAT(Keys(flat->mapping), ElementsAre("a.b", "a.c.0", "a.c.1.0", "a.c.1.1", "5.x", "t.0"));
  EXPECT_EQ(ObjPath(flat->mapping.path(3).begin(), flat->mapping.path(3).end()),
            P({"a", "c", 1, 1}));
  EXPECT_EQ(flat->flat.value(3), Value(4));
  EXPECT_TRUE(flat->flat.value(4).is_none());
  absl::StatusOr<Map> back = UnflattenStateDict(flat->flat, flat->mapping);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(Value(*back), Value(Map{{"a", Map{{"b", 1}, {"c", List{2, List{3, 4}}}}},
                                    {"5", Map{{"x", None{}}}},
                                    {"t", List{7}}}));
}

TEST(Flatten, Case030KeysDependOnContainerContents) {
  const Map a{{"my_key", List{Map{{"key_1", 1}}, Map{{"key_2", 2}}}}};
  const Map b{{"my_key", List{}}};
  absl::StatusOr<FlatStateDict> flat_a = FlattenStateDict(a);
  absl::StatusOr<FlatStateDict> flat_b = FlattenStateDict(b);
  ASSERT_TRUE(flat_a.ok() && flat_b.ok());
  EXPECT_THAT(flat_a->flat.keys(), ElementsAre("my_key.0.key_1", "my_key.1.key_2"));
  EXPECT_EQ(ObjPath(flat_a->mapping.path(1).begin(), flat_a->mapping.path(1).end()),
            P({"my_key", 1, "key_2"}));
  EXPECT_TRUE(flat_b->flat.empty());  // the empty list vanishes, as in PyTorch
  EXPECT_TRUE(flat_b->mapping.empty());
  // What B lacks, by name.
  std::vector<std::string> missing;
  for (const std::string& key : flat_a->flat.keys()) {
    if (!flat_b->flat.contains(key)) missing.push_back(key);
  }
  EXPECT_THAT(missing, ElementsAre("my_key.0.key_1", "my_key.1.key_2"));
}

TEST(Flatten, Case031DottedKeyRoundTripsThroughItsPath) {
  const Map sd{{"a.b", 1}, {"c", Map{{"d", 2}}}};
  absl::StatusOr<FlatStateDict> flat = FlattenStateDict(sd);
  ASSERT_TRUE(flat.ok());
  EXPECT_THAT(flat->flat.keys(), ElementsAre("a.b", "c.d"));
  EXPECT_EQ(flat->mapping.path(0).size(), 1u);  // ("a.b",), not ("a", "b")
  absl::StatusOr<Map> back = UnflattenStateDict(flat->flat, flat->mapping);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(Value(*back), Value(sd));
}

TEST(Flatten, Case032TuplesComeBackAsLists) {
  const Map sd{{"t", Tuple{10, 20}}, {"l", List{None{}, 5}}};
  absl::StatusOr<FlatStateDict> flat = FlattenStateDict(sd);
  ASSERT_TRUE(flat.ok());
  EXPECT_THAT(flat->flat.keys(), ElementsAre("t.0", "t.1", "l.0", "l.1"));
  absl::StatusOr<Map> back = UnflattenStateDict(flat->flat, flat->mapping);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(Value(*back), Value(Map{{"t", List{10, 20}}, {"l", List{None{}, 5}}}));
}

TEST(Flatten, EmptyContainerInListLeavesANoneHole) {
  const Map sd{{"a", List{List{}, 1}}};
  absl::StatusOr<FlatStateDict> flat = FlattenStateDict(sd);
  ASSERT_TRUE(flat.ok());
  absl::StatusOr<Map> back = UnflattenStateDict(flat->flat, flat->mapping);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(Value(*back), Value(Map{{"a", List{None{}, 1}}}));
}

TEST(Flatten, LeavesAliasTheInputTensors) {
  const Tensor w = test::Arange({6});
  const Map sd{{"m", Map{{"w", w}, {"tied", List{w}}}}};
  absl::StatusOr<FlatStateDict> flat = FlattenStateDict(sd);
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->flat.Find("m.w")->as_tensor().data_ptr(), w.data_ptr());
  EXPECT_EQ(flat->flat.Find("m.tied.0")->as_tensor().data_ptr(), w.data_ptr());
  absl::StatusOr<Map> back = UnflattenStateDict(flat->flat, flat->mapping);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->Find("m")->Find("w")->as_tensor().data_ptr(), w.data_ptr());
}

TEST(Flatten, DuplicatedKeysAreInvalidArgumentNamingTheKey) {
  for (const Map& sd : {Map{{"a.b", 1}, {"a", Map{{"b", 2}}}},
                        Map{{"a", Map{{"b", 2}}}, {"a.b", 1}}, Map{{"a", List{5}}, {"a.0", 6}}}) {
    absl::StatusOr<FlatStateDict> flat = FlattenStateDict(sd);
    ASSERT_FALSE(flat.ok());
    EXPECT_EQ(flat.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(flat.status().message(), HasSubstr("duplicated flatten key a."));
  }
}

TEST(Traverse, VisitsLeavesInOrderAndStopsOnError) {
  const Map sd{{"a", Map{{"x", 1}, {"e", List{}}}}, {"b", Tuple{None{}, Bytes{"z"}}}, {"c", 3}};
  std::vector<std::string> seen;
  const absl::Status s = TraverseStateDict(sd, [&](PathSpan path, const Value& leaf) {
    seen.push_back(PathToString(path) + "=" + std::string(ValueKindName(leaf.kind())));
    return seen.size() == 3 ? absl::CancelledError("stop") : absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(seen, ElementsAre("a.x=int", "b.0=None", "b.1=bytes"));
}

TEST(SetElement, Spec43Vectors) {
  Map root;
  ASSERT_TRUE(SetElement(root, P({"k"}), 10).ok());
  EXPECT_EQ(Value(root), Value(Map{{"k", 10}}));
  ASSERT_TRUE(SetElement(root, P({"k1", 2}), 1).ok());
  EXPECT_EQ(*root.Find("k1"), Value(List{None{}, None{}, 1}));
  ASSERT_TRUE(SetElement(root, P({"k1", 1}), 99).ok());
  EXPECT_EQ(*root.Find("k1"), Value(List{None{}, 99, 1}));
  ASSERT_TRUE(SetElement(root, P({"k1", 3}), 88).ok());
  EXPECT_EQ(*root.Find("k1"), Value(List{None{}, 99, 1, 88}));
  ASSERT_TRUE(SetElement(root, P({"k2", "k3"}), 3).ok());
  EXPECT_EQ(*root.Find("k2"), Value(Map{{"k3", 3}}));
  ASSERT_TRUE(SetElement(root, P({"k2", "k4", 0, 0}), 99).ok());
  EXPECT_EQ(root.Find("k2")->Find("k4")->items()[0], Value(List{99}));
}

TEST(SetElement, NegativeIndicesCountFromTheEnd) {
  Map root{{"l", List{1, 2}}};
  ASSERT_TRUE(SetElement(root, P({"l", -1}), 7).ok());
  EXPECT_EQ(*root.Find("l"), Value(List{1, 7}));
  const absl::Status s = SetElement(root, P({"l", -3}), 7);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("index -3 is out of range for the list of 2 items"));
}

TEST(SetElement, ErrorsNameThePathAndTheProblem) {
  struct Bad {
    Map root;
    ObjPath path;
    const char* message;
  };
  const Bad cases[] = {
      {Map{}, ObjPath{}, "SetElement: empty path"},
      {Map{{"a", 1}}, P({"a", "b"}), "path \"a.b\" (2 items): the value at \"a\" is a int"},
      {Map{{"l", List{1}}}, P({"l", "x"}), "the list at \"l\" cannot take the string key \"x\""},
      {Map{{"t", Tuple{1}}}, P({"t", 0}), "the tuple at \"t\" cannot be changed at index 0"},
      {Map{{"t", Tuple{None{}}}}, P({"t", 0, "x"}), "the tuple at \"t\" cannot be changed"},
      {Map{{"d", Map{{"k", 1}}}}, P({"d", 3}), "the dict at \"d\" has 1 entries, too few"},
      {Map{}, P({0}), "the dict at the root has 0 entries"},
  };
  for (const Bad& c : cases) {
    Map root = c.root;
    const absl::Status s = SetElement(root, c.path, 5);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(SetElement, IntegerItemsAddressDictsByDecimalKey) {
  Map root{{"d", Map{{"k", 1}, {"j", 2}}}};
  ASSERT_TRUE(SetElement(root, P({"d", 1}), 3).ok());       // 2 entries > index 1
  ASSERT_TRUE(SetElement(root, P({"d", 7, "x"}), 4).ok());  // on the way: no size rule
  EXPECT_EQ(*root.Find("d"), Value(Map{{"k", 1}, {"j", 2}, {"1", 3}, {"7", Map{{"x", 4}}}}));
}

TEST(Unflatten, MissingMappingKeyIsNotFoundNamingTheKey) {
  FlattenMapping mapping;
  ASSERT_TRUE(mapping.Insert("a", P({"a"})));
  absl::StatusOr<Map> back = UnflattenStateDict(Map{{"a", 1}, {"layers.0.w", 2}}, mapping);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(back.status().message(), HasSubstr("\"layers.0.w\""));
}

// UnflattenStateDict resumes each path below the prefix it shares with the previous one;
// random paths in random order must give what independent SetElement calls give,
// including the same first error. Paths are (p|q, a|b|c, 0|1|3, a|b); in every fourth
// trial one path stops early, so that later paths may run into its leaf.
TEST(Unflatten, ResumingAfterACommonPrefixChangesNothing) {
  std::mt19937 gen(42);
  auto pick = [&gen](std::initializer_list<PathItem> items) {
    return *(items.begin() + gen() % items.size());
  };
  int complete = 0;  // trials whose 40 paths all fit together
  for (int trial = 0; trial < 400; ++trial) {
    Map flat;
    FlattenMapping mapping;
    const int short_one = trial % 4 == 0 ? static_cast<int>(gen() % 40) : -1;
    for (int i = 0; i < 40; ++i) {
      ObjPath path{pick({"p", "q"}), pick({"a", "b", "c"}), pick({0, 1, 3}), pick({"a", "b"})};
      if (i == short_one) path.resize(2);
      const std::string key = "k" + std::to_string(i);
      flat.Set(key, i);
      ASSERT_TRUE(mapping.Insert(key, path));
    }
    Map want;
    absl::Status want_status;
    for (size_t i = 0; i < flat.size() && want_status.ok(); ++i) {
      want_status = SetElement(want, mapping.path(i), flat.value(i));
    }
    absl::StatusOr<Map> got = UnflattenStateDict(flat, mapping);
    ASSERT_EQ(got.status(), want_status) << "trial " << trial;
    if (got.ok()) {
      ++complete;
      ASSERT_EQ(Value(*got), Value(want)) << "trial " << trial;
    }
  }
  EXPECT_GT(complete, 300);  // most trials build a whole tree...
  EXPECT_LT(complete, 400);  // ...and some fail on a leaf in the way
}

TEST(FlattenMapping, InsertFindCopyAndMove) {
  FlattenMapping m;
  EXPECT_TRUE(m.Insert("x.0", P({"x", 0})));
  EXPECT_TRUE(m.Insert("x.1", P({"x", 1})));
  EXPECT_FALSE(m.Insert("x.0", P({"other"})));  // first path kept
  ASSERT_TRUE(m.Find("x.0").has_value());
  EXPECT_EQ(ObjPath(m.Find("x.0")->begin(), m.Find("x.0")->end()), P({"x", 0}));
  EXPECT_FALSE(m.Find("x").has_value());

  FlattenMapping copy = m;
  ASSERT_TRUE(m.Insert("y", P({"y"})));
  EXPECT_EQ(copy.size(), 2u);
  EXPECT_FALSE(copy.Find("y").has_value());
  EXPECT_TRUE(copy.Find("x.1").has_value());

  FlattenMapping moved = std::move(m);
  EXPECT_THAT(Keys(moved), ElementsAre("x.0", "x.1", "y"));
  EXPECT_TRUE(moved.Find("y").has_value());
  const FlattenMapping copy_of_moved_from = m;  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(copy_of_moved_from.empty());
  EXPECT_TRUE(m.Insert("z", P({"z"})));
  EXPECT_THAT(Keys(m), ElementsAre("z"));
  EXPECT_TRUE(m.Find("z").has_value());
}

// An index that would pad a list to billions of entries is an error, not an allocation
// failure that aborts the process.
TEST(SetElement, HugeListIndexIsResourceExhausted) {
  Map root;
  absl::Status s = SetElement(root, ObjPath{"a", int64_t{1} << 40}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("1099511627776"));
  s = SetElement(root, ObjPath{"a", INT64_MAX}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("would pad a list past 16777216 entries"));
  EXPECT_TRUE(SetElement(root, ObjPath{"b", 3}, 1).ok());
}

}  // namespace
}  // namespace sdrt
