// The transfer engine between GPUs (label gpu): N ranks in one process, one thread and one
// GPU each (tests/support/nccl_ranks.h), whenever two or more GPUs are visible; skipped with
// a message otherwise. Unlike the one-rank tests (reshard_gpu_test), chunks cross the wire
// here: fsdp -> tp and back with small buckets (many exchanges; units of several chunks at
// 16-byte offsets in the device buckets, uint8 rows of 13 bytes ahead of float32 ones;
// packing and unpacking on the communicator's stream), a bfloat16 -> float32 cast, a
// replicated destination, and a Partial source, which every rank refuses alike with
// Unimplemented before anything moves (no rank waits for a deadline). Every result is
// compared byte for byte with DistributeTensor of the full tensor on the CPU.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/support/nccl_ranks.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

struct Weight {
  std::string path;
  DType trainer_dtype;
  DType engine_dtype;
  IntVector shape;
  const char* trainer;
  const char* engine;
};

const std::vector<Weight>& Weights() {
  static const auto* weights = new std::vector<Weight>{
      {"layers.0.attn.qkv", DType::kBFloat16, DType::kBFloat16, {37, 24}, "[S(0)]", "[S(1)]"},
      {"layers.0.odd_bytes", DType::kUInt8, DType::kUInt8, {6, 13}, "[S(0)]", "[S(1)]"},
      {"layers.0.mlp.down", DType::kFloat32, DType::kFloat32, {8, 3}, "[S(1)]", "[S(0)]"},
      {"layers.0.norm", DType::kFloat32, DType::kFloat32, {10}, "[S(0)]", "[R]"},
      {"lm_head", DType::kBFloat16, DType::kFloat32, {16, 9}, "[S(0)]", "[S(1)]"},
  };
  return *weights;
}

std::shared_ptr<const DeviceMesh> MeshOf(int ranks) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create({ranks}));
}

Tensor FullOf(const Weight& w, DType dtype, int step) {
  const Tensor bits = test::HashBytes(w.shape, w.trainer_dtype, 7 * step + w.path.size());
  if (dtype == w.trainer_dtype) return bits;
  // The engine's expectation of a cast: converted on the host as Tensor.to() rounds.
  Tensor cast = *Tensor::Empty(w.shape, dtype);
  EXPECT_TRUE(internal::ConvertFloats(bits.data_ptr(), w.trainer_dtype, cast.data_ptr(), dtype,
                                      bits.numel()));
  return cast;
}

std::string Bytes(const Tensor& t) {
  const Tensor packed = *(*t.To(Device::CPU())).Contiguous();
  return std::string(static_cast<const char*>(packed.data_ptr()),
                     static_cast<size_t>(packed.nbytes()));
}

// Rank `rank`'s side of every weight on GPU `rank`: `trainer` placements with values of
// `step`, or meta locals (fresh CUDA locals) of the engine's placements and dtype.
Map Side(int ranks, int rank, bool trainer, int step) {
  const Device gpu = Device::CUDA(rank);
  Map m;
  for (const Weight& w : Weights()) {
    const std::vector<Placement> p = *ParsePlacements(trainer ? w.trainer : w.engine);
    if (trainer) {
      const Tensor full = *FullOf(w, w.trainer_dtype, step).To(gpu);
      m.Set(w.path, Value(*DistributeTensor(full, MeshOf(ranks), p, rank)));
    } else {
      const Tensor meta = *Tensor::Meta(w.shape, w.engine_dtype);
      m.Set(w.path, Value(*DTensor::Make(meta, MeshOf(ranks), p, w.shape)));
    }
  }
  return m;
}

void ExpectEngineHolds(const Map& engine, int ranks, int rank, int step) {
  for (const Weight& w : Weights()) {
    SCOPED_TRACE(absl::StrCat(w.path, " rank ", rank, " step ", step));
    const Value* v = engine.Find(w.path);
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(v->kind(), ValueKind::kDTensor);
    const DTensor want = *DistributeTensor(FullOf(w, w.engine_dtype, step), MeshOf(ranks),
                                           *ParsePlacements(w.engine), rank);
    EXPECT_EQ(v->as_dtensor().local().device(), Device::CUDA(rank));
    EXPECT_EQ(Bytes(v->as_dtensor().local()), Bytes(want.local()));
  }
}

TEST(ReshardMultiGpu, FsdpToTpAcrossGpusWithSmallBuckets) {
  SDRT_RANKS_OR_SKIP(ranks);
  test::RunNcclRanks(ranks, [&](int rank, NcclCommunicator& comm) {
    for (const int64_t bucket : {int64_t{64}, int64_t{1000}, int64_t{1} << 20}) {
      ReshardOptions options;
      options.comm = &comm;
      options.bucket_bytes = bucket;
      Map engine = Side(ranks, rank, /*trainer=*/false, 0);
      TransferStats stats;
      const absl::Status status =
          ReshardStateDict(Side(ranks, rank, /*trainer=*/true, 1), engine, options, &stats);
      ASSERT_TRUE(status.ok()) << "rank " << rank << " bucket " << bucket << ": " << status;
      ExpectEngineHolds(engine, ranks, rank, 1);
      EXPECT_GT(stats.exchanges, 0);
    }
  });
}

TEST(ReshardMultiGpu, BindingCarriesEveryStep) {
  SDRT_RANKS_OR_SKIP(ranks);
  test::RunNcclRanks(ranks, [&](int rank, NcclCommunicator& comm) {
    ReshardOptions options;
    options.comm = &comm;
    options.bucket_bytes = 256;
    Map trainer = Side(ranks, rank, true, 0);
    Map engine = Side(ranks, rank, false, 0);
    absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, engine, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<BoundReshard> sync = BindReshard(*plan, trainer, engine);
    ASSERT_TRUE(sync.ok()) << sync.status();
    for (int step = 1; step <= 3; ++step) {
      const Map next = Side(ranks, rank, true, step);
      for (size_t k = 0; k < next.size(); ++k) {
        Tensor local = trainer.Find(next.key(k))->as_dtensor().local();
        ASSERT_TRUE(local.CopyFrom(next.value(k).as_dtensor().local()).ok());
      }
      const absl::Status synced = sync->Execute();
      ASSERT_TRUE(synced.ok()) << "rank " << rank << " step " << step << ": " << synced;
      ExpectEngineHolds(engine, ranks, rank, step);
    }
  });
}

TEST(ReshardMultiGpu, PartialSourceIsRefusedOnEveryRankAtOnce) {
  SDRT_RANKS_OR_SKIP(ranks);
  test::RunNcclRanks(ranks, [&](int rank, NcclCommunicator& comm) {
    const Device gpu = Device::CUDA(rank);
    const IntVector shape = {4 * ranks, 6};
    Map source;
    source.Set("grad", Value(*DTensor::Make(*test::HashBytes(shape, DType::kFloat32, 3).To(gpu),
                                            MeshOf(ranks), *ParsePlacements("[P(sum)]"), shape)));
    Map destination;
    destination.Set("grad", Value(*DTensor::Make(*Tensor::Meta(shape, DType::kFloat32),
                                                 MeshOf(ranks), *ParsePlacements("[S(0)]"),
                                                 shape)));
    ReshardOptions options;
    options.comm = &comm;
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = ReshardStateDict(source, destination, options);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << "rank " << rank << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr("'grad'"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20))
        << "refused at once, not after a deadline";
  });
}

}  // namespace
}  // namespace sdrt
