// A custom trainer's three exports, as a program linking the installed sdrt does them:
//
//   1. it holds its weights as an FSDP state dict (DTensors, Shard(0) over every rank) and
//      trains (here: each step adds 0.5 to every element of its own shards, in place);
//   2. after every step it pushes the weights to an inference engine colocated on the same
//      ranks, laid out tensor-parallel by the "tp" plan (column-parallel q/k/v/gate/up,
//      row-parallel o/down, replicated norms), peer to peer through one reshard plan built
//      once and bound once to both sides' buffers (the trainer updates its shards in place,
//      the engine keeps its weights), then executed every step;
//   3. at the end it exports a consolidated safetensors file (gathered to rank 0 with
//      cpu_offload, so no other rank holds more than a bucket of full data) and a sharded
//      folder for an engine of E ranks, written by rank 0 from that file.
//
// Every rank checks what it received; rank 0 reads both exports back and checks every
// element. Run: mpiexec -n N trainer OUT_DIR [--steps S] [--engine-ranks E]
// (OUT_DIR must not exist or be empty; it gets model.safetensors and sharded/).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"

namespace {

struct Weight {
  const char* name;
  sdrt::IntVector shape;
};

// One Llama-shaped decoder layer (the tp plan matches these names), float32.
const Weight kWeights[] = {
    {"model.embed_tokens.weight", {1000, 64}},
    {"model.layers.0.self_attn.q_proj.weight", {64, 64}},
    {"model.layers.0.self_attn.k_proj.weight", {16, 64}},
    {"model.layers.0.self_attn.v_proj.weight", {16, 64}},
    {"model.layers.0.self_attn.o_proj.weight", {64, 64}},
    {"model.layers.0.mlp.gate_proj.weight", {172, 64}},
    {"model.layers.0.mlp.up_proj.weight", {172, 64}},
    {"model.layers.0.mlp.down_proj.weight", {64, 172}},
    {"model.layers.0.input_layernorm.weight", {64}},
    {"model.norm.weight", {64}},
    {"lm_head.weight", {1000, 64}},
};

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "trainer: %s: %s\n", what, status.ToString().c_str());
  sdrt::MpiCommunicator::AbortJob(1);
}

template <typename T>
T Must(absl::StatusOr<T> value, const char* what) {
  if (!value.ok()) Fail(what, value.status());
  return *std::move(value);
}

// The full weight after `step` steps: element i is (i % 101) / 4 + 0.5 * step.
sdrt::Tensor FullWeight(const Weight& w, int step) {
  sdrt::Tensor t = Must(sdrt::Tensor::Empty(w.shape, sdrt::DType::kFloat32), "Empty");
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i % 101) / 4 + 0.5f * step;
  return t;
}

bool SameBytes(const sdrt::Tensor& a, const sdrt::Tensor& b) {
  return a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

// The sum over ranks of `count` (every rank calls it).
int64_t SumOverRanks(sdrt::Communicator& comm, int64_t count) {
  sdrt::Tensor t = Must(sdrt::Tensor::Empty({1}, sdrt::DType::kInt64), "Empty");
  *t.data<int64_t>() = count;
  if (absl::Status s = comm.AllReduce(t, sdrt::ReduceOp::kSum); !s.ok()) Fail("AllReduce", s);
  return *t.data<int64_t>();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: trainer OUT_DIR [--steps S] [--engine-ranks E]\n");
    return 2;
  }
  const std::string out_dir = argv[1];
  int steps = 3;
  int engine_ranks = 2;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--engine-ranks") == 0) engine_ranks = std::atoi(argv[i + 1]);
  }
  if (steps < 1 || engine_ranks < 1 || engine_ranks > 64) {
    std::fprintf(stderr, "trainer: --steps must be >= 1 and --engine-ranks in 1..64\n");
    return 2;
  }
  std::unique_ptr<sdrt::MpiCommunicator> world = Must(sdrt::MpiCommunicator::World(), "MPI");
  const int rank = world->rank();
  const int n = world->size();
  const auto mesh =
      std::make_shared<const sdrt::DeviceMesh>(Must(sdrt::DeviceMesh::Create({n}), "DeviceMesh"));
  const sdrt::ShardingPlan tp = Must(sdrt::ShardingPlan::Builtin("tp"), "plan");

  // 1. The FSDP state dict (what fully_shard leaves in model.state_dict()), and the
  // engine's tensor-parallel layout on the same ranks: meta DTensors, whose locals sdrt
  // allocates on the first push and writes in place on the later ones.
  sdrt::Map trainer;
  std::vector<sdrt::SafetensorsTensorSpec> weights;
  for (const Weight& w : kWeights) {
    trainer.Set(w.name, sdrt::Value(Must(sdrt::DistributeTensor(FullWeight(w, 0), mesh,
                                                                {sdrt::Placement::Shard(0)}, rank),
                                         "DistributeTensor")));
    weights.push_back({w.name, sdrt::DType::kFloat32, w.shape});
  }
  sdrt::Map engine = Must(tp.MetaStateDict(weights, mesh, rank), "MetaStateDict");

  // 2. Train and push. The plan depends only on the layouts: built once; and since both
  // sides keep their buffers, bound to them once (the engine's weights are allocated here).
  sdrt::ReshardOptions reshard;
  reshard.comm = world.get();
  const sdrt::ReshardPlan plan = Must(sdrt::PlanReshard(trainer, engine, reshard), "PlanReshard");
  sdrt::BoundReshard sync = Must(sdrt::BindReshard(plan, trainer, engine), "BindReshard");
  for (int step = 1; step <= steps; ++step) {
    for (size_t i = 0; i < trainer.size(); ++i) {  // the optimizer step, on the own shards
      sdrt::Tensor local = trainer.value(i).as_dtensor().local();  // shares the storage
      float* p = local.data<float>();
      for (int64_t k = 0; k < local.numel(); ++k) p[k] += 0.5f;
    }
    sdrt::TransferStats stats;
    if (absl::Status s = sync.Execute(&stats); !s.ok()) Fail("BoundReshard::Execute", s);
    int64_t wrong = 0;
    for (const Weight& w : kWeights) {
      const sdrt::DTensor& got = engine.Find(w.name)->as_dtensor();
      const sdrt::DTensor want = Must(
          sdrt::DistributeTensor(FullWeight(w, step), mesh, got.placements(), rank), "expected");
      if (!SameBytes(got.local(), want.local())) ++wrong;
    }
    wrong = SumOverRanks(*world, wrong);
    if (rank == 0) {
      std::printf(
          "step %d: pushed %zu weights fsdp -> tp on %d rank%s, %lld bytes on the wire "
          "(optimum %lld); engine %s\n",
          step, plan.paths().size(), n, n == 1 ? "" : "s",
          static_cast<long long>(plan.stats().wire_bytes),
          static_cast<long long>(plan.stats().optimum_bytes),
          wrong == 0 ? "matches the trainer" : "DIFFERS");
    }
    if (wrong != 0) return 1;
  }

  // 3. Export: gather to rank 0 with cpu_offload; rank 0 writes and checks both files.
  sdrt::GatherOptions gather;
  gather.comm = world.get();
  gather.cpu_offload = true;
  gather.ranks_only = {0};
  const sdrt::Map full = Must(sdrt::GatherStateDict(trainer, gather), "GatherStateDict");
  int64_t wrong = 0;
  if (rank == 0) {
    std::vector<std::pair<std::string, sdrt::Tensor>> tensors;
    for (size_t i = 0; i < full.size(); ++i)
      tensors.emplace_back(full.key(i), full.value(i).as_tensor());
    const std::string file = out_dir + "/model.safetensors";
    if (absl::Status s = sdrt::WriteSafetensors(file, tensors); !s.ok()) Fail("write", s);
    const sdrt::CheckpointSource source = Must(sdrt::CheckpointSource::Open(file), "open");
    const auto engine_mesh = std::make_shared<const sdrt::DeviceMesh>(
        Must(sdrt::DeviceMesh::Create({engine_ranks}), "DeviceMesh"));
    const sdrt::ShardedCheckpointIndex index =
        Must(sdrt::WriteShardedCheckpoint(source, engine_mesh, tp, out_dir + "/sharded"),
             "WriteShardedCheckpoint");
    for (const Weight& w : kWeights) {
      if (!SameBytes(Must(source.Get(w.name), "Get"), FullWeight(w, steps))) ++wrong;
    }
    for (int64_t r = 0; r < engine_ranks; ++r) {  // each engine rank's file, piece by piece
      const sdrt::RankShards shards = Must(sdrt::LoadRankShards(out_dir + "/sharded", r), "load");
      for (const Weight& w : kWeights) {
        const sdrt::DTensor want = Must(
            sdrt::DistributeTensor(FullWeight(w, steps), engine_mesh,
                                   Must(tp.PlacementsFor(w.name, w.shape, *engine_mesh), "tp"), r),
            "expected");
        const sdrt::Tensor* got = nullptr;
        for (const auto& [name, piece] : shards.tensors) {
          if (name == w.name) got = &piece.local();
        }
        if (got == nullptr || !SameBytes(*got, want.local())) ++wrong;
      }
    }
    std::printf(
        "exported %s (%zu tensors, gathered to rank 0) and %s/sharded (%zu rank files, "
        "tp over %d ranks): %s\n",
        file.c_str(), tensors.size(), out_dir.c_str(), index.files.size(), engine_ranks,
        wrong == 0 ? "every element checked" : "WRONG");
  }
  return SumOverRanks(*world, wrong) == 0 ? 0 : 1;
}
