// Multi-rank tests of PlanReshard / ExecuteReshard / ReshardStateDict / BindReshard
// (core/distributed/reshard_state_dict.h) over MPI: a trainer holding fsdp DTensors on the
// first half of the world pushes its weights to an engine holding meta tp DTensors on the
// other half (on one rank, both), every step with new values, through a plan built once;
// a plain tensor the trainer ranks hold whole reaches the engine as a full tensor; every
// engine piece is bit-exact against DistributeTensor of the step's full tensor; ranks that
// disagree get the same error. A binding (BindReshard) carries the trainer's in-place
// updates to the engine step after step, after the trees bound are gone. CTest runs it under
// `mpiexec -n N`, N = 1..4 and 8.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

using ::testing::HasSubstr;

MpiCommunicator* g_world = nullptr;

struct Weight {
  std::string path;
  DType dtype;
  IntVector shape;
  std::string trainer_placements;
  std::string engine_placements;
};

const std::vector<Weight>& Weights() {
  static const auto* weights = new std::vector<Weight>{
      {"layers.0.attn.q", DType::kBFloat16, {24, 10}, "[S(0)]", "[S(0)]"},
      {"layers.0.attn.o", DType::kBFloat16, {10, 24}, "[S(0)]", "[S(1)]"},
      {"layers.0.mlp.up", DType::kFloat32, {37, 9}, "[S(0)]", "[S(0)]"},
      {"layers.0.norm", DType::kFloat32, {10}, "[S(0)]", "[R]"},
      {"embed", DType::kFloat16, {50, 6}, "[_S(0, 2)]", "[S(0)]"},
      // A Partial(sum) source (a gradient-like value): reduced on the receiving ranks.
      {"layers.0.partial_bias", DType::kFloat32, {11}, "[P(sum)]", "[S(0)]"},
      // Partial(avg): every trainer rank holds the value (DistributeTensor), the mean of
      // which is the value again; divided once the last contribution is in.
      {"layers.0.avg_grad", DType::kBFloat16, {13}, "[P(avg)]", "[S(0)]"},
      // Large enough that each trainer rank's rows (at least 64 KiB up to 4 trainer ranks)
      // go on the wire from the trainer's local and land in the engine's without a bucket.
      {"layers.0.big_replicated", DType::kFloat32, {2048, 64}, "[S(0)]", "[R]"},
      {"layers.0.big_rows", DType::kBFloat16, {4096, 48}, "[S(0)]", "[S(0)]"},
  };
  return *weights;
}

std::shared_ptr<const DeviceMesh> MeshOver(int64_t from, int64_t to) {
  std::vector<int64_t> ranks;
  for (int64_t r = from; r < to; ++r) ranks.push_back(r);
  return std::make_shared<const DeviceMesh>(
      *DeviceMesh::Create({static_cast<int64_t>(ranks.size())}, ranks));
}

Tensor FullOf(const Weight& w, int step) {
  // Small integers for avg: the sum of up to 4 copies stays exact in bfloat16.
  if (w.trainer_placements == "[P(avg)]") return Arange(w.shape, w.dtype, 5 * step - 30);
  return HashBytes(w.shape, w.dtype, 100 * step + std::hash<std::string>()(w.path) % 97);
}

// The trainer's ranks [0, half), the engine's [half, n); both are rank 0 alone at n = 1.
struct Sides {
  std::shared_ptr<const DeviceMesh> trainer, engine;
  bool in_trainer = false, in_engine = false;
};

Sides WorldSides() {
  const int64_t n = g_world->size();
  const int64_t half = std::max<int64_t>(1, n / 2);
  Sides s;
  s.trainer = MeshOver(0, half);
  s.engine = n > 1 ? MeshOver(half, n) : MeshOver(0, 1);
  s.in_trainer = s.trainer->Coordinate(g_world->rank()).has_value();
  s.in_engine = s.engine->Coordinate(g_world->rank()).has_value();
  return s;
}

Map Trainer(const Sides& s, int step) {
  Map m;
  if (!s.in_trainer) return m;
  for (const Weight& w : Weights()) {
    m.Set(w.path,
          Value(*DistributeTensor(FullOf(w, step), s.trainer,
                                  *ParsePlacements(w.trainer_placements), g_world->rank())));
  }
  m.Set("lm_head_scale", Value(HashBytes({3}, DType::kFloat32, 7 + step)));
  return m;
}

Map EngineMeta(const Sides& s) {
  Map m;
  if (!s.in_engine) return m;
  for (const Weight& w : Weights()) {
    const std::vector<Placement> p = *ParsePlacements(w.engine_placements);
    const IntVector local = *ComputeLocalShape(w.shape, *s.engine, p, g_world->rank());
    m.Set(w.path, Value(*DTensor::Make(*Tensor::Meta(local, w.dtype), s.engine, p, w.shape)));
  }
  m.Set("lm_head_scale", Value(*Tensor::Zeros({1}, DType::kFloat32)));  // replaced
  return m;
}

void ExpectEngineHolds(const Sides& s, const Map& engine, int step) {
  if (!s.in_engine) return;
  for (const Weight& w : Weights()) {
    const Value* v = engine.Find(w.path);
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(v->kind(), ValueKind::kDTensor);
    const Tensor want = DistributeTensor(FullOf(w, step), s.engine,
                                         *ParsePlacements(w.engine_placements), g_world->rank())
                            ->local();
    const Tensor& got = v->as_dtensor().local();
    ASSERT_EQ(got.shape(), want.shape()) << w.path;
    EXPECT_TRUE(want.nbytes() == 0 ||
                std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()) == 0)
        << w.path << " at step " << step << " on rank " << g_world->rank();
  }
  const Value* scale = engine.Find("lm_head_scale");
  ASSERT_NE(scale, nullptr);
  const Tensor want = HashBytes({3}, DType::kFloat32, 7 + step);
  ASSERT_EQ(scale->as_tensor().shape(), want.shape());
  EXPECT_EQ(std::memcmp(scale->as_tensor().data_ptr(), want.data_ptr(), want.nbytes()), 0);
}

// ReshardOptions::progress's calls in one execution: `done` never falls, never passes
// `total`, and the last call reports everything this rank sent and received.
struct ProgressSeen {
  int64_t calls = 0, done = 0, total = -1;
  bool fell = false;
  std::function<void(int64_t, int64_t)> Hook() {
    return [this](int64_t d, int64_t t) {
      fell = fell || d < done || d > t || (total >= 0 && t != total);
      done = d;
      total = t;
      ++calls;
    };
  }
  void Expect(const TransferStats& stats) {
    EXPECT_EQ(calls, stats.exchanges);
    EXPECT_FALSE(fell);
    if (calls > 0) {
      EXPECT_EQ(done, stats.sent_bytes + stats.received_bytes);
      EXPECT_EQ(total, done);
    }
    *this = ProgressSeen();
  }
};

TEST(ReshardStateDictMpi, TrainerToEngineEveryStepThroughOnePlan) {
  const Sides s = WorldSides();
  ReshardOptions options;
  options.comm = g_world;
  options.bucket_bytes = 256;  // many exchanges, when bytes cross the wire
  ProgressSeen seen;
  options.progress = seen.Hook();
  Map engine = EngineMeta(s);
  absl::StatusOr<ReshardPlan> plan = PlanReshard(Trainer(s, 0), engine, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->paths().size(), Weights().size() + 1);
  EXPECT_EQ(plan->stats().wire_bytes, plan->stats().optimum_bytes);
  // One rank copies to itself only, with no exchange at all.
  if (g_world->size() > 1) {
    EXPECT_GT(plan->stats().exchanges, 1);
  } else {
    EXPECT_EQ(plan->stats().exchanges, 0);
  }
  for (int step = 0; step < 3; ++step) {
    TransferStats stats;
    ASSERT_TRUE(ExecuteReshard(*plan, Trainer(s, step), engine, &stats).ok());
    ExpectEngineHolds(s, engine, step);
    // The agreement, the exchanges, and the closing when there were any.
    EXPECT_EQ(stats.collectives, 1 + stats.exchanges + (stats.exchanges > 0 ? 1 : 0));
    EXPECT_LE(stats.buffer_bytes, 3 * 256);
    seen.Expect(stats);  // the plan kept the hook: every execution reports
  }
}

TEST(ReshardStateDictMpi, ReshardStateDictInOneCall) {
  const Sides s = WorldSides();
  ReshardOptions options;
  options.comm = g_world;
  Map engine = EngineMeta(s);
  TransferStats stats;
  ASSERT_TRUE(ReshardStateDict(Trainer(s, 5), engine, options, &stats).ok());
  ExpectEngineHolds(s, engine, 5);
}

TEST(ReshardStateDictMpi, DisagreementsAreTheSameErrorOnEveryRank) {
  const Sides s = WorldSides();
  ReshardOptions options;
  options.comm = g_world;
  // The engine wants a leaf nobody holds.
  Map engine = EngineMeta(s);
  if (s.in_engine) engine.Set("missing", Value(*Tensor::Zeros({2}, DType::kFloat32)));
  const absl::Status none = PlanReshard(Trainer(s, 0), engine, options).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.message()), HasSubstr("no rank holds a source of 'missing'"));
  // A plan executed with a source of another shape: every rank fails alike.
  Map good = EngineMeta(s);
  absl::StatusOr<ReshardPlan> plan = PlanReshard(Trainer(s, 0), good, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Map trainer = Trainer(s, 0);
  if (g_world->rank() == 0) trainer.Set("layers.0.norm", Value(*Tensor::Zeros({3}, DType::kInt8)));
  const absl::Status bad = ExecuteReshard(*plan, trainer, good);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_THAT(std::string(bad.message()), HasSubstr("layers.0.norm"));
}

// Writes step `step`'s values into the trainer's locals in place (an optimizer step).
void UpdateInPlace(const Sides& s, const Map& trainer, int step) {
  const Map next = Trainer(s, step);
  for (size_t i = 0; i < next.size(); ++i) {
    const std::string& path = next.key(i);
    const Value& value = next.value(i);
    const Value* held = trainer.Find(path);
    ASSERT_NE(held, nullptr) << path;
    const Tensor& to =
        held->kind() == ValueKind::kDTensor ? held->as_dtensor().local() : held->as_tensor();
    const Tensor& from =
        value.kind() == ValueKind::kDTensor ? value.as_dtensor().local() : value.as_tensor();
    ASSERT_TRUE(Tensor(to).CopyFrom(from).ok()) << path;
  }
}

TEST(ReshardStateDictMpi, BoundReshardSyncsInPlaceUpdatesEveryStep) {
  const Sides s = WorldSides();
  ReshardOptions options;
  options.comm = g_world;
  options.bucket_bytes = 256;  // many exchanges, when bytes cross the wire
  ProgressSeen seen;
  options.progress = seen.Hook();
  Map trainer = Trainer(s, 0);
  Map engine = EngineMeta(s);
  absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, engine, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<BoundReshard> sync = BindReshard(*plan, trainer, engine);
  ASSERT_TRUE(sync.ok()) << sync.status();
  // Binding gave the engine's meta DTensors and its plain leaf their new locals.
  if (s.in_engine) {
    EXPECT_FALSE(engine.Find("layers.0.attn.q")->as_dtensor().local().is_meta());
    EXPECT_EQ(engine.Find("lm_head_scale")->as_tensor().shape(), IntVector{3});
  }
  // The binding holds the locals, not the trees: these copies share the locals' memory,
  // and the trees bound go away.
  const Map trainer_view = trainer;
  const Map engine_view = engine;
  trainer = Map();
  engine = Map();
  BoundReshard moved = *std::move(sync);
  for (int step = 0; step < 3; ++step) {
    if (step > 0) UpdateInPlace(s, trainer_view, step);
    TransferStats stats;
    ASSERT_TRUE(moved.Execute(&stats).ok());
    ExpectEngineHolds(s, engine_view, step);
    // No agreement per step: the plan's exchanges, as many on every rank, and the closing.
    EXPECT_EQ(stats.collectives, stats.exchanges + (stats.exchanges > 0 ? 1 : 0));
    EXPECT_EQ(stats.exchanges, plan->stats().exchanges);
    EXPECT_EQ(stats.wire_bytes, plan->stats().wire_bytes);
    EXPECT_LE(stats.buffer_bytes, 3 * 256);
    seen.Expect(stats);
  }
  // A moved-from binding refuses, on its own.
  EXPECT_EQ(sync->Execute().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ReshardStateDictMpi, BindingThatDoesNotFitIsTheSameErrorOnEveryRank) {
  const Sides s = WorldSides();
  ReshardOptions options;
  options.comm = g_world;
  Map engine = EngineMeta(s);
  absl::StatusOr<ReshardPlan> plan = PlanReshard(Trainer(s, 0), engine, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Map trainer = Trainer(s, 0);
  if (g_world->rank() == 0) trainer.Set("layers.0.norm", Value(*Tensor::Zeros({3}, DType::kInt8)));
  const absl::Status bad = BindReshard(*plan, trainer, engine).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_THAT(std::string(bad.message()), HasSubstr("layers.0.norm"));
  // Nothing was put into the engine's tree.
  if (s.in_engine) {
    EXPECT_TRUE(engine.Find("layers.0.attn.q")->as_dtensor().local().is_meta());
  }
  EXPECT_EQ(BindReshard(ReshardPlan(), trainer, engine).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // An empty plan (a member made before planning) reads as one of nothing.
  const ReshardPlan empty;
  EXPECT_TRUE(empty.paths().empty());
  EXPECT_TRUE(empty.casts().empty());
  EXPECT_EQ(empty.stats().wire_bytes, 0);
  EXPECT_EQ(ExecuteReshard(empty, trainer, engine).code(), absl::StatusCode::kFailedPrecondition);
}

// A cast in the sync (issue 30): the trainer's float32 (or bfloat16) weights into an engine
// of another float dtype, through a bound plan, step after step; each engine piece is the
// step's full tensor converted (tensor/internal/float_cast.h, checked against PyTorch) and
// cut. The wire carries the narrower dtype; a 512 KiB float32 source goes through the
// casting path, never straight from its local.
struct CastWeight {
  std::string path;
  DType trainer_dtype, engine_dtype;
  IntVector shape;
  std::string trainer_placements, engine_placements;
};

const std::vector<CastWeight>& CastWeights() {
  static const auto* weights = new std::vector<CastWeight>{
      {"q", DType::kFloat32, DType::kBFloat16, {24, 10}, "[S(0)]", "[S(1)]"},
      {"norm", DType::kFloat32, DType::kFloat16, {10}, "[S(0)]", "[R]"},
      {"up", DType::kBFloat16, DType::kFloat32, {37, 9}, "[S(0)]", "[S(0)]"},
      {"fp8", DType::kFloat32, DType::kFloat8E4M3FN, {16, 8}, "[R]", "[S(0)]"},
      {"big", DType::kFloat32, DType::kBFloat16, {2048, 64}, "[S(0)]", "[S(0)]"},
  };
  return *weights;
}

Tensor CastFull(const CastWeight& w, int step, DType dtype) {
  const Tensor full = HashBytes(w.shape, w.trainer_dtype, 31 * step + w.path.size());
  Tensor out = *Tensor::Empty(w.shape, dtype);
  EXPECT_TRUE(internal::ConvertFloats(full.data_ptr(), full.dtype(), out.data_ptr(), dtype,
                                      full.numel()));
  return out;
}

TEST(ReshardStateDictMpi, BoundSyncCastsIntoTheEnginesDtypes) {
  const Sides s = WorldSides();
  const auto trainer_at = [&](int step) {
    Map m;
    if (!s.in_trainer) return m;
    for (const CastWeight& w : CastWeights()) {
      m.Set(w.path, Value(*DistributeTensor(CastFull(w, step, w.trainer_dtype), s.trainer,
                                            *ParsePlacements(w.trainer_placements),
                                            g_world->rank())));
    }
    return m;
  };
  Map engine;
  if (s.in_engine) {
    for (const CastWeight& w : CastWeights()) {
      const std::vector<Placement> p = *ParsePlacements(w.engine_placements);
      const IntVector local = *ComputeLocalShape(w.shape, *s.engine, p, g_world->rank());
      engine.Set(w.path, Value(*DTensor::Make(*Tensor::Meta(local, w.engine_dtype), s.engine, p,
                                              w.shape)));
    }
  }
  ReshardOptions options;
  options.comm = g_world;
  options.bucket_bytes = 4096;
  Map trainer = trainer_at(0);
  absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, engine, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<BoundReshard> sync = BindReshard(*plan, trainer, engine);
  ASSERT_TRUE(sync.ok()) << sync.status();
  for (int step = 0; step < 2; ++step) {
    if (step > 0) {
      const Map next = trainer_at(step);
      for (size_t i = 0; i < next.size(); ++i) {
        Tensor to = trainer.Find(next.key(i))->as_dtensor().local();
        ASSERT_TRUE(to.CopyFrom(next.value(i).as_dtensor().local()).ok());
      }
    }
    ASSERT_TRUE(sync->Execute().ok());
    if (!s.in_engine) continue;
    for (const CastWeight& w : CastWeights()) {
      const DTensor& got = engine.Find(w.path)->as_dtensor();
      ASSERT_EQ(got.dtype(), w.engine_dtype) << w.path;
      const Tensor want =
          DistributeTensor(CastFull(w, step, w.engine_dtype), s.engine,
                           *ParsePlacements(w.engine_placements), g_world->rank())
              ->local();
      ASSERT_EQ(got.local().shape(), want.shape()) << w.path;
      EXPECT_EQ(std::memcmp(got.local().data_ptr(), want.data_ptr(), want.nbytes()), 0)
          << w.path << " at step " << step << " on rank " << g_world->rank();
    }
  }
  // A one-shot call casts alike; an engine leaf of an integer dtype is refused on every
  // rank, naming it.
  Map once;
  if (s.in_engine) {
    for (const CastWeight& w : CastWeights()) {
      once.Set(w.path, *engine.Find(w.path));
    }
    const CastWeight& w = CastWeights()[0];
    const std::vector<Placement> p = *ParsePlacements(w.engine_placements);
    const IntVector local = *ComputeLocalShape(w.shape, *s.engine, p, g_world->rank());
    once.Set(w.path,
             Value(*DTensor::Make(*Tensor::Meta(local, DType::kInt32), s.engine, p, w.shape)));
  }
  const absl::Status refused = ReshardStateDict(trainer_at(3), once, options);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("but the destination int32"));
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
