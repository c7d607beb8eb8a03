// A Megatron-style trainer's weight sync and export, as a program linking the installed sdrt
// does them (README.md):
//
//   1. it holds its weights under Megatron-core's names and layouts (linear_qkv interleaved
//      by query group, linear_fc1 [gate; up]) as an FSDP state dict: bfloat16 DTensors,
//      Shard(0) over every rank; a training step changes its own shards in place;
//   2. after every step it syncs them into a vLLM-style engine on the first E ranks, in the
//      engine's own layout (fused qkv_proj with kv heads replicated when E outnumbers them,
//      gate_up_proj, vocabularies padded to a multiple of 64, tensor parallel): twice, into
//      bfloat16 buffers and into FP8 ones (e4m3 with a float32 scale per 128 x 128 block,
//      quantized by the senders), each through a plan built and bound once with a weight map
//      (layouts.cc); no q, k, v, gate or up tensor is made anywhere;
//   3. at the end it exports a Hugging Face checkpoint: the same engine with the built-in
//      "megatron-llama" map, into full tensors on rank 0, which writes model.safetensors and
//      a sharded folder for an engine of E ranks.
//
// Every engine rank checks every element it received; rank 0 reads both exports back and
// checks every element. Run: mpiexec -n N trainer OUT_DIR [--steps S] [--engine-ranks E]
// (E in 1, 2, 4 and at most N; OUT_DIR a folder with no `sharded` in it yet).
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layouts.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"

namespace {

using trainer_example::Origin;

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "trainer: %s: %s\n", what, status.ToString().c_str());
  sdrt::MpiCommunicator::AbortJob(1);
}

template <typename T>
T Must(absl::StatusOr<T> value, const char* what) {
  if (!value.ok()) Fail(what, value.status());
  return *std::move(value);
}

float FromBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t ToBf16(float f) {  // the example's values are exact in bfloat16
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

float FromE4m3(uint8_t b) {  // float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits
  const int exponent = (b >> 3) & 15, mantissa = b & 7;
  const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                        : std::ldexp(1 + mantissa / 8.0f, exponent - 7);
  return (b & 0x80) ? -magnitude : magnitude;
}

float ValueOf(const Origin& o, int step) {
  return o.hf.empty() ? 0.0f : trainer_example::HfValue(o.hf, o.row, o.col, step);
}

// The sum over ranks of `count` (every rank calls it).
int64_t SumOverRanks(sdrt::Communicator& comm, int64_t count) {
  sdrt::Tensor t = Must(sdrt::Tensor::Empty({1}, sdrt::DType::kInt64), "Empty");
  *t.data<int64_t>() = count;
  if (absl::Status s = comm.AllReduce(t, sdrt::ReduceOp::kSum); !s.ok()) Fail("AllReduce", s);
  return *t.data<int64_t>();
}

bool IsLinearWeight(const std::string& name) {
  return name.size() > 12 && name.compare(name.size() - 12, 12, "_proj.weight") == 0;
}

// The FP8 engine: every linear weight in float8_e4m3fn, beside it "<name>_scale_inv", a
// float32 scale per 128 x 128 block, cut as the weight is (rows of blocks for qkv_proj).
sdrt::Map Fp8Engine(const sdrt::Map& bf16, int64_t rank) {
  sdrt::Map out;
  for (size_t i = 0; i < bf16.size(); ++i) {
    const sdrt::DTensor& w = bf16.value(i).as_dtensor();
    if (!IsLinearWeight(bf16.key(i))) {
      out.Set(bf16.key(i), bf16.value(i));
      continue;
    }
    for (bool scale : {false, true}) {
      const sdrt::IntVector& shape = w.global_shape();
      const sdrt::IntVector global =
          scale ? sdrt::IntVector{(shape[0] + 127) / 128, (shape[1] + 127) / 128} : shape;
      const sdrt::LocalShardInfo info = Must(
          sdrt::ComputeLocalShapeAndGlobalOffset(global, *w.mesh(), w.placements(), rank), "local");
      const sdrt::Tensor meta = Must(
          sdrt::Tensor::Meta(info.local_shape,
                             scale ? sdrt::DType::kFloat32 : sdrt::DType::kFloat8E4M3FN),
          "Meta");
      out.Set(bf16.key(i) + (scale ? "_scale_inv" : ""),
              sdrt::Value(Must(sdrt::DTensor::Make(meta, w.mesh(), w.placements(), global), "Make")));
    }
  }
  return out;
}

// The elements of this rank's engine locals that are not what they must be after `step`
// steps: exactly, or (FP8) dequantized within the e4m3 rounding of half a unit in the last
// place, 2^-4 of the value.
int64_t WrongInEngine(const sdrt::Map& engine, int64_t rank, int64_t ranks, int step) {
  int64_t wrong = 0;
  for (size_t i = 0; i < engine.size(); ++i) {
    const std::string& name = engine.key(i);
    const sdrt::Tensor& local = engine.value(i).as_dtensor().local();
    if (name.size() > 10 && name.compare(name.size() - 10, 10, "_scale_inv") == 0) continue;
    const sdrt::Tensor* scales = nullptr;
    if (local.dtype() == sdrt::DType::kFloat8E4M3FN) {
      scales = &engine.Find(name + "_scale_inv")->as_dtensor().local();
    }
    const int64_t rows = local.dim() == 2 ? local.shape()[0] : 1;
    const int64_t cols = local.shape()[local.dim() - 1];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float want = ValueOf(trainer_example::VllmOrigin(name, rank, ranks, r, c), step);
        if (scales == nullptr) {
          wrong += FromBf16(local.data<uint16_t>()[r * cols + c]) != want;
          continue;
        }
        const float scale = scales->data<float>()[(r / 128) * scales->shape()[1] + c / 128];
        const float got = FromE4m3(local.data<uint8_t>()[r * cols + c]) * scale;
        wrong += !(std::fabs(got - want) <= std::fabs(want) / 16);
      }
    }
  }
  return wrong;
}

}  // namespace

// `value` as a whole number into *out; false when it is not one.
bool WholeNumber(const char* value, int* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || v < INT_MIN || v > INT_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

int main(int argc, char** argv) {
  const char* usage =
      "usage: trainer OUT_DIR [--steps S (1..99, default 3)] [--engine-ranks E (1, 2 or 4, at "
      "most the ranks; default 2)]\n";
  if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(usage, stdout);
    return 0;
  }
  // OUT_DIR first, then flags with their values, each known; checked before MPI starts.
  bool bad = argc < 2 || argv[1][0] == '-' || (argc - 2) % 2 != 0;
  int steps = 3;
  int engine_ranks = 2;
  for (int i = 2; !bad && i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) {
      bad = !WholeNumber(argv[i + 1], &steps);
    } else if (std::strcmp(argv[i], "--engine-ranks") == 0) {
      bad = !WholeNumber(argv[i + 1], &engine_ranks);
    } else {
      bad = true;
    }
  }
  if (bad) {
    std::fputs(usage, stderr);
    return 2;
  }
  const std::string out_dir = argv[1];
  // The exports are written at the end: an OUT_DIR that cannot take them is refused now,
  // not after the work.
  const std::string sharded = out_dir + "/sharded";
  struct stat st;
  if (stat(out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "trainer: %s is not a folder (make it first)\n", out_dir.c_str());
    return 2;
  }
  if (lstat(sharded.c_str(), &st) == 0) {
    std::fprintf(stderr, "trainer: %s is already there (remove it or name another OUT_DIR)\n",
                 sharded.c_str());
    return 2;
  }
  std::unique_ptr<sdrt::MpiCommunicator> world = Must(sdrt::MpiCommunicator::World(), "MPI");
  const int rank = world->rank();
  const int n = world->size();
  if (steps < 1 || steps > 99 || (engine_ranks != 1 && engine_ranks != 2 && engine_ranks != 4) ||
      engine_ranks > n) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "trainer: --steps %d and --engine-ranks %d on %d rank%s: --steps must be in "
                   "1..99 and --engine-ranks 1, 2 or 4, at most the ranks (defaults 3 and 2)\n",
                   steps, engine_ranks, n, n == 1 ? "" : "s");
    }
    return 2;
  }
  const auto mesh =
      std::make_shared<const sdrt::DeviceMesh>(Must(sdrt::DeviceMesh::Create({n}), "DeviceMesh"));
  std::vector<int64_t> firsts;
  for (int64_t r = 0; r < engine_ranks; ++r) firsts.push_back(r);
  const auto engine_mesh = std::make_shared<const sdrt::DeviceMesh>(
      Must(sdrt::DeviceMesh::Create({engine_ranks}, firsts), "DeviceMesh"));
  const sdrt::ShardingPlan tp = Must(sdrt::ShardingPlan::Builtin("tp"), "plan");

  // 1. The trainer's FSDP state dict, bfloat16, under Megatron's names.
  sdrt::Map trainer;
  std::vector<sdrt::SafetensorsTensorSpec> specs;
  for (const trainer_example::Weight& w : trainer_example::MegatronWeights()) {
    sdrt::Tensor full = Must(sdrt::Tensor::Empty(w.shape, sdrt::DType::kBFloat16), "Empty");
    const int64_t cols = w.shape.back(), rows = full.numel() / cols;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        full.data<uint16_t>()[r * cols + c] =
            ToBf16(ValueOf(trainer_example::MegatronOrigin(w.name, r, c), 0));
      }
    }
    trainer.Set(w.name, sdrt::Value(Must(sdrt::DistributeTensor(full, mesh,
                                                                {sdrt::Placement::Shard(0)}, rank),
                                         "DistributeTensor")));
    specs.push_back({w.name, sdrt::DType::kBFloat16, w.shape});
  }

  // 2. The engine's tensors, from the map and the trainer's list (what the engine allocates),
  // laid out by the tp plan on the engine's ranks; and the two bound syncs.
  sdrt::ReshardOptions options;
  options.comm = world.get();
  options.weight_map = trainer_example::MegatronToVllm();
  const auto parts = [&](absl::string_view name, const sdrt::IntVector& shape,
                         int dim) -> absl::StatusOr<int64_t> {
    const std::vector<sdrt::Placement> p = Must(tp.PlacementsFor(name, shape, *engine_mesh), "tp");
    return p[0].kind() == sdrt::Placement::Kind::kShard && p[0].dim() == dim ? engine_ranks : 1;
  };
  const std::vector<sdrt::SafetensorsTensorSpec> engine_specs =
      Must(options.weight_map.DestinationTensors(specs, parts), "DestinationTensors");
  sdrt::Map bf16_engine = Must(tp.MetaStateDict(engine_specs, engine_mesh, rank), "MetaStateDict");
  sdrt::Map fp8_engine = Fp8Engine(bf16_engine, rank);
  const sdrt::ReshardPlan bf16_plan =
      Must(sdrt::PlanReshard(trainer, bf16_engine, options), "PlanReshard (bf16)");
  const sdrt::ReshardPlan fp8_plan =
      Must(sdrt::PlanReshard(trainer, fp8_engine, options), "PlanReshard (fp8)");
  sdrt::BoundReshard bf16_sync = Must(sdrt::BindReshard(bf16_plan, trainer, bf16_engine), "Bind");
  sdrt::BoundReshard fp8_sync = Must(sdrt::BindReshard(fp8_plan, trainer, fp8_engine), "Bind");
  for (int step = 1; step <= steps; ++step) {
    for (size_t i = 0; i < trainer.size(); ++i) {  // the optimizer step, on the own shards
      sdrt::Tensor local = trainer.value(i).as_dtensor().local();  // shares the storage
      uint16_t* p = local.data<uint16_t>();
      for (int64_t k = 0; k < local.numel(); ++k) p[k] = ToBf16(FromBf16(p[k]) + 0.25f);
    }
    sdrt::TransferStats bf16_stats, fp8_stats;
    if (absl::Status s = bf16_sync.Execute(&bf16_stats); !s.ok()) Fail("sync (bf16)", s);
    if (absl::Status s = fp8_sync.Execute(&fp8_stats); !s.ok()) Fail("sync (fp8)", s);
    const int64_t wrong = SumOverRanks(*world, WrongInEngine(bf16_engine, rank, engine_ranks, step) +
                                                   WrongInEngine(fp8_engine, rank, engine_ranks, step));
    const int64_t bf16_bytes = bf16_stats.wire_bytes;  // the plans' figures, alike on every rank
    const int64_t fp8_bytes = fp8_stats.wire_bytes;
    if (rank == 0) {
      // On one rank nothing crosses a wire: the ratio of the two syncs is then not a number.
      char ratio[64] = "nothing on the wire: one rank";
      if (bf16_bytes > 0) {
        std::snprintf(ratio, sizeof ratio, "%.2fx", static_cast<double>(fp8_bytes) / bf16_bytes);
      }
      std::printf("step %d: synced %zu Megatron weights into %zu vLLM tensors on %d engine rank%s:"
                  " bf16 %lld bytes on the wire, fp8-block %lld (%s); %s\n",
                  step, specs.size(), engine_specs.size(), engine_ranks,
                  engine_ranks == 1 ? "" : "s", static_cast<long long>(bf16_bytes),
                  static_cast<long long>(fp8_bytes), ratio,
                  wrong == 0 ? "both engines match the trainer" : "WRONG");
    }
    if (wrong != 0) return 1;
  }

  // 3. Export in Hugging Face's names and layout: full tensors on rank 0 (plain meta leaves
  // there, nothing elsewhere), by the built-in map from Megatron's names.
  sdrt::ReshardOptions to_hf;
  to_hf.comm = world.get();
  to_hf.weight_map = Must(sdrt::WeightMap::Builtin("megatron-llama", trainer_example::kHead), "map");
  sdrt::Map hf;
  if (rank == 0) {
    for (const trainer_example::HfWeight& w : trainer_example::HfWeights()) {
      hf.Set(w.name, sdrt::Value(Must(sdrt::Tensor::Meta(w.shape, sdrt::DType::kBFloat16), "Meta")));
    }
  }
  if (absl::Status s = sdrt::ReshardStateDict(trainer, hf, to_hf); !s.ok()) Fail("export", s);
  int64_t wrong = 0;
  if (rank == 0) {
    std::vector<std::pair<std::string, sdrt::Tensor>> tensors;
    for (size_t i = 0; i < hf.size(); ++i) tensors.emplace_back(hf.key(i), hf.value(i).as_tensor());
    const std::string file = out_dir + "/model.safetensors";
    if (absl::Status s = sdrt::WriteSafetensors(file, tensors); !s.ok()) Fail("write", s);
    const sdrt::CheckpointSource source = Must(sdrt::CheckpointSource::Open(file), "open");
    const sdrt::ShardedCheckpointIndex index =
        Must(sdrt::WriteShardedCheckpoint(source, engine_mesh, tp, sharded),
             "WriteShardedCheckpoint");
    // Every element of the file, then of each engine rank's file.
    for (const trainer_example::HfWeight& w : trainer_example::HfWeights()) {
      const sdrt::Tensor got = Must(source.Get(w.name), "Get");
      const int64_t cols = got.shape().back(), rows = got.numel() / cols;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          wrong += FromBf16(got.data<uint16_t>()[r * cols + c]) !=
                   trainer_example::HfValue(w.key, r, c, steps);
        }
      }
    }
    for (int64_t r = 0; r < engine_ranks; ++r) {
      const sdrt::RankShards shards = Must(sdrt::LoadRankShards(sharded, r), "load");
      for (const auto& [name, piece] : shards.tensors) {
        const sdrt::Tensor full = Must(source.Get(name), "Get");
        const sdrt::DTensor want = Must(
            sdrt::DistributeTensor(full, engine_mesh,
                                   Must(tp.PlacementsFor(name, full.shape(), *engine_mesh), "tp"), r),
            "expected");
        const sdrt::Tensor& got = piece.local();
        wrong += got.nbytes() != want.local().nbytes() ||
                 std::memcmp(got.data_ptr(), want.local().data_ptr(), got.nbytes()) != 0;
      }
    }
    std::printf("exported %s (%zu Hugging Face tensors, from Megatron's by the megatron-llama map) "
                "and %s/sharded (%zu rank file%s, tp over %d rank%s): %s\n",
                file.c_str(), tensors.size(), out_dir.c_str(), index.files.size(),
                engine_ranks == 1 ? "" : "s", engine_ranks, engine_ranks == 1 ? "" : "s",
                wrong == 0 ? "every element checked" : "WRONG");
  }
  return SumOverRanks(*world, wrong) == 0 ? 0 : 1;
}
