// sdrt's ReshardStateDict (core/distributed/reshard_state_dict.h) against PyTorch's
// DTensor.redistribute within one mesh, on 4 gloo ranks (tests/data/reshard/golden_np4.json,
// written by tests/golden/make_reshard_golden.py). CTest runs this binary under
// `mpiexec -n 4`; each rank decodes its own source DTensor of every case from the file, asks
// sdrt for the case's destination placements over the MPI world communicator and compares
// its destination local, byte for byte, with the local PyTorch's redistribute gave that rank.
// Cases: Shard <-> Shard / Replicate with uneven and empty pieces, 2x2 meshes, a 3-d tensor,
// Partial(sum / max / min / product / avg) sources (all-reduce and reduce-scatter; avg on
// one and on two Partial mesh dims), _StridedShard sources and destinations; bfloat16,
// float16, float32, float64, int32, int64.
//
// A case PyTorch does and sdrt refuses, as documented (PlanReshard): a Partial destination
// (InvalidArgument); it expects the error, on every rank. Cases PyTorch itself refuses are
// listed under "refused" in the file and not run here. Rank 0 prints GoogleTest's usual
// output; other ranks print only their failures.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tests/support/golden_codec.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt {
namespace {

using nlohmann::json;
using testing_golden::DecodeGoldenValue;
using testing_golden::ReadGoldenJson;

MpiCommunicator* g_world = nullptr;

constexpr int kWorld = 4;

// The cases sdrt refuses, with the error code every rank must get.
const std::map<std::string, absl::StatusCode>& RefusedBySdrt() {
  static const auto* refused = new std::map<std::string, absl::StatusCode>{
      {"s0_to_partial_sum", absl::StatusCode::kInvalidArgument},  // Partial destination
  };
  return *refused;
}

// One case as this rank sees it.
struct Case {
  std::string name;
  DTensor source;  // this rank's source, as PyTorch built it
  DTensor result;  // this rank's local after PyTorch's redistribute
};

struct Golden {
  std::vector<Case> cases;
  std::vector<std::string> refused_by_torch;
  std::string torch_version;
};

absl::StatusOr<DTensor> DecodeDTensorField(const json& j, const std::string& field) {
  if (!j.contains(field)) return absl::InvalidArgumentError(absl::StrCat("no \"", field, "\""));
  absl::StatusOr<Value> v = DecodeGoldenValue(j[field]);
  if (!v.ok()) return v.status();
  if (v->kind() != ValueKind::kDTensor) {
    return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" is not a dtensor"));
  }
  return v->as_dtensor();
}

absl::StatusOr<Golden> LoadGolden(int rank) {
  absl::StatusOr<json> j = ReadGoldenJson("reshard/golden_np4.json");
  if (!j.ok()) return j.status();
  Golden g;
  g.torch_version = (*j)["torch_version"].get<std::string>();
  for (const json& r : (*j)["refused"]) g.refused_by_torch.push_back(r["name"].get<std::string>());
  for (const json& c : (*j)["cases"]) {
    Case one;
    one.name = c["name"].get<std::string>();
    const json& mine = c["ranks"].at(rank);
    absl::StatusOr<DTensor> src = DecodeDTensorField(mine, "source");
    absl::StatusOr<DTensor> dst = DecodeDTensorField(mine, "result");
    if (!src.ok() || !dst.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(one.name, ": ", (src.ok() ? dst.status() : src.status()).ToString()));
    }
    one.source = *std::move(src);
    one.result = *std::move(dst);
    g.cases.push_back(std::move(one));
  }
  return g;
}

// The destination this rank offers: PyTorch's result's metadata around a meta local, or
// around an allocated local of zeros (written in place).
DTensor Destination(const DTensor& result, bool allocated) {
  absl::StatusOr<Tensor> local = allocated ? Tensor::Zeros(result.local().shape(), result.dtype())
                                           : Tensor::Meta(result.local().shape(), result.dtype());
  return *DTensor::Make(*std::move(local), result.mesh(), result.placements(),
                        result.global_shape(), result.global_stride());
}

// Empty when `got` holds PyTorch's local bit for bit, else what differs.
std::string Mismatch(const DTensor& want, const Value* got_value) {
  if (got_value == nullptr) return "missing from the destination";
  if (got_value->kind() != ValueKind::kDTensor) return "not a DTensor";
  const DTensor& got = got_value->as_dtensor();
  if (got.placements() != want.placements()) {
    return absl::StrCat("placements ", PlacementsToString(got.placements()), ", want ",
                        PlacementsToString(want.placements()));
  }
  if (got.global_shape() != want.global_shape()) return "global shape differs";
  const Tensor& a = want.local();
  absl::StatusOr<Tensor> b = got.local().Contiguous();
  if (!b.ok()) return b.status().ToString();
  if (b->dtype() != a.dtype()) return absl::StrCat("dtype ", DTypeName(b->dtype()));
  if (b->shape() != a.shape()) {
    return absl::StrCat("local shape ", ShapeToString(b->shape()), ", want ",
                        ShapeToString(a.shape()));
  }
  const int64_t elem = ElementBits(a.dtype()) / 8;
  const auto* pa = static_cast<const unsigned char*>(a.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(b->data_ptr());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * elem, pb + i * elem, elem) != 0) {
      std::string want_hex, got_hex;
      for (int64_t k = 0; k < elem; ++k) {
        absl::StrAppend(&want_hex, absl::Hex(pa[i * elem + k], absl::kZeroPad2));
        absl::StrAppend(&got_hex, absl::Hex(pb[i * elem + k], absl::kZeroPad2));
      }
      return absl::StrCat("local element ", i, " (row-major): PyTorch's bytes ", want_hex,
                          ", sdrt's ", got_hex);
    }
  }
  return "";
}

class ReshardGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(g_world->size(), kWorld) << "the golden file is for 4 ranks";
    absl::StatusOr<Golden> g = LoadGolden(static_cast<int>(g_world->rank()));
    ASSERT_TRUE(g.ok()) << g.status();
    golden_ = *std::move(g);
  }

  ReshardOptions Options(int64_t bucket_bytes = int64_t{256} << 20) const {
    ReshardOptions options;
    options.comm = g_world;
    options.bucket_bytes = bucket_bytes;
    return options;
  }

  Golden golden_;
};

TEST_F(ReshardGolden, TheFileHoldsTheCases) {
  EXPECT_GE(golden_.cases.size(), 20u) << "torch " << golden_.torch_version;
  // The Partial(avg) cases, checked like the others.
  for (const char* name :
       {"partial_avg_to_r", "partial_avg_bf16_to_s1", "partial_avg_f16_to_s0_uneven",
        "mesh2d_pavg_s0_to_s1r", "mesh2d_pavg_pavg_to_rs0"}) {
    bool found = false;
    for (const Case& c : golden_.cases) found = found || c.name == name;
    EXPECT_TRUE(found) << name << " is not among the golden cases";
  }
  for (const auto& [name, code] : RefusedBySdrt()) {
    bool found = false;
    for (const Case& c : golden_.cases) found = found || c.name == name;
    EXPECT_TRUE(found) << name << " is not among the golden cases";
  }
  // PyTorch refuses Replicate -> Partial (only Shard -> Partial(sum) is supported).
  EXPECT_EQ(golden_.refused_by_torch, std::vector<std::string>{"r_to_partial_sum"});
}

// Every case in its own ReshardStateDict call, into a meta destination.
TEST_F(ReshardGolden, EachCaseGivesPyTorchsLocal) {
  int checked = 0;
  for (const Case& c : golden_.cases) {
    SCOPED_TRACE(absl::StrCat(c.name, " ", PlacementsToString(c.source.placements()), " -> ",
                              PlacementsToString(c.result.placements()), " on rank ",
                              g_world->rank()));
    Map source;
    source.Set(c.name, Value(c.source));
    Map destination;
    destination.Set(c.name, Value(Destination(c.result, /*allocated=*/false)));
    const absl::Status status = ReshardStateDict(source, destination, Options());
    auto refused = RefusedBySdrt().find(c.name);
    if (refused != RefusedBySdrt().end()) {
      EXPECT_EQ(status.code(), refused->second) << status;
      EXPECT_NE(std::string(status.message()).find(c.name), std::string::npos) << status;
      continue;
    }
    if (!status.ok()) {  // an agreed error: every rank goes on to the next case alike
      ADD_FAILURE() << status;
      continue;
    }
    EXPECT_EQ(Mismatch(c.result, destination.Find(c.name)), "");
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(golden_.cases.size() - RefusedBySdrt().size()));
}

// Every case sdrt does, in one state dict, through one plan executed twice, with 64-byte
// buckets (many rounds) and allocated destination locals written in place.
TEST_F(ReshardGolden, AllCasesInOneStateDictThroughOnePlan) {
  Map source, destination;
  std::vector<const Case*> run;
  for (const Case& c : golden_.cases) {
    if (RefusedBySdrt().count(c.name) != 0) continue;
    source.Set(c.name, Value(c.source));
    destination.Set(c.name, Value(Destination(c.result, /*allocated=*/true)));
    run.push_back(&c);
  }
  absl::StatusOr<ReshardPlan> plan = PlanReshard(source, destination, Options(64));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->paths().size(), run.size());
  EXPECT_EQ(plan->stats().wire_bytes, plan->stats().optimum_bytes);
  EXPECT_GT(plan->stats().exchanges, 1);
  for (int pass = 0; pass < 2; ++pass) {
    TransferStats stats;
    ASSERT_TRUE(ExecuteReshard(*plan, source, destination, &stats).ok());
    EXPECT_LE(stats.buffer_bytes, 3 * 64);
    for (const Case* c : run) {
      EXPECT_EQ(Mismatch(c->result, destination.Find(c->name)), "")
          << c->name << " on rank " << g_world->rank() << ", pass " << pass;
    }
  }
}

}  // namespace
}  // namespace sdrt

int main(int argc, char** argv) { return sdrt::test::RunMpiTests(argc, argv, &sdrt::g_world); }
