// The state dict value tree: building, lookup, order, equality and printing.

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::sdrt::test::Arange;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Value, BuildsNaturallyFromInitializerLists) {
  Tensor w = Arange({2, 2});
  Value sd = Map{{"model", Map{{"w", w}, {"step", 7}}},
                 {"betas", Tuple{0.9, 0.999}},
                 {"groups", List{Map{{"lr", 1e-3}, {"name", "decay"}}}},
                 {"flag", true},
                 {"blob", Bytes{"\x01\x02"}},
                 {"nothing", None{}}};
  ASSERT_TRUE(sd.is_map());
  EXPECT_THAT(sd.as_map().keys(),
              ElementsAre("model", "betas", "groups", "flag", "blob", "nothing"));
  EXPECT_EQ(sd.Find("model")->Find("step")->as_int(), 7);
  EXPECT_EQ(sd.Find("model")->Find("w")->kind(), ValueKind::kTensor);
  EXPECT_TRUE(sd.Find("betas")->is_tuple());
  EXPECT_EQ(sd.Find("betas")->items()[1].as_double(), 0.999);
  EXPECT_EQ(sd.Find("groups")->items()[0].Find("name")->as_string(), "decay");
  EXPECT_EQ(sd.Find("flag")->kind(), ValueKind::kBool);  // a bool is not an int
  EXPECT_EQ(sd.Find("blob")->kind(), ValueKind::kBytes);
  EXPECT_TRUE(sd.Find("nothing")->is_none());
  EXPECT_EQ(sd.Find("missing"), nullptr);
}

TEST(Value, MapKeepsInsertionOrderAndOverwritesInPlace) {
  Map m{{"b", 1}, {"a", 2}, {"c", 3}};
  m.Set("a", 20);
  m.Set("d", 4);
  EXPECT_THAT(m.keys(), ElementsAre("b", "a", "c", "d"));
  EXPECT_EQ(m.Find("a")->as_int(), 20);
  EXPECT_TRUE(m.Erase("a"));
  EXPECT_FALSE(m.Erase("a"));
  EXPECT_THAT(m.keys(), ElementsAre("b", "c", "d"));
  EXPECT_EQ(m.Find("d")->as_int(), 4);  // the index was rebuilt after the erase
  EXPECT_EQ(m.value(1).as_int(), 3);
}

TEST(Value, CopiesTheTreeButAliasesTensors) {
  Tensor w = Arange({3});
  Value a = Map{{"w", w}, {"l", List{1, 2}}};
  Value b = a;
  b.as_map().Set("x", 1);
  b.as_map().Find("l")->items().push_back(3);
  EXPECT_EQ(a.as_map().size(), 2u);
  EXPECT_EQ(a.Find("l")->items().size(), 2u);
  EXPECT_EQ(b.Find("w")->as_tensor().data_ptr(), w.data_ptr());
}

TEST(Value, EqualityComparesStructureAndValues) {
  Value a = Map{{"w", Arange({2, 3})}, {"t", Tuple{1, "x"}}};
  Value same = Map{{"w", Arange({2, 3})}, {"t", Tuple{1, "x"}}};
  EXPECT_EQ(a, same);
  Value as_list = Map{{"w", Arange({2, 3})}, {"t", List{1, "x"}}};
  EXPECT_NE(a, as_list);  // tuple != list
  Tensor changed = Arange({2, 3});
  changed.data<float>()[5] = -1;
  EXPECT_NE(a, (Value(Map{{"w", changed}, {"t", Tuple{1, "x"}}})));
  EXPECT_NE(a, (Value(Map{{"t", Tuple{1, "x"}}, {"w", Arange({2, 3})}})));  // order matters
  EXPECT_NE(Value(1), Value(true));
  EXPECT_NE(Value(1), Value(1.0));
  EXPECT_EQ(Value(std::nan("")), Value(std::nan("")));
  // A strided tensor equals its contiguous copy.
  Tensor cols = *Arange({3, 4}).Slice(1, 0, 4, 2);
  EXPECT_EQ(Value(cols), Value(*cols.Contiguous()));
}

TEST(Value, DebugStringShowsShapesDtypesAndPlacements) {
  auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("2"));
  DTensor d = *DTensor::Make(Arange({2, 4}), mesh, {Placement::Shard(0)}, {4, 4});
  Value sd = Map{{"w", Arange({2, 2})},
                 {"d", d},
                 {"opt", Map{{"betas", Tuple{0.5, 2}}}},
                 {"o", Opaque{nullptr, "BytesIO", nullptr}}};
  const std::string s = DebugString(sd);
  EXPECT_THAT(s, HasSubstr("\"w\": float32[2, 2] cpu"));
  EXPECT_THAT(s, HasSubstr("[S(0)]"));
  EXPECT_THAT(s, HasSubstr("\"betas\": (\n"));
  EXPECT_THAT(s, HasSubstr("<BytesIO>"));
  EXPECT_EQ(DebugString(Map{}), "{}");
}

// Assigning a part of a tree to the tree itself.
TEST(Value, AssigningAPartOfItselfIsSafe) {
  Value cur = Map{{"model", Map{{"w", 1}}}};
  cur = cur.as_map().value(0);
  ASSERT_TRUE(cur.is_map());
  EXPECT_EQ(cur.Find("w")->as_int(), 1);
  Value list = List{List{7, 8}};
  list = list.items()[0];
  EXPECT_EQ(list.items()[1].as_int(), 8);
  Map m{{"inner", Map{{"w", 1}, {"v", 2}}}};
  m = m.value(0).as_map();
  EXPECT_THAT(m.keys(), ElementsAre("w", "v"));
  EXPECT_EQ(m.Find("v")->as_int(), 2);
}

TEST(Value, EraseIfRemovesManyKeysInOnePass) {
  Map m;
  for (int i = 0; i < 1000; ++i) m.Set(absl::StrCat("k", i), i);
  const size_t removed =
      m.EraseIf([](const std::string&, const Value& v) { return v.as_int() % 2 == 1; });
  EXPECT_EQ(removed, 500u);
  ASSERT_EQ(m.size(), 500u);
  EXPECT_EQ(m.key(1), "k2");
  EXPECT_EQ(m.Find("k998")->as_int(), 998);
  EXPECT_EQ(m.Find("k999"), nullptr);
  EXPECT_EQ(m.EraseIf([](const std::string&, const Value&) { return false; }), 0u);
}

}  // namespace
}  // namespace sdrt
