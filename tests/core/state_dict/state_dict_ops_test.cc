// CPU tests of the iteration engine and of OffloadStateDictToCpu, CopyStateDict and the
// similarity check: companion mismatch messages for every rule, ranks_only
// (docs/SEMANTICS.md 9 item 3 on CPU), tuples (case-032), type_check, strided copies
// (case-005-like), case-030. CreateCpuStateDict and docs/SEMANTICS.md 9 item 5 are in
// create_cpu_state_dict_test.cc.
#include "sdrt/core/state_dict/state_dict_ops.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/state_dict/flatten.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/tests/core/state_dict/state_dict_ops_test_util.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::sdrt::test::Arange;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing_ops::BytesIO;
using testing_ops::Floats;
using testing_ops::Full;
using testing_ops::ShardedRows;
using testing_ops::Unknown;

// {"layers": [{}, {}, {}, <layer3>]}: puts the interesting value at path layers.3.
Map Layers(Value layer3) { return Map{{"layers", List{Map{}, Map{}, Map{}, std::move(layer3)}}}; }

// The error CopyStateDict(src, dst) returns (OK if it succeeds).
absl::Status CopyError(const Map& src, const Map& dst) { return CopyStateDict(src, dst).status(); }

void ExpectMismatch(const absl::Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(IsCompanionMismatch(status)) << status;
  EXPECT_EQ(status.message(), message);
}

TEST(CompanionMismatch, KeysMissingFromCompanionAreNamedWithTheirPath) {
  Map src = Layers(Map{{"weight", Arange({2})}, {"bias", Arange({2})}});
  Map dst = Layers(Map{{"bias", Arange({2})}});
  ExpectMismatch(CopyError(src, dst),
                 "companion mismatch at layers.3: keys differ; missing from companion: "
                 "[layers.3.weight]");
}

TEST(CompanionMismatch, KeysOnlyInCompanionAreNamed) {
  Map src = Layers(Map{{"bias", Arange({2})}});
  Map dst = Layers(Map{{"bias", Arange({2})}, {"weight", Map{{"a", 1}, {"b", List{}}}}});
  ExpectMismatch(CopyError(src, dst),
                 "companion mismatch at layers.3: keys differ; only in companion: "
                 "[layers.3.weight.a, layers.3.weight.b]");
}

TEST(CompanionMismatch, KeysDifferingBothWaysAtTheRoot) {
  ExpectMismatch(CopyError(Map{{"a", 1}, {"b", 2}}, Map{{"b", 2}, {"c", 3}}),
                 "companion mismatch at <root>: keys differ; missing from companion: [a]; only "
                 "in companion: [c]");
}

TEST(CompanionMismatch, LongNameListsAreCut) {
  Map src;
  for (int i = 0; i < 15; ++i) src.Set("k" + std::to_string(i), i);
  const absl::Status status = CopyError(src, Map{});
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("[k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, and 5 more]"));
}

TEST(CompanionMismatch, ListLengthsNameTheExtraItems) {
  Map src = Layers(Map{{"weight", List{Arange({1}), Map{{"x", 1}, {"y", 2}}}}});
  Map dst = Layers(Map{{"weight", List{Arange({1})}}});
  ExpectMismatch(CopyError(src, dst),
                 "companion mismatch at layers.3.weight: source list has 2 items, companion "
                 "list has 1; missing from companion: [layers.3.weight.1.x, layers.3.weight.1.y]");
  ExpectMismatch(CopyError(dst, src),
                 "companion mismatch at layers.3.weight: source list has 1 items, companion "
                 "list has 2; only in companion: [layers.3.weight.1.x, layers.3.weight.1.y]");
}

TEST(CompanionMismatch, KindsAreNamed) {
  const Tensor t = Arange({2});
  ExpectMismatch(
      CopyError(Layers(Map{{"weight", Map{{"a", t}}}}), Layers(Map{{"weight", List{t}}})),
      "companion mismatch at layers.3.weight: source is a dict, companion is a list");
  ExpectMismatch(CopyError(Layers(Map{{"weight", List{t}}}), Layers(Map{{"weight", t}})),
                 "companion mismatch at layers.3.weight: source is a list, companion is a Tensor");
  ExpectMismatch(CopyError(Layers(Map{{"weight", t}}), Layers(Map{{"weight", Map{}}})),
                 "companion mismatch at layers.3.weight: source is a Tensor, companion is a dict");
  ExpectMismatch(CopyError(Layers(Map{{"weight", t}}), Layers(Map{{"weight", 3}})),
                 "companion mismatch at layers.3.weight: source is a Tensor, companion is an int");
  const DTensor d = ShardedRows(Arange({2, 2}), 2);
  ExpectMismatch(CopyError(Map{{"w", d}}, Map{{"w", Arange({2, 2})}}),
                 "companion mismatch at w: source is a DTensor, companion is a Tensor");
}

TEST(CompanionMismatch, ShapesAndDtypesMustMatchExactly) {
  // PyTorch's copy_ would broadcast [3] into [2, 3] and convert float32 to int64; sdrt
  // reports both (tests/golden/README.md).
  ExpectMismatch(
      CopyError(Layers(Map{{"weight", Arange({2, 3})}}), Layers(Map{{"weight", Arange({3, 2})}})),
      "companion mismatch at layers.3.weight: source float32[2, 3], companion "
      "float32[3, 2]");
  ExpectMismatch(CopyError(Map{{"w", Arange({3})}}, Map{{"w", Arange({2, 3})}}),
                 "companion mismatch at w: source float32[3], companion float32[2, 3]");
  ExpectMismatch(CopyError(Map{{"w", Arange({3})}}, Map{{"w", Arange({3}, DType::kInt64)}}),
                 "companion mismatch at w: source float32[3], companion int64[3]");
  ExpectMismatch(CopyError(Map{{"w", ShardedRows(Arange({2, 2}), 2)}},
                           Map{{"w", ShardedRows(Arange({1, 2}), 4)}}),
                 "companion mismatch at w: source float32[2, 2], companion float32[1, 2]");
}

TEST(CompanionMismatch, ShardCountsMustMatch) {
  ShardedTensor one = testing_ops::SpecShardedTensor(0, 2);
  ShardedTensor none =
      *ShardedTensor::Make(one.global_shape(), one.dtype(), one.shards_metadata(), {});
  ExpectMismatch(
      CopyError(Map{{"st", one}}, Map{{"st", none}}),
      "companion mismatch at st: source ShardedTensor has 1 local shards, companion has 0");
}

TEST(CompanionMismatch, NoneCompanionMeansNothingToMatchAsInPyTorch) {
  const Tensor t = Arange({2});
  absl::StatusOr<CopyResult> copied =
      CopyStateDict(Map{{"x", t}, {"d", Map{{"a", t}}}}, Map{{"x", None{}}, {"d", None{}}});
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->state_dict.Find("x")->as_tensor().storage(), t.storage());
  EXPECT_EQ(copied->state_dict.Find("d")->Find("a")->as_tensor().storage(), t.storage());
}

TEST(CompanionMismatch, NonTensorLeavesIgnoreTheirCompanionAsInPyTorch) {
  absl::StatusOr<CopyResult> copied =
      CopyStateDict(Map{{"x", 1}, {"s", "a"}}, Map{{"x", Arange({1})}, {"s", 2.0}});
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->state_dict.Find("x")->as_int(), 1);
  EXPECT_EQ(copied->state_dict.Find("s")->as_string(), "a");
}

TEST(Iterate, VisitorErrorsGetThePath) {
  internal::IterateVisitors visitors = internal::IdentityVisitors();
  visitors.tensor = [](const Tensor&, const Value*) -> absl::StatusOr<Value> {
    return absl::DataLossError("visitor failed");
  };
  absl::StatusOr<Map> out =
      internal::IterateStateDict(Layers(Map{{"weight", Arange({1})}}), visitors, nullptr, {});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(out.status().message(), "visitor failed (at layers.3.weight)");
  visitors.tensor = [](const Tensor&, const Value*) -> absl::StatusOr<Value> {
    return internal::CompanionMismatch("visitor says no");
  };
  out = internal::IterateStateDict(Map{{"t", Tuple{1, Arange({1})}}}, visitors, nullptr, {});
  ExpectMismatch(out.status(), "companion mismatch at t.1: visitor says no");
}

TEST(Iterate, ExcludedRanksRunEveryVisitorAndGetAnEmptyMap) {
  // docs/SEMANTICS.md 5 step B: collectives inside visitors must stay matched on every rank.
  int visits = 0;
  internal::IterateVisitors visitors = internal::IdentityVisitors();
  visitors.tensor = [&visits](const Tensor& t, const Value*) -> absl::StatusOr<Value> {
    ++visits;
    return Value(t);
  };
  internal::IterateOptions options;
  options.rank = 1;
  options.ranks_only = {0, 2};
  options.cpu_offload = true;
  absl::StatusOr<Map> out = internal::IterateStateDict(
      Map{{"a", Arange({1})}, {"b", List{Arange({1}), Map{{"c", Arange({1})}}}}}, visitors, nullptr,
      options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->empty());
  EXPECT_EQ(visits, 3);
}

TEST(Offload, RanksOnlyCpuTensorsSpec9Item3) {
  // docs/SEMANTICS.md 9 item 3 on CPU: {tensor1: arange(10), tensor2: ones(10)}, ranks_only {0, 2}.
  const Map sd{{"tensor1", Arange({10})}, {"tensor2", Full({10}, 1.0f)}};
  for (int rank = 0; rank < 4; ++rank) {
    absl::StatusOr<Map> out = OffloadStateDictToCpu(sd, OffloadOptions{rank, {0, 2}});
    ASSERT_TRUE(out.ok()) << out.status();
    if (rank == 0 || rank == 2) {
      EXPECT_TRUE(Value(*out) == Value(sd)) << "rank " << rank;
    } else {
      EXPECT_TRUE(out->empty()) << "rank " << rank;
    }
  }
}

TEST(Offload, CpuTensorsAreAliasedAndDistributedTypesKeptAsInPyTorch) {
  const Tensor t = Arange({4});
  const DTensor d = ShardedRows(Arange({2, 2}), 2);
  const ShardedTensor st = testing_ops::SpecShardedTensor(1, 2);
  absl::StatusOr<Map> out = OffloadStateDictToCpu(Map{{"t", t}, {"d", d}, {"st", st}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->Find("t")->as_tensor().storage(), t.storage());  // .to(cpu) returns self
  EXPECT_EQ(out->Find("d")->as_dtensor().local().storage(), d.local().storage());
  EXPECT_EQ(out->Find("st")->as_sharded().local_shards()[0].tensor.storage(),
            st.local_shards()[0].tensor.storage());
}

TEST(Offload, MetaTensorHasNoDataToMove) {
  absl::StatusOr<Map> out =
      OffloadStateDictToCpu(Layers(Map{{"weight", *Tensor::Meta({2}, DType::kFloat32)}}));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status().message()), StartsWith("OffloadStateDictToCpu: "));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("(at layers.3.weight)"));
}

TEST(Offload, TuplesStayTuplesCase032) {
  // case-032: the iterate-based operations keep a tuple a tuple (flatten does not).
  const Map sd{{"t", Tuple{Arange({2}), 20}}, {"l", List{None{}, 5}}};
  absl::StatusOr<Map> out = OffloadStateDictToCpu(sd);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->Find("t")->is_tuple());
  EXPECT_TRUE(out->Find("l")->is_list());
  EXPECT_TRUE(Value(*out) == Value(sd));
  // Copy keeps the source's tuple even into a list companion.
  const Map dst{{"t", List{Arange({2}, DType::kFloat32, 7), 0}}, {"l", List{None{}, 0}}};
  absl::StatusOr<CopyResult> copied = CopyStateDict(sd, dst);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_TRUE(copied->state_dict.Find("t")->is_tuple());
  EXPECT_EQ(copied->state_dict.Find("t")->items()[1].as_int(), 20);
  EXPECT_EQ(Floats(dst.Find("t")->items()[0].as_tensor()), (std::vector<float>{0, 1}));
}

TEST(Offload, TypeCheckNamesThePathOfAnUnknownObject) {
  const Map sd{{"opt", Map{{"state", List{Map{{"obj", Unknown("Foo")}}}}}}, {"io", BytesIO("abc")}};
  absl::StatusOr<Map> out = OffloadStateDictToCpu(sd);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(),
            "OffloadStateDictToCpu: IterateStateDict: unexpected value type 'Foo' at "
            "opt.state.0.obj (type_check is on)");
  out = OffloadStateDictToCpu(sd, OffloadOptions{0, {}, /*type_check=*/false});
  ASSERT_TRUE(out.ok()) << out.status();
  const Opaque& cloned = out->Find("opt")->Find("state")->items()[0].Find("obj")->as_opaque();
  EXPECT_EQ(cloned.type_name, "Foo");
  EXPECT_NE(cloned.object,
            sd.Find("opt")->Find("state")->items()[0].Find("obj")->as_opaque().object);
  // io.BytesIO is a known type: passed by reference, with or without type_check.
  EXPECT_EQ(out->Find("io")->as_opaque().object, sd.Find("io")->as_opaque().object);
}

TEST(Offload, OpaqueWithoutCloneFunction) {
  Opaque o = Unknown("Foo");
  o.clone = nullptr;
  absl::StatusOr<Map> out = OffloadStateDictToCpu(Map{{"o", o}}, OffloadOptions{0, {}, false});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'Foo' at o has no clone function"));
}

TEST(Copy, CopiesIntoTheDestinationAndReturnsItsTensors) {
  const Tensor src_t = Arange({2, 3});
  const Tensor dst_t = Full({2, 3}, -1.0f);
  const DTensor src_d = ShardedRows(Arange({2, 2}, DType::kFloat32, 10), 2);
  const DTensor dst_d = ShardedRows(Full({2, 2}, -1.0f), 2);
  const ShardedTensor src_st = testing_ops::SpecShardedTensor(1, 2);
  const ShardedTensor dst_st =
      testing_ops::SpecShardedTensor(1, 2, Device::CPU(), Full({5, 10}, -1.0f));
  const Map src{{"t", src_t}, {"d", src_d}, {"st", src_st}, {"n", 3}, {"io", BytesIO("x")}};
  const Map dst{{"t", dst_t}, {"d", dst_d}, {"st", dst_st}, {"n", 0}, {"io", None{}}};
  absl::StatusOr<CopyResult> copied = CopyStateDict(src, dst);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->done, nullptr);  // CPU copies complete before returning
  const Map& out = copied->state_dict;
  EXPECT_EQ(out.Find("t")->as_tensor().storage(), dst_t.storage());
  EXPECT_EQ(Floats(dst_t), Floats(src_t));
  EXPECT_EQ(out.Find("d")->as_dtensor().local().storage(), dst_d.local().storage());
  EXPECT_EQ(Floats(dst_d.local()), Floats(src_d.local()));
  EXPECT_EQ(Floats(dst_st.local_shards()[0].tensor), Floats(src_st.local_shards()[0].tensor));
  EXPECT_EQ(out.Find("n")->as_int(), 3);  // non-tensor leaves: the source's values
  EXPECT_EQ(out.Find("io")->as_opaque().object, src.Find("io")->as_opaque().object);
}

TEST(Copy, StridedSourceAndDestinationCase005Like) {
  // A 3x4 slice (columns 2..5) of a 3x9 tensor, strides (9, 1), into a contiguous 3x4
  // and into another 3x9 tensor's columns 5..8, whose other columns stay untouched.
  const Tensor big = Arange({3, 9});
  const Tensor src = *big.Slice(1, 2, 6);
  ASSERT_EQ(src.strides(), (IntVector{9, 1}));
  const Tensor dst_contiguous = Full({3, 4}, -1.0f);
  const Tensor other = Full({3, 9}, -1.0f);
  const Tensor dst_strided = *other.Slice(1, 5, 9);
  ASSERT_TRUE(
      CopyStateDict(Map{{"a", src}, {"b", src}}, Map{{"a", dst_contiguous}, {"b", dst_strided}})
          .ok());
  const std::vector<float> expected{2, 3, 4, 5, 11, 12, 13, 14, 20, 21, 22, 23};
  EXPECT_EQ(Floats(dst_contiguous), expected);
  EXPECT_EQ(Floats(dst_strided), expected);
  EXPECT_EQ(Floats(*other.Slice(1, 0, 5)), std::vector<float>(15, -1.0f));
}

TEST(Similarity, Case030ReportsTheMissingKeysByName) {
  // case-030: A = {"my_key": [{"key_1": 1}, {"key_2": 2}]}, B = {"my_key": []}.
  const Map a{{"my_key", List{Map{{"key_1", 1}}, Map{{"key_2", 2}}}}};
  const Map b{{"my_key", List{}}};
  EXPECT_FALSE(CheckStateDictSimilarity(a, b));
  EXPECT_FALSE(CheckStateDictSimilarity(b, a));
  ExpectMismatch(CompareStateDicts(a, b),
                 "companion mismatch at my_key: source list has 2 items, companion list has 0; "
                 "missing from companion: [my_key.0.key_1, my_key.1.key_2]");
  ExpectMismatch(CompareStateDicts(b, a),
                 "companion mismatch at my_key: source list has 0 items, companion list has 2; "
                 "only in companion: [my_key.0.key_1, my_key.1.key_2]");
}

TEST(Similarity, ComparesWhatACopyNeedsAndNeverWritesIntoB) {
  const Tensor a_t = Arange({2, 3});
  const Tensor b_t = Full({2, 3}, -1.0f);
  EXPECT_TRUE(CheckStateDictSimilarity(Map{{"w", a_t}, {"n", 1}}, Map{{"w", b_t}, {"n", "other"}}));
  EXPECT_EQ(Floats(b_t), std::vector<float>(6, -1.0f));  // PyTorch would have copied a into b
  ExpectMismatch(CompareStateDicts(Map{{"w", a_t}}, Map{{"w", Arange({2, 3}, DType::kInt64)}}),
                 "companion mismatch at w: source float32[2, 3], companion int64[2, 3]");
  // A tensor against None: PyTorch raises AttributeError (docs/SEMANTICS.md 11.8); sdrt: a
  // difference.
  ExpectMismatch(CompareStateDicts(Map{{"w", a_t}}, Map{{"w", None{}}}),
                 "companion mismatch at w: source is a Tensor, companion is None");
  ExpectMismatch(CompareStateDicts(Map{{"d", Map{{"w", a_t}}}}, Map{{"d", None{}}}),
                 "companion mismatch at d.w: source is a Tensor, companion is None");
  // DTensor locals: PyTorch raises copying into b when shapes differ; sdrt: a difference.
  EXPECT_TRUE(CheckStateDictSimilarity(Map{{"d", ShardedRows(Arange({2, 2}), 2)}},
                                       Map{{"d", ShardedRows(Full({2, 2}, 0), 2)}}));
  EXPECT_FALSE(CheckStateDictSimilarity(Map{{"d", ShardedRows(Arange({2, 2}), 2)}},
                                        Map{{"d", ShardedRows(Arange({1, 2}), 4)}}));
  // A DTensor against None has nothing to match, as in PyTorch.
  EXPECT_TRUE(
      CheckStateDictSimilarity(Map{{"d", ShardedRows(Arange({2, 2}), 2)}}, Map{{"d", None{}}}));
}

TEST(Similarity, OpaqueWithoutCloneIsNotSimilar) {
  Opaque o = Unknown("Foo");
  o.clone = nullptr;
  EXPECT_FALSE(CheckStateDictSimilarity(Map{{"o", o}}, Map{{"o", o}}));
  const absl::Status status = CompareStateDicts(Map{{"o", o}}, Map{{"o", o}});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), StartsWith("CompareStateDicts: "));
  EXPECT_TRUE(CheckStateDictSimilarity(Map{{"o", Unknown("Foo")}}, Map{{"o", 1}}));
}

// Thousands of nesting levels are an error, not a stack overflow.
TEST(NestingLimit, DeepNestingIsAnErrorNotAStackOverflow) {
  Value deep = 1;
  for (size_t i = 0; i < kMaxNestingDepth + 5; ++i) deep = Map{{"x", std::move(deep)}};
  const Map& sd = deep.as_map();
  absl::Status offload = OffloadStateDictToCpu(sd).status();
  EXPECT_EQ(offload.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(offload.message(), ::testing::HasSubstr("nested deeper than 1000 levels"));
  EXPECT_FALSE(CheckStateDictSimilarity(sd, sd));
  absl::Status flat = FlattenStateDict(sd).status();
  EXPECT_THAT(flat.message(), ::testing::HasSubstr("nested deeper than 1000 levels"));
  Value shallow = 1;
  for (int i = 0; i < 100; ++i) shallow = Map{{"x", std::move(shallow)}};
  EXPECT_TRUE(OffloadStateDictToCpu(shallow.as_map()).ok());
  EXPECT_TRUE(FlattenStateDict(shallow.as_map()).ok());
}

}  // namespace
}  // namespace sdrt
