// Weight sync, as an RL loop does it: a trainer holds its weights as FSDP shards (DTensors,
// Shard(0)) on ranks 0..T-1, an inference engine holds the same weights as TP shards on
// ranks T..N-1, and after every training step the new weights go from the trainer's
// layout to the engine's, peer to peer, through a plan built once (PlanReshard) and
// executed every step (ExecuteReshard). Run: mpiexec -n 8 weight_sync [--steps 3]
// (4 trainer ranks, 4 engine ranks; any even N works, and N = 1 puts both on one rank).
//
// Each step the trainer adds the step number to every weight (a stand-in for an optimizer
// step); each engine rank checks its pieces against the values it expects and rank 0
// prints one line per step.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"

namespace {

struct Weight {
  const char* name;
  sdrt::IntVector shape;
  const char* engine;  // the engine's placement (TP): column or row parallel
};

const Weight kWeights[] = {
    {"embed_tokens.weight", {1000, 64}, "[S(0)]"},
    {"layers.0.self_attn.qkv_proj.weight", {192, 64}, "[S(0)]"},
    {"layers.0.self_attn.o_proj.weight", {64, 64}, "[S(1)]"},
    {"layers.0.mlp.gate_up_proj.weight", {512, 64}, "[S(0)]"},
    {"layers.0.mlp.down_proj.weight", {64, 256}, "[S(1)]"},
    {"layers.0.input_layernorm.weight", {64}, "[R]"},
    {"lm_head.weight", {1000, 64}, "[S(0)]"},
};

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "weight_sync: %s: %s\n", what, status.ToString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

// The full weight at `step`: element i is (i % 97) / 8 + step, in float32.
sdrt::Tensor FullWeight(const Weight& w, int step) {
  sdrt::Tensor t = *sdrt::Tensor::Empty(w.shape, sdrt::DType::kFloat32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i % 97) / 8 + step;
  return t;
}

std::shared_ptr<const sdrt::DeviceMesh> MeshOver(int64_t from, int64_t to) {
  std::vector<int64_t> ranks;
  for (int64_t r = from; r < to; ++r) ranks.push_back(r);
  return std::make_shared<const sdrt::DeviceMesh>(
      *sdrt::DeviceMesh::Create({static_cast<int64_t>(ranks.size())}, ranks));
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  absl::StatusOr<std::unique_ptr<sdrt::MpiCommunicator>> world = sdrt::MpiCommunicator::World();
  if (!world.ok()) return Fail("MPI", world.status());
  const int rank = (*world)->rank();
  const int n = (*world)->size();
  const int trainers = n > 1 ? n / 2 : 1;
  const auto trainer_mesh = MeshOver(0, trainers);
  const auto engine_mesh = n > 1 ? MeshOver(trainers, n) : MeshOver(0, 1);
  const bool is_trainer = rank < trainers;
  const bool is_engine = engine_mesh->Coordinate(rank).has_value();

  // The engine's layout: meta DTensors (sdrt allocates the locals on the first step and
  // writes into them in place on the later ones).
  sdrt::Map engine;
  if (is_engine) {
    for (const Weight& w : kWeights) {
      const std::vector<sdrt::Placement> p = *sdrt::ParsePlacements(w.engine);
      const sdrt::IntVector local = *sdrt::ComputeLocalShape(w.shape, *engine_mesh, p, rank);
      engine.Set(w.name,
                 sdrt::Value(*sdrt::DTensor::Make(*sdrt::Tensor::Meta(local, sdrt::DType::kFloat32),
                                                  engine_mesh, p, w.shape)));
    }
  }
  const auto trainer_at = [&](int step) {
    sdrt::Map m;
    if (!is_trainer) return m;
    for (const Weight& w : kWeights) {
      m.Set(w.name, sdrt::Value(*sdrt::DistributeTensor(FullWeight(w, step), trainer_mesh,
                                                        {sdrt::Placement::Shard(0)}, rank)));
    }
    return m;
  };

  sdrt::ReshardOptions options;
  options.comm = world->get();
  absl::StatusOr<sdrt::ReshardPlan> plan = sdrt::PlanReshard(trainer_at(0), engine, options);
  if (!plan.ok()) return Fail("PlanReshard", plan.status());
  if (rank == 0) {
    const auto plural = [](int64_t k) { return k == 1 ? "" : "s"; };
    std::printf(
        "plan: %zu weights from %d trainer rank%s (fsdp) to %lld engine rank%s (tp); "
        "%lld bytes on the wire per step (the optimum: %lld), %lld exchange%s\n",
        plan->paths().size(), trainers, plural(trainers),
        static_cast<long long>(engine_mesh->num_ranks()), plural(engine_mesh->num_ranks()),
        static_cast<long long>(plan->stats().wire_bytes),
        static_cast<long long>(plan->stats().optimum_bytes),
        static_cast<long long>(plan->stats().exchanges), plural(plan->stats().exchanges));
  }
  for (int step = 1; step <= steps; ++step) {
    const sdrt::Map trainer = trainer_at(step);  // the trainer's weights after this step
    const double start = MPI_Wtime();
    sdrt::TransferStats stats;
    if (absl::Status s = sdrt::ExecuteReshard(*plan, trainer, engine, &stats); !s.ok()) {
      return Fail("ExecuteReshard", s);
    }
    const double seconds = MPI_Wtime() - start;
    int64_t wrong = 0;
    if (is_engine) {
      for (const Weight& w : kWeights) {
        const sdrt::DTensor& got = engine.Find(w.name)->as_dtensor();
        const sdrt::DTensor want =
            *sdrt::DistributeTensor(FullWeight(w, step), engine_mesh, got.placements(), rank);
        if (want.local().nbytes() > 0 &&
            std::memcmp(got.local().data_ptr(), want.local().data_ptr(), want.local().nbytes()) !=
                0) {
          ++wrong;
        }
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("step %d: %.3f ms, rank 0 sent %lld bytes; engine weights %s\n", step,
                  seconds * 1e3, static_cast<long long>(stats.sent_bytes),
                  wrong == 0 ? "match the trainer's" : "DIFFER");
    }
    if (wrong != 0) return 1;
  }
  return 0;
}
