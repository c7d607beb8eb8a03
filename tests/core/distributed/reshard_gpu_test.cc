// GPU tests of the transfer engine (core/distributed/reshard_state_dict.h) on CUDA locals
// through a one-rank NcclCommunicator (label gpu; each test skips without a CUDA device).
// One rank sends nothing on the wire, but every other part of a device reshard runs: the
// agreement and the closing all-reduce over NCCL, the self chunks copied local to local on
// the communicator's stream (CopyToSelf; a small bucket_bytes cuts them into many chunks)
// or, for casts, through the device buckets, fresh CUDA locals for meta
// DTensor destinations, in-place writes into allocated CUDA locals with other strides and
// into ShardedTensor shards, a plain leaf replaced by the full tensor; and a binding
// (BindReshard) that carries in-place updates of the source step after step; and casts
// (destinations of another float dtype), converted on the device between the locals and the
// buckets. Every result is compared byte for byte with DistributeTensor / Narrow of the full
// tensor on the CPU (converted there by ConvertFloats for a cast).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/support/nccl_single_rank.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

const Device kGpu = Device::CUDA(0);

struct Weight {
  std::string path;
  DType dtype;
  IntVector shape;
  const char* source_placements;
  const char* destination_placements;
};

// Sources Shard(0), strided Shard(0) and Replicate on a mesh of one; destinations Shard(1),
// Replicate and Shard(0) (each local is the whole tensor, laid out afresh or in place).
const std::vector<Weight>& Weights() {
  static const auto* weights = new std::vector<Weight>{
      {"layers.0.attn.q", DType::kBFloat16, {24, 10}, "[S(0)]", "[S(1)]"},
      {"layers.0.mlp.up", DType::kFloat32, {37, 9}, "[_S(0, 2)]", "[R]"},
      {"layers.0.norm", DType::kFloat16, {10}, "[R]", "[S(0)]"},
      {"layers.0.big_rows", DType::kBFloat16, {1024, 48}, "[S(0)]", "[S(0)]"},
  };
  return *weights;
}

std::shared_ptr<const DeviceMesh> MeshOfOne() {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create({1}));
}

Tensor FullOf(const std::string& path, DType dtype, IntSpan shape, int step) {
  return test::HashBytes(shape, dtype, 100 * step + std::hash<std::string>()(path) % 97);
}

std::string Bytes(const Tensor& t) {
  const Tensor packed = *(*t.To(Device::CPU())).Contiguous();
  return std::string(static_cast<const char*>(packed.data_ptr()),
                     static_cast<size_t>(packed.nbytes()));
}

// The trainer's side: CUDA DTensors, a plain CUDA tensor held whole, and a ShardedTensor
// of two CUDA shards (rows [0, 5) and [5, 12)).
Map Source(int step) {
  Map m;
  for (const Weight& w : Weights()) {
    const Tensor full = *FullOf(w.path, w.dtype, w.shape, step).To(kGpu);
    m.Set(w.path,
          Value(*DistributeTensor(full, MeshOfOne(), *ParsePlacements(w.source_placements), 0)));
  }
  m.Set("lm_head_scale", Value(*FullOf("lm_head_scale", DType::kFloat32, {3}, step).To(kGpu)));
  const Tensor emb = *FullOf("embed", DType::kFloat32, {12, 6}, step).To(kGpu);
  const std::vector<ShardMetadata> md = {{{0, 0}, {5, 6}, {0, kGpu}}, {{5, 0}, {7, 6}, {0, kGpu}}};
  m.Set("embed", Value(*ShardedTensor::Make({12, 6}, DType::kFloat32, md,
                                           {{*(*emb.Narrow(0, 0, 5)).Clone(), md[0]},
                                            {*(*emb.Narrow(0, 5, 7)).Clone(), md[1]}})));
  return m;
}

// The engine's side: meta DTensors (fresh locals), one allocated CUDA local written in
// place through a strided view, a plain tensor to be replaced, and a ShardedTensor cut
// differently (rows [0, 8) and [8, 12)), allocated on the GPU.
Map Destination() {
  Map m;
  for (const Weight& w : Weights()) {
    const std::vector<Placement> p = *ParsePlacements(w.destination_placements);
    if (w.path == "layers.0.big_rows") {
      // Rows of a wider buffer: the engine's local with other strides than the source's.
      Tensor local = *(*Tensor::Zeros({w.shape[0], w.shape[1] + 16}, w.dtype, kGpu))
                          .Narrow(1, 0, w.shape[1]);
      m.Set(w.path, Value(*DTensor::Make(local, MeshOfOne(), p, w.shape)));
      continue;
    }
    m.Set(w.path, Value(*DTensor::Make(*Tensor::Meta(w.shape, w.dtype), MeshOfOne(), p, w.shape)));
  }
  m.Set("lm_head_scale", Value(*Tensor::Zeros({1}, DType::kFloat32, kGpu)));
  const std::vector<ShardMetadata> md = {{{0, 0}, {8, 6}, {0, kGpu}}, {{8, 0}, {4, 6}, {0, kGpu}}};
  m.Set("embed", Value(*ShardedTensor::Make(
                     {12, 6}, DType::kFloat32, md,
                     {{*Tensor::Zeros({8, 6}, DType::kFloat32, kGpu), md[0]},
                      {*Tensor::Zeros({4, 6}, DType::kFloat32, kGpu), md[1]}})));
  return m;
}

void ExpectDestinationHolds(const Map& engine, int step) {
  for (const Weight& w : Weights()) {
    SCOPED_TRACE(absl::StrCat(w.path, " step ", step));
    const Value* v = engine.Find(w.path);
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(v->kind(), ValueKind::kDTensor);
    const DTensor want = *DistributeTensor(FullOf(w.path, w.dtype, w.shape, step), MeshOfOne(),
                                           *ParsePlacements(w.destination_placements), 0);
    EXPECT_EQ(v->as_dtensor().local().device(), kGpu);
    EXPECT_EQ(v->as_dtensor().local().shape(), want.local().shape());
    EXPECT_EQ(Bytes(v->as_dtensor().local()), Bytes(want.local()));
  }
  const Value* scale = engine.Find("lm_head_scale");
  ASSERT_NE(scale, nullptr);
  ASSERT_EQ(scale->kind(), ValueKind::kTensor);
  EXPECT_EQ(scale->as_tensor().device(), kGpu);
  EXPECT_EQ(Bytes(scale->as_tensor()), Bytes(FullOf("lm_head_scale", DType::kFloat32, {3}, step)));
  const Value* embed = engine.Find("embed");
  ASSERT_NE(embed, nullptr);
  ASSERT_EQ(embed->kind(), ValueKind::kShardedTensor);
  const Tensor full = FullOf("embed", DType::kFloat32, {12, 6}, step);
  const std::vector<LocalShard>& shards = embed->as_sharded().local_shards();
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(Bytes(shards[0].tensor), Bytes(*full.Narrow(0, 0, 8)));
  EXPECT_EQ(Bytes(shards[1].tensor), Bytes(*full.Narrow(0, 8, 4)));
}

// Options over `comm` with 4 KiB buckets: the 96 KiB big_rows and the rest in many.
ReshardOptions SmallBuckets(Communicator* comm) {
  ReshardOptions options;
  options.comm = comm;
  options.bucket_bytes = 4096;
  return options;
}

TEST(ReshardGpuTest, OneRankThroughDeviceBuckets) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  const ReshardOptions options = SmallBuckets(comm.get());
  const Map source = Source(1);
  Map destination = Destination();
  TransferStats stats;
  const absl::Status status = ReshardStateDict(source, destination, options, &stats);
  ASSERT_TRUE(status.ok()) << status;
  ExpectDestinationHolds(destination, 1);

  // The same plan again, for new values.
  absl::StatusOr<ReshardPlan> plan = PlanReshard(source, Destination(), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Map again = Destination();
  ASSERT_TRUE(ExecuteReshard(*plan, Source(2), again).ok());
  ExpectDestinationHolds(again, 2);
}

// A binding carries the source's in-place updates into the destination every step, after
// the state dicts bound are gone.
TEST(ReshardGpuTest, OneRankBindingFollowsInPlaceUpdates) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  const ReshardOptions options = SmallBuckets(comm.get());
  Map source = Source(0);
  Map destination = Destination();
  absl::StatusOr<ReshardPlan> plan = PlanReshard(source, destination, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<BoundReshard> sync = BindReshard(*plan, source, destination);
  ASSERT_TRUE(sync.ok()) << sync.status();
  for (int step = 1; step <= 3; ++step) {
    // The trainer's update: new values written into the bound source locals.
    const Map next = Source(step);
    for (size_t k = 0; k < next.size(); ++k) {
      const Value& value = next.value(k);
      const Value* held = source.Find(next.key(k));
      ASSERT_NE(held, nullptr);
      if (value.kind() == ValueKind::kDTensor) {
        Tensor local = held->as_dtensor().local();
        ASSERT_TRUE(local.CopyFrom(value.as_dtensor().local()).ok());
      } else if (value.kind() == ValueKind::kTensor) {
        Tensor whole = held->as_tensor();
        ASSERT_TRUE(whole.CopyFrom(value.as_tensor()).ok());
      } else {
        for (size_t i = 0; i < value.as_sharded().local_shards().size(); ++i) {
          Tensor shard = held->as_sharded().local_shards()[i].tensor;
          ASSERT_TRUE(shard.CopyFrom(value.as_sharded().local_shards()[i].tensor).ok());
        }
      }
    }
    TransferStats stats;
    const absl::Status status = sync->Execute(&stats);
    ASSERT_TRUE(status.ok()) << status;
    ExpectDestinationHolds(destination, step);
  }
}

// A cast on the device (issue 30): CUDA weights into engine leaves of another float dtype,
// the wire (the device buckets) carrying the narrower one; the side of the wider dtype
// converts with the device kernel while it packs (float32 sources) or unpacks (bfloat16
// sources). A dense box converts straight between its local and the bucket; a box of a
// strided local (rows of a wider buffer, on either side) goes through a device temporary.
struct CastWeight {
  std::string path;
  DType trainer_dtype, engine_dtype;
  IntVector shape;
  const char* source_placements;
  const char* destination_placements;
  bool strided_source = false;       // the trainer's local: rows of a wider buffer
  bool strided_destination = false;  // the engine's local: rows of a wider buffer
};

const std::vector<CastWeight>& CastWeights() {
  static const auto* weights = new std::vector<CastWeight>{
      {"q", DType::kFloat32, DType::kBFloat16, {24, 10}, "[S(0)]", "[S(1)]"},
      {"up", DType::kBFloat16, DType::kFloat32, {37, 9}, "[_S(0, 2)]", "[R]"},
      {"norm", DType::kFloat32, DType::kFloat16, {10}, "[R]", "[S(0)]"},
      {"fp8", DType::kFloat32, DType::kFloat8E4M3FN, {16, 8}, "[R]", "[S(0)]"},
      {"e5m2", DType::kBFloat16, DType::kFloat8E5M2, {40, 6}, "[S(0)]", "[S(0)]", true},
      {"scale", DType::kBFloat16, DType::kFloat8E8M0FNU, {12, 4}, "[S(0)]", "[R]"},
      {"big_out", DType::kFloat32, DType::kBFloat16, {512, 48}, "[S(0)]", "[S(0)]", false, true},
      {"big_in", DType::kBFloat16, DType::kFloat32, {512, 48}, "[S(0)]", "[S(0)]", false, true},
  };
  return *weights;
}

// Exact values in `dtype` (no NaN, so bytes compare), new ones each step.
Tensor CastFull(const CastWeight& w, int step) {
  return test::ValuePattern(w.shape, w.trainer_dtype,
                            17 * step + static_cast<int64_t>(w.path.size()));
}

// `full` converted on the host into `dtype`.
Tensor Converted(const Tensor& full, DType dtype) {
  Tensor out = *Tensor::Empty(full.shape(), dtype);
  EXPECT_TRUE(
      internal::ConvertFloats(full.data_ptr(), full.dtype(), out.data_ptr(), dtype, full.numel()));
  return out;
}

// A zeroed CUDA local of `shape` (2-D) that is the first columns of a wider buffer.
Tensor StridedLocal(IntSpan shape, DType dtype) {
  return *(*Tensor::Zeros({shape[0], shape[1] + 8}, dtype, kGpu)).Narrow(1, 0, shape[1]);
}

Map CastSource(int step) {
  Map m;
  for (const CastWeight& w : CastWeights()) {
    const DTensor d = *DistributeTensor(*CastFull(w, step).To(kGpu), MeshOfOne(),
                                        *ParsePlacements(w.source_placements), 0);
    if (!w.strided_source) {
      m.Set(w.path, Value(d));
      continue;
    }
    Tensor local = StridedLocal(d.local().shape(), w.trainer_dtype);
    EXPECT_TRUE(local.CopyFrom(d.local()).ok());
    m.Set(w.path, Value(*DTensor::Make(local, MeshOfOne(), d.placements(), w.shape)));
  }
  return m;
}

Map CastDestination() {
  Map m;
  for (const CastWeight& w : CastWeights()) {
    const std::vector<Placement> p = *ParsePlacements(w.destination_placements);
    const Tensor local = w.strided_destination ? StridedLocal(w.shape, w.engine_dtype)
                                               : *Tensor::Meta(w.shape, w.engine_dtype);
    m.Set(w.path, Value(*DTensor::Make(local, MeshOfOne(), p, w.shape)));
  }
  // A ShardedTensor cast too: float32 rows into bfloat16 shards cut elsewhere.
  const std::vector<ShardMetadata> md = {{{0, 0}, {8, 6}, {0, kGpu}}, {{8, 0}, {4, 6}, {0, kGpu}}};
  m.Set("embed",
        Value(*ShardedTensor::Make({12, 6}, DType::kBFloat16, md,
                                   {{*Tensor::Zeros({8, 6}, DType::kBFloat16, kGpu), md[0]},
                                    {*Tensor::Zeros({4, 6}, DType::kBFloat16, kGpu), md[1]}})));
  return m;
}

Map CastSourceWithEmbed(int step) {
  Map m = CastSource(step);
  const Tensor emb = *test::ValuePattern({12, 6}, DType::kFloat32, step).To(kGpu);
  const std::vector<ShardMetadata> md = {{{0, 0}, {5, 6}, {0, kGpu}}, {{5, 0}, {7, 6}, {0, kGpu}}};
  m.Set("embed", Value(*ShardedTensor::Make({12, 6}, DType::kFloat32, md,
                                           {{*(*emb.Narrow(0, 0, 5)).Clone(), md[0]},
                                            {*(*emb.Narrow(0, 5, 7)).Clone(), md[1]}})));
  return m;
}

void ExpectDestinationCast(const Map& engine, int step) {
  for (const CastWeight& w : CastWeights()) {
    SCOPED_TRACE(absl::StrCat(w.path, " step ", step));
    const Value* v = engine.Find(w.path);
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(v->kind(), ValueKind::kDTensor);
    const DTensor want =
        *DistributeTensor(Converted(CastFull(w, step), w.engine_dtype), MeshOfOne(),
                          *ParsePlacements(w.destination_placements), 0);
    const Tensor& got = v->as_dtensor().local();
    EXPECT_EQ(got.device(), kGpu);
    EXPECT_EQ(got.dtype(), w.engine_dtype);
    EXPECT_EQ(got.shape(), want.local().shape());
    EXPECT_EQ(Bytes(got), Bytes(want.local()));
  }
  const Value* embed = engine.Find("embed");
  ASSERT_NE(embed, nullptr);
  ASSERT_EQ(embed->kind(), ValueKind::kShardedTensor);
  const Tensor full =
      Converted(test::ValuePattern({12, 6}, DType::kFloat32, step), DType::kBFloat16);
  const std::vector<LocalShard>& shards = embed->as_sharded().local_shards();
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(Bytes(shards[0].tensor), Bytes(*full.Narrow(0, 0, 8)));
  EXPECT_EQ(Bytes(shards[1].tensor), Bytes(*full.Narrow(0, 8, 4)));
}

TEST(ReshardGpuTest, OneRankCastsOnTheDevice) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  const ReshardOptions options = SmallBuckets(comm.get());
  Map destination = CastDestination();
  const absl::Status status = ReshardStateDict(CastSourceWithEmbed(1), destination, options);
  ASSERT_TRUE(status.ok()) << status;
  ExpectDestinationCast(destination, 1);

  // Bound: the source's in-place updates cast into the same engine buffers step after step.
  Map source = CastSourceWithEmbed(0);
  Map engine = CastDestination();
  absl::StatusOr<ReshardPlan> plan = PlanReshard(source, engine, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<BoundReshard> sync = BindReshard(*plan, source, engine);
  ASSERT_TRUE(sync.ok()) << sync.status();
  for (int step = 2; step <= 3; ++step) {
    const Map next = CastSourceWithEmbed(step);
    for (size_t k = 0; k < next.size(); ++k) {
      const Value& value = next.value(k);
      const Value* held = source.Find(next.key(k));
      ASSERT_NE(held, nullptr);
      if (value.kind() == ValueKind::kDTensor) {
        Tensor local = held->as_dtensor().local();
        ASSERT_TRUE(local.CopyFrom(value.as_dtensor().local()).ok());
      } else {
        for (size_t i = 0; i < value.as_sharded().local_shards().size(); ++i) {
          Tensor shard = held->as_sharded().local_shards()[i].tensor;
          ASSERT_TRUE(shard.CopyFrom(value.as_sharded().local_shards()[i].tensor).ok());
        }
      }
    }
    const absl::Status executed = sync->Execute();
    ASSERT_TRUE(executed.ok()) << executed;
    ExpectDestinationCast(engine, step);
  }
}

}  // namespace
}  // namespace sdrt
