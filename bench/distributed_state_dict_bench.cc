// distributed_state_dict_bench: GatherStateDict, BroadcastStateDict and DistributeStateDict
// (core/distributed/distributed_state_dict.h) over MPI on the CPU, each against the simplest way to
// move the same bytes, timed in the same run (docs/PERFORMANCE.md):
//
//   gather          every rank holds DTensors [Shard(0)] on a 1-D mesh of all ranks (FSDP);
//                   GatherStateDict (comm = MPI world) vs one MPI_Allgatherv of the same
//                   total bytes in one flat buffer (target <= 1.10x);
//   gather_r0_off   the same with cpu_offload and ranks_only {0}, vs the same all-gather;
//   broadcast       rank 0 holds the full state dict, every rank meta DTensors [Shard(0)];
//                   BroadcastStateDict vs one MPI_Bcast of the same total bytes
//                   (target <= 1.15x);
//   distribute      every rank holds the full state dict and meta DTensors;
//                   DistributeStateDict (no communicator, no collective) vs one memcpy per
//                   tensor of this rank's shard bytes into one flat buffer.
//
// Workloads (deterministic): "llama" is Llama-3-8B's 291 tensors (embed_tokens, 32 layers of
// q/k/v/o/gate/up/down projections and two norms, the final norm, lm_head) with every size
// divided by 8 except the head counts and the layer count (hidden 512 = 32 heads x 16,
// 8 kv heads (GQA 4:1, k/v 128 x 512), intermediate 1792, vocab 16032): 1/64 of the
// elements, 239.4 MiB in bfloat16. "small" is 10,000 float32 tensors of 64..1024 elements
// (1-D). "minilm" is the real all-MiniLM-L6-v2 file (~/.cache/sdrt/all-MiniLM-L6-v2/
// model.safetensors, 104 tensors, float32 and one int64). Synthetic bytes come from
// splitmix64 (tensor t, word j: SplitMix64((t + 1) * 0x9E3779B97F4A7C15 + j), little-endian;
// bench/peer/pytorch_distributed_peer.py makes the same bytes); "digest" is the same
// fingerprint of the source in both programs, so equal digests and #wrong = 0 on both sides
// mean bit-identical results.
//
// Every row: warm-up runs, then timed runs; in each run sdrt, the baseline into a warm
// buffer ("base", docs/PERFORMANCE.md's baseline) and the same baseline into a freshly allocated,
// untouched buffer ("fresh": what any API returning new tensors pays at least for first
// touching its output) take turns, which goes first rotating. A run's time is the slowest
// rank's (barrier before, MPI_MAX after); the table gives the median and [min..max] over the
// timed runs. Results are freed and meta inputs rebuilt outside the timed region. After the
// timed runs every byte of the last result (and of the baseline's buffer) is checked against
// the source: #wrong and #bwrong are the differing bytes summed over ranks. Columns as
// nccl-tests: size (bytes of the full state dict), count (tensors), algbw = size / time
// (GB/s, 1e9 B/s), busbw (gather: algbw * (n - 1) / n; broadcast: algbw; distribute: rank
// 0's shard bytes / time). colls / data / buckets: CollectiveStats of rank 0's last call.
// fltMiB: minor page faults taken inside one sdrt call (getrusage; the most of any rank,
// median over runs) times 4 KiB. The last line gives the collectives of the llama (or any)
// state dict at the default 256 MiB bucket, from one more untimed call of each.
//
// MPICH 4.0.2 (ch4:ucx) pipelines a large MPI_Allgatherv around its ring in 32 KiB pieces;
// with more ranks than cores every piece waits for a scheduler tick (64 MiB over 4 ranks on
// 2 cores: 12 s, against 32 ms for MPI_Allgather). RESULTS.md runs therefore set
// MPIR_CVAR_ALLGATHERV_PIPELINE_MSG_SIZE=1073741824 (both sdrt's and the baseline's
// all-gather are MPI_Allgatherv, so both get it).
//
// Run: mpiexec -n N distributed_state_dict_bench [--workload llama|small|minilm]
//      [--bucket-mib M] [--iters N] [--warmup N] [--ops gather,gather_r0_off,broadcast,distribute]
//      [--json PATH]
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/dtensor_ops.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/tensor.h"

namespace {

using sdrt::DType;
using sdrt::IntVector;
using sdrt::Map;
using sdrt::Tensor;
using sdrt::Value;

int g_rank = 0;
int g_size = 1;

void Die(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "rank %d: %s: %s\n", g_rank, what.c_str(), status.ToString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

template <typename T>
T Check(absl::StatusOr<T> value, const std::string& what) {
  if (!value.ok()) Die(what, value.status());
  return *std::move(value);
}

void Check(const absl::Status& status, const std::string& what) {
  if (!status.ok()) Die(what, status);
}

// ---------------------------------------------------------------------------------------
// Workloads.

struct Spec {
  std::string name;
  IntVector shape;
  DType dtype;
};

std::vector<Spec> LlamaSpecs() {
  // Llama-3-8B / 8 (head counts and layers kept): see the file comment.
  constexpr int64_t kHidden = 512, kKv = 128, kInter = 1792, kVocab = 16032, kLayers = 32;
  const DType bf16 = DType::kBFloat16;
  std::vector<Spec> specs;
  specs.push_back({"model.embed_tokens.weight", {kVocab, kHidden}, bf16});
  for (int64_t i = 0; i < kLayers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    specs.push_back({p + "self_attn.q_proj.weight", {kHidden, kHidden}, bf16});
    specs.push_back({p + "self_attn.k_proj.weight", {kKv, kHidden}, bf16});
    specs.push_back({p + "self_attn.v_proj.weight", {kKv, kHidden}, bf16});
    specs.push_back({p + "self_attn.o_proj.weight", {kHidden, kHidden}, bf16});
    specs.push_back({p + "mlp.gate_proj.weight", {kInter, kHidden}, bf16});
    specs.push_back({p + "mlp.up_proj.weight", {kInter, kHidden}, bf16});
    specs.push_back({p + "mlp.down_proj.weight", {kHidden, kInter}, bf16});
    specs.push_back({p + "input_layernorm.weight", {kHidden}, bf16});
    specs.push_back({p + "post_attention_layernorm.weight", {kHidden}, bf16});
  }
  specs.push_back({"model.norm.weight", {kHidden}, bf16});
  specs.push_back({"lm_head.weight", {kVocab, kHidden}, bf16});
  return specs;
}

std::vector<Spec> SmallSpecs() {
  std::vector<Spec> specs;
  for (int64_t i = 0; i < 10000; ++i) {
    specs.push_back({absl::StrCat("block.", i / 100, ".param", i % 100),
                     {64 + (i * 7919) % 961},
                     DType::kFloat32});
  }
  return specs;
}

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void Fill(Tensor& t, uint64_t index) {
  auto* out = static_cast<uint8_t*>(t.data_ptr());
  const int64_t nbytes = t.nbytes();
  const uint64_t seed = (index + 1) * 0x9E3779B97F4A7C15ULL;
  for (int64_t at = 0, j = 0; at < nbytes; at += 8, ++j) {
    const uint64_t word = SplitMix64(seed + static_cast<uint64_t>(j));
    std::memcpy(out + at, &word, static_cast<size_t>(std::min<int64_t>(8, nbytes - at)));
  }
}

// The fingerprint both programs print: over tensors t in order and the tensor's bytes
// zero-padded to whole little-endian words w_j, sum of w_j * (2j + 1) * (t + 1) mod 2^64.
uint64_t Digest(const std::vector<Tensor>& tensors) {
  uint64_t digest = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const auto* p = static_cast<const uint8_t*>(tensors[t].data_ptr());
    const int64_t nbytes = tensors[t].nbytes();
    uint64_t sum = 0;
    for (int64_t at = 0, j = 0; at < nbytes; at += 8, ++j) {
      uint64_t word = 0;
      std::memcpy(&word, p + at, static_cast<size_t>(std::min<int64_t>(8, nbytes - at)));
      sum += word * (2 * static_cast<uint64_t>(j) + 1);
    }
    digest += sum * (t + 1);
  }
  return digest;
}

struct Workload {
  std::string name;
  std::vector<Spec> specs;
  std::vector<Tensor> full;                   // contiguous CPU tensors, on every rank
  std::optional<sdrt::SafetensorsFile> file;  // keeps the mapping of "minilm" alive
};

Workload MakeWorkload(const std::string& name) {
  Workload w;
  w.name = name;
  if (name == "minilm") {
    const char* home = std::getenv("HOME");
    const std::string path = absl::StrCat(home == nullptr ? "" : home,
                                          "/.cache/sdrt/all-MiniLM-L6-v2/model.safetensors");
    w.file = Check(sdrt::SafetensorsFile::Open(path), "open " + path);
    for (const sdrt::SafetensorsEntry& e : w.file->entries()) {
      w.specs.push_back({e.name, e.shape, e.dtype});
      w.full.push_back(Check(w.file->Get(e.name), "read " + e.name));
    }
    return w;
  }
  if (name == "llama") {
    w.specs = LlamaSpecs();
  } else if (name == "small") {
    w.specs = SmallSpecs();
  } else {
    std::fprintf(stderr, "unknown workload '%s' (llama, small, minilm)\n", name.c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (size_t i = 0; i < w.specs.size(); ++i) {
    Tensor t = Check(Tensor::Empty(w.specs[i].shape, w.specs[i].dtype), "allocate");
    Fill(t, i);
    w.full.push_back(std::move(t));
  }
  return w;
}

// PyTorch's Shard(0) chunking of dim 0 (computed here, independently of core/): rows
// [begin, begin + rows) of the full tensor belong to `rank`.
struct RowRange {
  int64_t begin = 0;
  int64_t rows = 0;
};

RowRange Shard0(int64_t dim0, int n, int rank) {
  const int64_t chunk = (dim0 + n - 1) / n;
  const int64_t begin = std::min(dim0, chunk * rank);
  return {begin, std::max<int64_t>(0, std::min(chunk, dim0 - begin))};
}

int64_t RowBytes(const Tensor& t) { return t.shape()[0] == 0 ? 0 : t.nbytes() / t.shape()[0]; }

// Bytes of [got, got + bytes) that differ from [want, want + bytes).
int64_t DifferingBytes(const uint8_t* got, const uint8_t* want, int64_t bytes) {
  if (bytes == 0 || std::memcmp(got, want, static_cast<size_t>(bytes)) == 0) return 0;
  int64_t wrong = 0;
  for (int64_t i = 0; i < bytes; ++i) wrong += got[i] != want[i];
  return wrong;
}

// Bytes of `got` (as if contiguous) that differ from `want_bytes`; all of them when the
// sizes differ or it holds no data.
int64_t DifferingBytes(const Tensor& got, const uint8_t* want, int64_t want_bytes) {
  if (!got.defined() || got.is_meta() || got.nbytes() != want_bytes) return want_bytes;
  if (want_bytes == 0) return 0;
  const Tensor g = Check(got.Contiguous(), "contiguous");
  return DifferingBytes(static_cast<const uint8_t*>(g.data_ptr()), want, want_bytes);
}

int64_t SumOverRanks(int64_t value) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return value;
}

// ---------------------------------------------------------------------------------------
// Timing.

int g_warmup = 1;
int g_iterations = 5;

int64_t MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// The slowest rank's time of `call`, and the most minor page faults a rank took in it.
struct Timing {
  double seconds = 0;
  int64_t faults = 0;
};

Timing TimeOnce(const std::function<void()>& call) {
  MPI_Barrier(MPI_COMM_WORLD);
  const int64_t faults = MinorFaults();
  const double start = MPI_Wtime();
  call();
  Timing t{MPI_Wtime() - start, MinorFaults() - faults};
  MPI_Allreduce(MPI_IN_PLACE, &t.seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &t.faults, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

struct Spread {
  double median = 0, min = 0, max = 0;
};

Spread Summarize(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  const double median = n % 2 == 1 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
  return {median, t.front(), t.back()};
}

struct Row {
  std::string op;
  int64_t size = 0;   // bytes of the full state dict
  int64_t count = 0;  // tensors
  std::string type;
  int root = -1;
  Spread sdrt, base, fresh;
  std::vector<double> sdrt_runs, base_runs, fresh_runs;
  std::vector<double> sdrt_faults;  // minor page faults per call, the most of any rank
  double algbw = 0, busbw = 0;
  sdrt::CollectiveStats stats;
  int64_t wrong = 0;       // sdrt result bytes wrong, summed over ranks
  int64_t base_wrong = 0;  // baseline buffer bytes wrong, summed over ranks
};

// A fresh output buffer for the "fresh" baseline: allocated like a CPU Storage
// (aligned_alloc, 256 bytes, untouched) inside the timed call, freed outside it.
struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using FreshBuffer = std::unique_ptr<uint8_t, FreeDeleter>;

FreshBuffer AllocateFresh(int64_t bytes) {
  const size_t rounded = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 255) / 256 * 256);
  return FreshBuffer(static_cast<uint8_t*>(std::aligned_alloc(256, rounded)));
}

// Runs sdrt (`prepare` untimed, then `sdrt_call`), the baseline into a warm buffer
// (`base_call`) and the baseline into a fresh buffer (`fresh_call`), rotating which goes
// first, g_warmup + g_iterations times; `cleanup` (untimed) runs after the fresh one.
void Measure(Row& row, const std::function<void()>& prepare, const std::function<void()>& sdrt_call,
             const std::function<void()>& base_call, const std::function<void()>& fresh_call,
             const std::function<void()>& cleanup) {
  for (int it = 0; it < g_warmup + g_iterations; ++it) {
    const bool timed = it >= g_warmup;
    for (int k = 0; k < 3; ++k) {
      switch ((k + it) % 3) {
        case 0: {
          prepare();
          const Timing t = TimeOnce(sdrt_call);
          if (timed) row.sdrt_runs.push_back(t.seconds);
          if (timed) row.sdrt_faults.push_back(static_cast<double>(t.faults));
          break;
        }
        case 1: {
          const Timing t = TimeOnce(base_call);
          if (timed) row.base_runs.push_back(t.seconds);
          break;
        }
        default: {
          const Timing t = TimeOnce(fresh_call);
          cleanup();
          if (timed) row.fresh_runs.push_back(t.seconds);
          break;
        }
      }
    }
  }
  row.sdrt = Summarize(row.sdrt_runs);
  row.base = Summarize(row.base_runs);
  row.fresh = Summarize(row.fresh_runs);
}

std::string TypeOf(const Workload& w) {
  std::string type;
  for (const Spec& s : w.specs) {
    const std::string name(sdrt::DTypeName(s.dtype));
    if (type.find(name) == std::string::npos) type += (type.empty() ? "" : "+") + name;
  }
  return type;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<std::unique_ptr<sdrt::MpiCommunicator>> world = sdrt::MpiCommunicator::World();
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 1;
  }
  sdrt::Communicator& comm = **world;
  g_rank = comm.rank();
  g_size = comm.size();
  const int n = g_size;
  std::string workload_name = "llama";
  std::string json_path;
  std::string ops = "gather,gather_r0_off,broadcast,distribute";
  int64_t bucket_bytes = sdrt::kDefaultBucketBytes;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--workload") == 0) workload_name = argv[i + 1];
    if (std::strcmp(argv[i], "--json") == 0) json_path = argv[i + 1];
    if (std::strcmp(argv[i], "--ops") == 0) ops = argv[i + 1];
    if (std::strcmp(argv[i], "--bucket-mib") == 0) {
      bucket_bytes = static_cast<int64_t>(std::atof(argv[i + 1]) * (1 << 20));
    }
    if (std::strcmp(argv[i], "--iters") == 0) g_iterations = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--warmup") == 0) g_warmup = std::max(0, std::atoi(argv[i + 1]));
  }
  bucket_bytes = std::max<int64_t>(1, bucket_bytes);

  const Workload w = MakeWorkload(workload_name);
  const size_t num = w.full.size();
  int64_t total = 0;
  for (const Tensor& t : w.full) total += t.nbytes();
  const uint64_t digest = Digest(w.full);
  const std::string type = TypeOf(w);

  // Inputs: this rank's DTensors (DistributeTensor over a 1-D mesh of all ranks) and the
  // meta template; every rank's shard bytes per tensor (for the baselines and the checks).
  auto mesh = std::make_shared<const sdrt::DeviceMesh>(
      Check(sdrt::DeviceMesh::Create({static_cast<int64_t>(n)}), "mesh"));
  const std::vector<sdrt::Placement> shard0 = {sdrt::Placement::Shard(0)};
  Map sharded, meta;
  std::vector<std::vector<RowRange>> ranges(num);  // [tensor][rank]
  std::vector<int64_t> rank_bytes(static_cast<size_t>(n), 0);
  for (size_t i = 0; i < num; ++i) {
    const Tensor& full = w.full[i];
    sharded.Set(w.specs[i].name,
                Value(Check(sdrt::DistributeTensor(full, mesh, shard0, g_rank), "distribute")));
    const Tensor meta_full = Check(Tensor::Meta(full.shape(), full.dtype()), "meta");
    meta.Set(w.specs[i].name,
             Value(Check(sdrt::DistributeTensor(meta_full, mesh, shard0, g_rank), "meta")));
    for (int q = 0; q < n; ++q) {
      ranges[i].push_back(Shard0(full.shape()[0], n, q));
      rank_bytes[q] += ranges[i][q].rows * RowBytes(full);
    }
  }
  const auto shard_ptr = [&](size_t i, int q) {
    return static_cast<const uint8_t*>(w.full[i].data_ptr()) +
           ranges[i][q].begin * RowBytes(w.full[i]);
  };
  const auto shard_bytes = [&](size_t i, int q) { return ranges[i][q].rows * RowBytes(w.full[i]); };

  // Baseline buffers, touched once before timing.
  std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  for (int q = 0, at = 0; q < n; ++q) {
    counts[q] = static_cast<int>(rank_bytes[q]);
    displs[q] = at;
    at += counts[q];
  }
  std::vector<uint8_t> flat_send(static_cast<size_t>(rank_bytes[g_rank]));
  for (size_t i = 0, at = 0; i < num; ++i) {
    std::memcpy(flat_send.data() + at, shard_ptr(i, g_rank), shard_bytes(i, g_rank));
    at += static_cast<size_t>(shard_bytes(i, g_rank));
  }
  std::vector<uint8_t> flat_recv(static_cast<size_t>(total), 0);
  std::vector<uint8_t> flat_bcast(static_cast<size_t>(total), 0);
  if (g_rank == 0) {
    for (size_t i = 0, at = 0; i < num; ++i) {
      std::memcpy(flat_bcast.data() + at, w.full[i].data_ptr(), w.full[i].nbytes());
      at += static_cast<size_t>(w.full[i].nbytes());
    }
  }
  std::vector<uint8_t> flat_local(static_cast<size_t>(rank_bytes[g_rank]), 0);

  const auto all_gather = [&] {
    MPI_Allgatherv(flat_send.data(), counts[g_rank], MPI_BYTE, flat_recv.data(), counts.data(),
                   displs.data(), MPI_BYTE, MPI_COMM_WORLD);
  };
  FreshBuffer fresh;
  const auto free_fresh = [&] { fresh.reset(); };
  const auto all_gather_fresh = [&] {
    fresh = AllocateFresh(total);
    MPI_Allgatherv(flat_send.data(), counts[g_rank], MPI_BYTE, fresh.get(), counts.data(),
                   displs.data(), MPI_BYTE, MPI_COMM_WORLD);
  };
  const auto check_all_gather = [&] {
    int64_t wrong = 0;
    size_t at = 0;
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < num; ++i) {
        const int64_t b = shard_bytes(i, q);
        const uint8_t* want = shard_ptr(i, q);
        if (std::memcmp(flat_recv.data() + at, want, static_cast<size_t>(b)) != 0) {
          for (int64_t k = 0; k < b; ++k) wrong += flat_recv[at + k] != want[k];
        }
        at += static_cast<size_t>(b);
      }
    }
    std::fill(flat_recv.begin(), flat_recv.end(), 0);
    return SumOverRanks(wrong);
  };
  // Full tensors of `result` against the source; an empty map expected when !keep.
  const auto check_gathered = [&](const Map& result, bool keep) {
    int64_t wrong = 0;
    if (!keep) return SumOverRanks(result.empty() ? 0 : total);
    for (size_t i = 0; i < num; ++i) {
      const Value* v = result.Find(w.specs[i].name);
      if (v == nullptr || v->kind() != sdrt::ValueKind::kTensor ||
          v->as_tensor().shape() != w.full[i].shape() ||
          v->as_tensor().dtype() != w.full[i].dtype()) {
        wrong += w.full[i].nbytes();
        continue;
      }
      wrong += DifferingBytes(v->as_tensor(), static_cast<const uint8_t*>(w.full[i].data_ptr()),
                              w.full[i].nbytes());
    }
    return SumOverRanks(wrong);
  };
  // This rank's DTensor locals in `local` against its rows of the source.
  const auto check_local = [&](const Map& local) {
    int64_t wrong = 0;
    for (size_t i = 0; i < num; ++i) {
      const Value* v = local.Find(w.specs[i].name);
      const int64_t want = shard_bytes(i, g_rank);
      if (v == nullptr || v->kind() != sdrt::ValueKind::kDTensor ||
          v->as_dtensor().global_shape() != w.full[i].shape() ||
          v->as_dtensor().local().shape()[0] != ranges[i][g_rank].rows) {
        wrong += want;
        continue;
      }
      wrong += DifferingBytes(v->as_dtensor().local(), shard_ptr(i, g_rank), want);
    }
    return SumOverRanks(wrong);
  };

  const auto wanted = [&](absl::string_view op) {
    for (absl::string_view o : absl::StrSplit(ops, ',')) {
      if (o == op) return true;
    }
    return false;
  };
  std::vector<Row> rows;
  const auto make_row = [&](const std::string& op, int root) {
    Row row;
    row.op = op;
    row.size = total;
    row.count = static_cast<int64_t>(num);
    row.type = type;
    row.root = root;
    return row;
  };

  // (1) gather, (2) gather with cpu_offload + ranks_only {0}.
  for (const bool offload_r0 : {false, true}) {
    if (!wanted(offload_r0 ? "gather_r0_off" : "gather")) continue;
    Row row = make_row(offload_r0 ? "gather_r0_off" : "gather", -1);
    std::optional<Map> result;
    sdrt::GatherOptions options;
    options.comm = &comm;
    options.bucket_bytes = bucket_bytes;
    options.stats = &row.stats;
    if (offload_r0) {
      options.cpu_offload = true;
      options.ranks_only = {0};
    }
    Measure(
        row, [&] { result.reset(); },
        [&] { result = Check(sdrt::GatherStateDict(sharded, options), "GatherStateDict"); },
        all_gather, all_gather_fresh, free_fresh);
    row.wrong = check_gathered(*result, !offload_r0 || g_rank == 0);
    row.base_wrong = check_all_gather();
    rows.push_back(std::move(row));
  }

  // (3) broadcast from rank 0 into meta DTensors.
  if (wanted("broadcast")) {
    Row row = make_row("broadcast", 0);
    Map full_on_root;
    if (g_rank == 0) {
      for (size_t i = 0; i < num; ++i) full_on_root.Set(w.specs[i].name, Value(w.full[i]));
    }
    Map local;
    sdrt::BroadcastOptions options;
    options.comm = &comm;
    options.bucket_bytes = bucket_bytes;
    options.stats = &row.stats;
    Measure(
        row, [&] { local = meta; },
        [&] {
          Check(sdrt::BroadcastStateDict(full_on_root, local, options), "BroadcastStateDict");
        },
        [&] { MPI_Bcast(flat_bcast.data(), static_cast<int>(total), MPI_BYTE, 0, MPI_COMM_WORLD); },
        [&] {
          // The root sends from its (warm) buffer; every other rank receives into a new one.
          uint8_t* buffer = flat_bcast.data();
          if (g_rank != 0) {
            fresh = AllocateFresh(total);
            buffer = fresh.get();
          }
          MPI_Bcast(buffer, static_cast<int>(total), MPI_BYTE, 0, MPI_COMM_WORLD);
        },
        free_fresh);
    row.wrong = check_local(local);
    int64_t bwrong = 0;
    for (size_t i = 0, at = 0; i < num; ++i) {
      bwrong +=
          DifferingBytes(flat_bcast.data() + at, static_cast<const uint8_t*>(w.full[i].data_ptr()),
                         w.full[i].nbytes());
      at += static_cast<size_t>(w.full[i].nbytes());
    }
    row.base_wrong = SumOverRanks(bwrong);
    rows.push_back(std::move(row));
  }

  // (4) distribute: no collective; every rank cuts its pieces from its own full state dict.
  if (wanted("distribute")) {
    Row row = make_row("distribute", -1);
    Map full_everywhere;
    for (size_t i = 0; i < num; ++i) full_everywhere.Set(w.specs[i].name, Value(w.full[i]));
    Map local;
    sdrt::DistributeOptions options;
    options.rank = g_rank;
    const auto copy_shards = [&](uint8_t* out) {
      for (size_t i = 0, at = 0; i < num; ++i) {
        const int64_t b = shard_bytes(i, g_rank);
        std::memcpy(out + at, shard_ptr(i, g_rank), static_cast<size_t>(b));
        at += static_cast<size_t>(b);
      }
    };
    Measure(
        row, [&] { local = meta; },
        [&] { Check(sdrt::DistributeStateDict(full_everywhere, local, options), "Distribute"); },
        [&] { copy_shards(flat_local.data()); },
        [&] {
          fresh = AllocateFresh(rank_bytes[g_rank]);
          copy_shards(fresh.get());
        },
        free_fresh);
    row.wrong = check_local(local);
    const int64_t bwrong = DifferingBytes(flat_local.data(), flat_send.data(), rank_bytes[g_rank]);
    row.base_wrong = SumOverRanks(bwrong);
    rows.push_back(std::move(row));
  }

  // The collectives of the default bucket (the closing note): one more untimed call
  // of each (the counts do not depend on the machine).
  sdrt::CollectiveStats default_gather, default_bcast;
  {
    sdrt::GatherOptions g;
    g.comm = &comm;
    g.stats = &default_gather;
    Check(sdrt::GatherStateDict(sharded, g).status(), "GatherStateDict (default bucket)");
    sdrt::BroadcastOptions b;
    b.comm = &comm;
    b.stats = &default_bcast;
    Map full_on_root;
    if (g_rank == 0) {
      for (size_t i = 0; i < num; ++i) full_on_root.Set(w.specs[i].name, Value(w.full[i]));
    }
    Map local = meta;
    Check(sdrt::BroadcastStateDict(full_on_root, local, b).status(), "Broadcast (default bucket)");
  }

  nlohmann::json json = nlohmann::json::array();
  if (g_rank == 0) {
    std::printf(
        "# workload %s: %zu tensors, %lld bytes (%.1f MiB) %s, digest %016llx; ranks %d; "
        "bucket %.2f MiB; %d timed runs after %d warm-up\n",
        w.name.c_str(), num, static_cast<long long>(total), total / 1048576.0, type.c_str(),
        static_cast<unsigned long long>(digest), n, bucket_bytes / 1048576.0, g_iterations,
        g_warmup);
    std::printf("# time: median [min..max] over runs of the slowest rank, ms\n");
    std::printf(
        "# base: the flat collective (distribute: memcpy) into a warm buffer (docs/PERFORMANCE.md's "
        "baseline); fresh: the same into a new, untouched buffer (page faults included)\n");
    std::printf(
        "# fltMiB: minor page faults in one sdrt call (the most of any rank, median) x 4 KiB\n");
    std::printf(
        "%-13s %10s %6s %4s %9s %17s %9s %17s %6s %9s %6s %7s %7s %5s %5s %7s %6s %6s %7s\n", "op",
        "size", "count", "root", "sdrt", "[min..max]", "base", "[min..max]", "ratio", "fresh",
        "ratio", "algbw", "busbw", "colls", "data", "buckets", "fltMiB", "#wrong", "#bwrong");
  }
  for (Row& row : rows) {
    const double bytes = row.op == "distribute" ? static_cast<double>(rank_bytes[g_rank])
                                                : static_cast<double>(row.size);
    row.algbw = static_cast<double>(row.size) / row.sdrt.median / 1e9;
    row.busbw = row.op == "broadcast"    ? row.algbw
                : row.op == "distribute" ? bytes / row.sdrt.median / 1e9
                                         : row.algbw * (n - 1) / n;
    if (g_rank != 0) continue;
    const double fault_mib = Summarize(row.sdrt_faults).median * 4096 / 1048576.0;
    std::printf("%s", absl::StrFormat(
                          "%-13s %10d %6d %4d %9.2f %17s %9.2f %17s %6.2f %9.2f %6.2f "
                          "%7.2f %7.2f %5d %5d %7d %6.0f %6d %7d\n",
                          row.op, row.size, row.count, row.root, row.sdrt.median * 1e3,
                          absl::StrFormat("[%.2f..%.2f]", row.sdrt.min * 1e3, row.sdrt.max * 1e3),
                          row.base.median * 1e3,
                          absl::StrFormat("[%.2f..%.2f]", row.base.min * 1e3, row.base.max * 1e3),
                          row.sdrt.median / row.base.median, row.fresh.median * 1e3,
                          row.sdrt.median / row.fresh.median, row.algbw, row.busbw,
                          row.stats.collectives, row.stats.data_collectives, row.stats.buckets,
                          fault_mib, row.wrong, row.base_wrong)
                          .c_str());
    json.push_back({{"op", row.op},
                    {"workload", w.name},
                    {"ranks", n},
                    {"bucket_bytes", bucket_bytes},
                    {"size", row.size},
                    {"count", row.count},
                    {"type", row.type},
                    {"root", row.root},
                    {"sdrt_ms", row.sdrt.median * 1e3},
                    {"sdrt_min_ms", row.sdrt.min * 1e3},
                    {"sdrt_max_ms", row.sdrt.max * 1e3},
                    {"sdrt_runs_ms", row.sdrt_runs},
                    {"base_ms", row.base.median * 1e3},
                    {"base_min_ms", row.base.min * 1e3},
                    {"base_max_ms", row.base.max * 1e3},
                    {"base_runs_ms", row.base_runs},
                    {"ratio", row.sdrt.median / row.base.median},
                    {"fresh_ms", row.fresh.median * 1e3},
                    {"fresh_min_ms", row.fresh.min * 1e3},
                    {"fresh_max_ms", row.fresh.max * 1e3},
                    {"fresh_runs_ms", row.fresh_runs},
                    {"ratio_fresh", row.sdrt.median / row.fresh.median},
                    {"sdrt_fault_mib", fault_mib},
                    {"algbw", row.algbw},
                    {"busbw", row.busbw},
                    {"collectives", row.stats.collectives},
                    {"data_collectives", row.stats.data_collectives},
                    {"buckets", row.stats.buckets},
                    {"wrong", row.wrong},
                    {"base_wrong", row.base_wrong},
                    {"digest", absl::StrFormat("%016x", digest)}});
  }
  if (g_rank == 0) {
    std::printf(
        "# default %d MiB bucket, %zu tensors: gather %lld collectives (%lld data, %lld "
        "buckets); broadcast %lld collectives (%lld data, %lld buckets)\n",
        static_cast<int>(sdrt::kDefaultBucketBytes >> 20), num,
        static_cast<long long>(default_gather.collectives),
        static_cast<long long>(default_gather.data_collectives),
        static_cast<long long>(default_gather.buckets),
        static_cast<long long>(default_bcast.collectives),
        static_cast<long long>(default_bcast.data_collectives),
        static_cast<long long>(default_bcast.buckets));
    for (const Row& row : rows) {
      const double target = row.op == "broadcast" ? 1.15 : row.op == "distribute" ? 0 : 1.10;
      const double ratio = row.sdrt.median / row.base.median;
      if (target > 0 && ratio > target) {
        std::printf("# MISSED: %s %.2fx its baseline (target <= %.2fx)\n", row.op.c_str(), ratio,
                    target);
      }
    }
  }
  if (g_rank == 0 && !json_path.empty()) std::ofstream(json_path) << json.dump(2) << "\n";
  int64_t total_wrong = 0;
  for (const Row& row : rows) total_wrong += row.wrong + row.base_wrong;
  world->reset();
  return total_wrong == 0 ? 0 : 1;
}
