// sdrt's GatherStateDict and BroadcastStateDict against what PyTorch's own
// `_gather_state_dict` and `_broadcast_state_dict` did on the same inputs with the same
// number of gloo ranks (tests/data/distributed/golden_np{N}.json, written by
// tests/golden/make_distributed_golden.py). CTest runs this binary under `mpiexec -n N`
// for N = 1..4; each rank decodes its own input from the file for N, calls sdrt over the
// MPI world communicator and compares, bit for bit, with what PyTorch gave that rank.
// Every comparison runs with a 64-byte bucket (many buckets, tensors split across them)
// and with the default (everything in one bucket); both must give PyTorch's result.
//
// Where PyTorch's result differs from sdrt's documented semantics the golden case carries
// a note naming the key and "expected_by_spec", the value sdrt must give instead (PyTorch's
// _distribute_tensors slicing a non-contiguous _StridedShard by offset and shape, docs/SEMANTICS.md
// 11.1; a None local leaf, which PyTorch leaves None and sdrt replaces by the full tensor);
// those keys are compared with that value. Rank 0 prints GoogleTest's usual output; other
// ranks print only their failures.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tests/support/golden_codec.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt {
namespace {

using nlohmann::json;
using testing_golden::DecodeGoldenValue;
using testing_golden::EncodeGoldenValue;
using testing_golden::ReadGoldenJson;

MpiCommunicator* g_world = nullptr;

// Values sdrt must give instead of PyTorch's, by dotted path.
using Overrides = std::map<std::string, Value>;

constexpr size_t kMaxDiffs = 20;

std::string Truncated(std::string s, size_t n = 300) {
  if (s.size() > n) s = s.substr(0, n) + "...";
  return s;
}

std::string DescribeTensor(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  std::string out = absl::StrCat(DTypeName(t.dtype()), ShapeToString(t.shape()), " ",
                                 t.device().ToString(), t.is_contiguous() ? "" : " non-contiguous");
  const json j = EncodeGoldenValue(Value(t));
  if (j.contains("hex")) absl::StrAppend(&out, " hex ", Truncated(j["hex"].get<std::string>(), 96));
  return out;
}

std::string Describe(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kTensor:
      return DescribeTensor(v.as_tensor());
    case ValueKind::kDTensor: {
      const DTensor& d = v.as_dtensor();
      return absl::StrCat("DTensor mesh ", d.mesh() ? d.mesh()->ToString() : "null", " ",
                          PlacementsToString(d.placements()), " global ",
                          ShapeToString(d.global_shape()), " stride ",
                          ShapeToString(d.global_stride()), " local ", DescribeTensor(d.local()));
    }
    default:
      return Truncated(EncodeGoldenValue(v).dump());
  }
}

// Where two tensors of the same dtype and shape first differ.
std::string FirstDifference(const Tensor& want, const Tensor& got) {
  absl::StatusOr<Tensor> a = want.To(Device::CPU());
  absl::StatusOr<Tensor> b = got.To(Device::CPU());
  if (a.ok()) a = a->Contiguous();
  if (b.ok()) b = b->Contiguous();
  if (!a.ok() || !b.ok()) return "cannot read the bytes";
  const int64_t elem = (ElementBits(a->dtype()) / 8);
  const auto* pa = static_cast<const unsigned char*>(a->data_ptr());
  const auto* pb = static_cast<const unsigned char*>(b->data_ptr());
  for (int64_t i = 0; i < a->numel(); ++i) {
    if (std::memcmp(pa + i * elem, pb + i * elem, elem) != 0) {
      auto hex = [elem](const unsigned char* p) {
        std::string s;
        for (int64_t k = 0; k < elem; ++k) absl::StrAppend(&s, absl::Hex(p[k], absl::kZeroPad2));
        return s;
      };
      return absl::StrCat("first differing element ", i, " (row-major): expected bytes ",
                          hex(pa + i * elem), ", got ", hex(pb + i * elem));
    }
  }
  return "bytes equal";
}

// Appends to `diffs` every place (up to kMaxDiffs) where `got` differs from `want`,
// naming the dotted path. A path in `overrides` is compared with the override instead.
void Diff(const Value& want_in, const Value& got, const std::string& path,
          const Overrides& overrides, std::vector<std::string>& diffs) {
  if (diffs.size() >= kMaxDiffs) return;
  auto it = overrides.find(path);
  const Value& want = it == overrides.end() ? want_in : it->second;
  const std::string where = path.empty() ? "<root>" : path;
  const std::string tag = it == overrides.end() ? "" : " (expected_by_spec, PyTorch differs)";
  if (want.kind() != got.kind()) {
    diffs.push_back(absl::StrCat(where, tag, ": expected ", ValueKindName(want.kind()), " ",
                                 Describe(want), "\n    got ", ValueKindName(got.kind()), " ",
                                 Describe(got)));
    return;
  }
  auto child = [&path](const std::string& k) { return path.empty() ? k : path + "." + k; };
  switch (want.kind()) {
    case ValueKind::kMap: {
      const Map& a = want.as_map();
      const Map& b = got.as_map();
      if (a.keys() != b.keys()) {
        diffs.push_back(absl::StrCat(where, tag, ": keys differ: expected [",
                                     absl::StrJoin(a.keys(), ", "), "]\n    got [",
                                     absl::StrJoin(b.keys(), ", "), "]"));
      }
      for (size_t i = 0; i < a.size(); ++i) {
        if (const Value* g = b.Find(a.key(i)))
          Diff(a.value(i), *g, child(a.key(i)), overrides, diffs);
      }
      return;
    }
    case ValueKind::kList:
    case ValueKind::kTuple: {
      if (want.items().size() != got.items().size()) {
        diffs.push_back(absl::StrCat(where, tag, ": expected ", want.items().size(), " items, got ",
                                     got.items().size()));
        return;
      }
      for (size_t i = 0; i < want.items().size(); ++i) {
        Diff(want.items()[i], got.items()[i], child(absl::StrCat(i)), overrides, diffs);
      }
      return;
    }
    default:
      break;
  }
  if (want == got) return;
  std::string detail;
  const Tensor* a = nullptr;
  const Tensor* b = nullptr;
  if (want.kind() == ValueKind::kTensor) {
    a = &want.as_tensor();
    b = &got.as_tensor();
  } else if (want.kind() == ValueKind::kDTensor) {
    a = &want.as_dtensor().local();
    b = &got.as_dtensor().local();
  }
  if (a != nullptr && a->defined() && b->defined() && a->dtype() == b->dtype() &&
      a->shape() == b->shape() && !a->is_meta() && !b->is_meta()) {
    detail = absl::StrCat("\n    ", FirstDifference(*a, *b));
  }
  diffs.push_back(
      absl::StrCat(where, tag, ": expected ", Describe(want), "\n    got ", Describe(got), detail));
}

std::string DiffReport(const Value& want, const Value& got, const Overrides& overrides = {}) {
  std::vector<std::string> diffs;
  Diff(want, got, "", overrides, diffs);
  return absl::StrJoin(diffs, "\n  ");
}

// Every tensor leaf of `v` (plain tensors and DTensor locals) on the CPU and contiguous.
void CollectNonContiguous(const Value& v, const std::string& path, std::vector<std::string>& out) {
  switch (v.kind()) {
    case ValueKind::kMap:
      for (size_t i = 0; i < v.as_map().size(); ++i) {
        CollectNonContiguous(v.as_map().value(i),
                             path.empty() ? v.as_map().key(i) : path + "." + v.as_map().key(i),
                             out);
      }
      return;
    case ValueKind::kList:
    case ValueKind::kTuple:
      for (size_t i = 0; i < v.items().size(); ++i) {
        CollectNonContiguous(v.items()[i], absl::StrCat(path, path.empty() ? "" : ".", i), out);
      }
      return;
    case ValueKind::kTensor:
      if (!v.as_tensor().is_contiguous() || !v.as_tensor().device().is_cpu()) out.push_back(path);
      return;
    default:
      return;
  }
}

// True on every rank when `ok` is true on every rank, so that no rank enters a collective
// the others skip (a decoding failure on one rank must not hang the others).
bool AllRanksOk(bool ok) {
  absl::StatusOr<std::vector<std::string>> all = g_world->AllGatherBytes(ok ? "1" : "0");
  if (!all.ok()) {
    ADD_FAILURE() << "AllGatherBytes: " << all.status();
    return false;
  }
  return std::all_of(all->begin(), all->end(), [](const std::string& s) { return s == "1"; });
}

absl::StatusOr<Map> DecodeMap(const json& j) {
  absl::StatusOr<Value> v = DecodeGoldenValue(j);
  if (!v.ok()) return v.status();
  if (!v->is_map()) return absl::InvalidArgumentError("golden value is not a dict");
  return std::move(v->as_map());
}

Overrides NotesToOverrides(const json& notes, std::vector<std::string>* noted_keys) {
  Overrides out;
  for (const json& n : notes) {
    const std::string key = n["key"];
    if (noted_keys != nullptr) noted_keys->push_back(key);
    if (!n.contains("expected_by_spec")) continue;
    absl::StatusOr<Value> v = DecodeGoldenValue(n["expected_by_spec"]);
    EXPECT_TRUE(v.ok()) << key << ": " << v.status();
    if (v.ok()) out.emplace(key, *std::move(v));
  }
  return out;
}

std::vector<std::string> Strings(const json& j) {
  std::vector<std::string> out;
  for (const json& s : j) out.push_back(s.get<std::string>());
  return out;
}

class DistributedGolden : public ::testing::TestWithParam<int64_t> {
 protected:
  static void SetUpTestSuite() {
    const int n = g_world->size();
    absl::StatusOr<json> golden = ReadGoldenJson(absl::StrCat("distributed/golden_np", n, ".json"));
    if (golden.ok()) {
      golden_ = new json(*std::move(golden));
    } else {
      load_error_ = new std::string(golden.status().ToString());
    }
  }
  static void TearDownTestSuite() {
    delete golden_;
    golden_ = nullptr;
    delete load_error_;
    load_error_ = nullptr;
  }

  void SetUp() override {
    if (golden_ == nullptr) {
      // The same on every rank: no golden file for this world size (only 1..4 exist).
      GTEST_SKIP() << "no golden data for " << g_world->size() << " ranks: " << *load_error_;
    }
    ASSERT_EQ((*golden_)["world_size"].get<int>(), g_world->size());
    ASSERT_EQ((*golden_)["ranks"].size(), static_cast<size_t>(g_world->size()));
    mine_ = &(*golden_)["ranks"][static_cast<size_t>(g_world->rank())];
    ASSERT_EQ((*mine_)["rank"].get<int>(), g_world->rank());
  }

  std::string Where() const {
    return absl::StrCat("rank ", g_world->rank(), " of ", g_world->size(), ", bucket_bytes ",
                        GetParam(), " (torch ", (*golden_)["torch_version"].get<std::string>(),
                        ")");
  }

  // Runs GatherStateDict on this rank's input and compares with `expected_field`.
  void CheckGather(const char* expected_field, bool offload_to_rank0) {
    SCOPED_TRACE(Where());
    absl::StatusOr<Map> input = DecodeMap((*mine_)["input"]);
    absl::StatusOr<Map> expected = DecodeMap((*mine_)[expected_field]);
    EXPECT_TRUE(input.ok()) << input.status();
    EXPECT_TRUE(expected.ok()) << expected.status();
    if (!AllRanksOk(input.ok() && expected.ok())) return;
    std::vector<std::string> noted;
    const Overrides overrides = NotesToOverrides((*mine_)["gather_notes"], &noted);

    GatherOptions options;
    options.comm = g_world;
    options.bucket_bytes = GetParam();
    if (offload_to_rank0) {
      options.cpu_offload = true;
      options.ranks_only = {0};
    }
    TransferStats stats;
    options.stats = &stats;
    absl::StatusOr<Map> got = GatherStateDict(*input, options);
    ASSERT_TRUE(got.ok()) << expected_field << ": " << got.status();
    const std::string report = DiffReport(Value(*expected), Value(*got), overrides);
    EXPECT_TRUE(report.empty()) << expected_field << " differs from PyTorch's"
                                << (noted.empty() ? "" : " (noted keys: ")
                                << absl::StrJoin(noted, ", ") << (noted.empty() ? "" : ")")
                                << ":\n  " << report;
    std::vector<std::string> bad;
    CollectNonContiguous(Value(*got), "", bad);
    EXPECT_TRUE(bad.empty()) << expected_field << ": result tensors not contiguous on the CPU: "
                             << absl::StrJoin(bad, ", ");
    // The input is read, never written (compared with a fresh decode: copies of a Value
    // share tensor bytes).
    absl::StatusOr<Value> input_again = DecodeGoldenValue((*mine_)["input"]);
    ASSERT_TRUE(input_again.ok()) << input_again.status();
    const std::string input_report = DiffReport(*input_again, Value(*input));
    EXPECT_TRUE(input_report.empty()) << "GatherStateDict changed its input:\n  " << input_report;
    if (g_world->size() > 1) {
      EXPECT_GT(stats.exchanges, 0);
    }
  }

  static json* golden_;
  static std::string* load_error_;
  const json* mine_ = nullptr;
};

json* DistributedGolden::golden_ = nullptr;
std::string* DistributedGolden::load_error_ = nullptr;

// case-001 (5x10 over 4: locals 2,2,1,0), dim 0 smaller than the mesh, uneven Shard(1)
// (case-005), an empty global tensor, Replicate and 0-dim DTensors, every dtype, and with
// 4 ranks HSDP, 2-D, [Shard(0), Shard(0)], FSDP2+TP _StridedShard (case-011's 8x6 and an
// uneven one) and a non-contiguous _StridedShard; nested dicts with int keys, lists,
// tuples, scalars, strings, bytes, None, plain and 0-dim tensors around them.
TEST_P(DistributedGolden, GatherMatchesPyTorch) { CheckGather("gathered", false); }

// cpu_offload with ranks_only (0,): rank 0 gets PyTorch's result, the others {}.
TEST_P(DistributedGolden, GatherRank0OffloadMatchesPyTorch) {
  CheckGather("gathered_rank0_offload", true);
}

// Each case: rank 0's flat full state dict broadcast into every rank's local one (meta
// DTensors, DTensors with data written in place, plain tensors, 0-dim tensors, scalars,
// None; keys only in full and only in local), strict and not.
TEST_P(DistributedGolden, BroadcastMatchesPyTorch) {
  SCOPED_TRACE(Where());
  const json& cases = (*mine_)["broadcast"];
  ASSERT_GE(cases.size(), 4u);
  for (const json& c : cases) {
    const std::string name = c["name"];
    const bool strict = c["strict"];
    SCOPED_TRACE(absl::StrCat("broadcast case \"", name, "\" strict=", strict));
    absl::StatusOr<Map> full = DecodeMap(c["full"]);
    absl::StatusOr<Map> local = DecodeMap(c["local_before"]);
    absl::StatusOr<Map> expected = DecodeMap(c["local_after"]);
    EXPECT_TRUE(full.ok()) << full.status();
    EXPECT_TRUE(local.ok()) << local.status();
    EXPECT_TRUE(expected.ok()) << expected.status();
    if (!AllRanksOk(full.ok() && local.ok() && expected.ok())) continue;
    std::vector<std::string> noted;
    const Overrides overrides = NotesToOverrides(c["notes"], &noted);

    BroadcastOptions options;
    options.comm = g_world;
    options.device = Device::CPU();
    options.strict = strict;
    options.bucket_bytes = GetParam();
    options.root = 0;
    absl::StatusOr<BroadcastResult> result = BroadcastStateDict(*full, *local, options);
    if (!result.ok()) {
      ADD_FAILURE() << name << ": " << result.status();
      continue;
    }
    const std::string report = DiffReport(Value(*expected), Value(*local), overrides);
    EXPECT_TRUE(report.empty()) << name << ": local after the broadcast differs from PyTorch's"
                                << (noted.empty() ? "" : " (noted keys: ")
                                << absl::StrJoin(noted, ", ") << (noted.empty() ? "" : ")")
                                << ":\n  " << report;
    // PyTorch returns no key lists; these are the key sets of the inputs (a strict
    // broadcast removed exactly the missing ones, which local_after shows).
    EXPECT_THAT(result->missing_keys, ::testing::ElementsAreArray(Strings(c["missing_keys"])))
        << name;
    EXPECT_THAT(result->unexpected_keys, ::testing::ElementsAreArray(Strings(c["unexpected_keys"])))
        << name;
    absl::StatusOr<Value> full_again = DecodeGoldenValue(c["full"]);
    ASSERT_TRUE(full_again.ok()) << full_again.status();
    const std::string full_report = DiffReport(*full_again, Value(*full));
    EXPECT_TRUE(full_report.empty())
        << name << ": BroadcastStateDict changed `full`:\n  " << full_report;
  }
}

INSTANTIATE_TEST_SUITE_P(Buckets, DistributedGolden,
                         ::testing::Values(int64_t{64}, kDefaultBucketBytes),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return info.param == kDefaultBucketBytes
                                      ? std::string("DefaultBucket")
                                      : absl::StrCat("Bucket", info.param, "Bytes");
                         });

}  // namespace
}  // namespace sdrt

int main(int argc, char** argv) { return sdrt::test::RunMpiTests(argc, argv, &sdrt::g_world); }
