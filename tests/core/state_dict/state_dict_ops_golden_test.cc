// sdrt's state-dict operations against what PyTorch's own `_copy_state_dict`,
// `_check_state_dict_similarity`, `_offload_state_dict_to_cpu` and `_create_cpu_state_dict`
// did on the same inputs (tests/data/state_dict/iterate_golden.json, written by
// tests/golden/make_iterate_golden.py). Where sdrt deliberately differs, the case is
// listed here and in tests/golden/README.md.
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/state_dict/state_dict_ops.h"
#include "sdrt/tests/core/state_dict/state_dict_ops_test_util.h"
#include "sdrt/tests/support/golden_codec.h"

namespace sdrt {
namespace {

using nlohmann::json;
using testing_golden::DecodeGoldenValue;
using testing_golden::EncodeGoldenValue;
using testing_golden::ReadGoldenJson;

// Copies PyTorch completes by broadcasting or converting dtypes (copy_), which sdrt
// reports as companion mismatches: CopyStateDict never converts.
const std::set<std::string> kStricterCopies = {"dtype_mismatch", "broadcastable_shape",
                                               "dtensor_local_dtype_differs"};

class StateDictOpsGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<json> golden = ReadGoldenJson("state_dict/iterate_golden.json");
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = *std::move(golden);
  }

  static Map DecodeMap(const json& j) {
    absl::StatusOr<Value> v = DecodeGoldenValue(j);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() && v->is_map() ? v->as_map() : Map{};
  }

  json golden_;
};

TEST_F(StateDictOpsGolden, CopyRaisesWherePyTorchRaisesAndOtherwiseMatchesItsResult) {
  // Includes case-030 (a list against an empty list, both ways) and case-032 (a tuple
  // source keeps its tuple against a list companion).
  ASSERT_GE(golden_["companion"].size(), 20u);
  for (const json& c : golden_["companion"]) {
    const std::string name = c["name"];
    const Map src = DecodeMap(c["src"]);
    const Map dst = DecodeMap(c["dst"]);
    absl::StatusOr<CopyResult> copied = CopyStateDict(src, dst);
    const bool pytorch_raises = !c["copy_raises"].is_null();
    if (pytorch_raises || kStricterCopies.count(name) > 0) {
      EXPECT_TRUE(IsCompanionMismatch(copied.status())) << name << ": " << copied.status();
      continue;
    }
    ASSERT_TRUE(copied.ok()) << name << ": " << copied.status();
    EXPECT_TRUE(Value(copied->state_dict) == Value(DecodeMap(c["copy_result"])))
        << name << ": sdrt " << EncodeGoldenValue(Value(copied->state_dict)).dump() << "\nPyTorch "
        << c["copy_result"].dump();
  }
}

TEST_F(StateDictOpsGolden, SimilarityIsFalseWherePyTorchSaysFalseOrRaises) {
  for (const json& c : golden_["companion"]) {
    const std::string name = c["name"];
    const Map a = DecodeMap(c["src"]);
    const Map b = DecodeMap(c["dst"]);
    const bool pytorch_similar = c["similar"].is_boolean() && c["similar"].get<bool>();
    const bool expected = pytorch_similar && kStricterCopies.count(name) == 0;
    EXPECT_EQ(CheckStateDictSimilarity(a, b), expected) << name << ": " << CompareStateDicts(a, b);
    // PyTorch's check copies a into b where it can; sdrt's never writes.
    EXPECT_TRUE(Value(b) == Value(DecodeMap(c["dst"]))) << name;
  }
}

TEST_F(StateDictOpsGolden, RanksOnlyMatchesPyTorchAsRankZero) {
  ASSERT_EQ(golden_["ranks_only"].size(), 5u);
  for (const json& r : golden_["ranks_only"]) {
    OffloadOptions options;
    options.rank = r["rank"];
    options.ranks_only = r["ranks_only"].get<std::vector<int>>();
    absl::StatusOr<Map> out = OffloadStateDictToCpu(DecodeMap(r["input"]), options);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(Value(*out) == Value(DecodeMap(r["result"]))) << r["ranks_only"].dump();
  }
}

TEST_F(StateDictOpsGolden, OffloadKeepsTuplesScalarsAndAliasesLikePyTorch) {
  const json& o = golden_["offload"][0];
  const Map in = DecodeMap(o["input"]);
  absl::StatusOr<Map> out = OffloadStateDictToCpu(in);
  ASSERT_TRUE(out.ok()) << out.status();
  Map expected = DecodeMap(o["result"]);
  expected.Set("io", *in.Find("io"));  // the same BytesIO object, as PyTorch returns it
  EXPECT_TRUE(Value(*out) == Value(expected));
  ASSERT_TRUE(o["tensor_aliases_input"].get<bool>());
  EXPECT_EQ(out->Find("t")->items()[0].as_tensor().storage(),
            in.Find("t")->items()[0].as_tensor().storage());
  ASSERT_TRUE(o["bytesio_is_input"].get<bool>());
  EXPECT_EQ(out->Find("io")->as_opaque().object, in.Find("io")->as_opaque().object);
}

// One leaf of a create_cpu result in the script's form.
void AddLeaves(const Value& v, const Value& src, const std::string& path, json* leaves) {
  const auto child = [&](const std::string& part) {
    return path.empty() ? part : path + "." + part;
  };
  if (v.is_map()) {
    for (size_t i = 0; i < v.as_map().size(); ++i) {
      AddLeaves(v.as_map().value(i), *src.Find(v.as_map().key(i)), child(v.as_map().key(i)),
                leaves);
    }
    return;
  }
  if (v.is_sequence()) {
    for (size_t i = 0; i < v.items().size(); ++i) {
      AddLeaves(v.items()[i], src.items()[i], child(std::to_string(i)), leaves);
    }
    return;
  }
  if (v.kind() != ValueKind::kTensor && v.kind() != ValueKind::kDTensor) {
    leaves->push_back(
        {{"path", path},
         {"kind", v.kind() == ValueKind::kOpaque ? v.as_opaque().type_name
                                                 : std::string(ValueKindName(v.kind()))}});
    return;
  }
  const bool is_dtensor = v.kind() == ValueKind::kDTensor;
  const Tensor& local = is_dtensor ? v.as_dtensor().local() : v.as_tensor();
  const Tensor& src_local = is_dtensor ? src.as_dtensor().local() : src.as_tensor();
  json leaf = {{"path", path},
               {"kind", is_dtensor ? "dtensor" : "tensor"},
               {"dtype", DTypeName(local.dtype())},
               {"shape", is_dtensor ? v.as_dtensor().global_shape() : local.shape()},
               {"local_shape", local.shape()},
               {"device", local.device().ToString()},
               {"contiguous", local.is_contiguous()},
               {"is_shared", local.storage()->kind() == StorageKind::kShared},
               {"value", nullptr},
               {"is_input", local.storage() == src_local.storage()}};
  if (local.dim() == 0) leaf["value"] = testing_ops::Floats(local)[0];
  leaves->push_back(leaf);
}

TEST_F(StateDictOpsGolden, CreateCpuMatchesPyTorchShapesDtypesAndSharing) {
  // case-021 against PyTorch: zero-size, 0-dim, meta, strided, bf16, DTensor (0-dim too).
  ASSERT_EQ(golden_["create_cpu"].size(), 2u);
  for (const json& c : golden_["create_cpu"]) {
    const bool share = c["share_memory"];
    const Map in = DecodeMap(c["input"]);
    absl::StatusOr<Map> out = CreateCpuStateDict(in, CreateCpuOptions{false, share});
    ASSERT_TRUE(out.ok()) << out.status();
    json leaves = json::array();
    AddLeaves(Value(*out), Value(in), "", &leaves);
    ASSERT_EQ(leaves.size(), c["leaves"].size());
    for (size_t i = 0; i < leaves.size(); ++i) {
      json expected = c["leaves"][i];
      const std::string path = expected["path"];
      if (expected["kind"] != "tensor" && expected["kind"] != "dtensor") {
        expected.erase("is_input");  // Python identity of ints and strings: not comparable
      } else if (path == "dt0") {
        // PyTorch returns a 0-dim DTensor as is; sdrt gives it a new CPU local holding 0.
        ASSERT_TRUE(expected["is_input"].get<bool>());
        expected["is_input"] = false;
        expected["value"] = 0.0;
      } else if (path == "a" || path == "b") {
        // PyTorch's share_memory_() marks a 0-byte tensor shared; sdrt maps nothing.
        expected["is_shared"] = false;
      }
      EXPECT_EQ(leaves[i], expected) << "share=" << share;
    }
  }
}

}  // namespace
}  // namespace sdrt
