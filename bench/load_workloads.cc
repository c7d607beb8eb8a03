// The files and the floor of bench/load_bench.cc (load_workloads.h).
#include "sdrt/bench/load_workloads.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/io/safetensors.h"

namespace sdrt::bench {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(errno),
                      absl::StrCat(what, ": ", std::strerror(errno)));
}

std::vector<SafetensorsTensorSpec> LlamaSpecs() {
  constexpr int64_t kHidden = 1024, kKv = 256, kInter = 3584, kVocab = 32064, kLayers = 32;
  const DType bf16 = DType::kBFloat16;
  std::vector<SafetensorsTensorSpec> specs;
  specs.push_back({"model.embed_tokens.weight", bf16, {kVocab, kHidden}});
  for (int64_t i = 0; i < kLayers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    specs.push_back({p + "self_attn.q_proj.weight", bf16, {kHidden, kHidden}});
    specs.push_back({p + "self_attn.k_proj.weight", bf16, {kKv, kHidden}});
    specs.push_back({p + "self_attn.v_proj.weight", bf16, {kKv, kHidden}});
    specs.push_back({p + "self_attn.o_proj.weight", bf16, {kHidden, kHidden}});
    specs.push_back({p + "mlp.gate_proj.weight", bf16, {kInter, kHidden}});
    specs.push_back({p + "mlp.up_proj.weight", bf16, {kInter, kHidden}});
    specs.push_back({p + "mlp.down_proj.weight", bf16, {kHidden, kInter}});
    specs.push_back({p + "input_layernorm.weight", bf16, {kHidden}});
    specs.push_back({p + "post_attention_layernorm.weight", bf16, {kHidden}});
  }
  specs.push_back({"model.norm.weight", bf16, {kHidden}});
  specs.push_back({"lm_head.weight", bf16, {kVocab, kHidden}});
  return specs;
}

std::vector<SafetensorsTensorSpec> SmallSpecs(int64_t count) {
  std::vector<SafetensorsTensorSpec> specs;
  for (int64_t i = 0; i < count; ++i) {
    specs.push_back({absl::StrCat("block.", i / 100, ".param", i % 100),
                     DType::kFloat32,
                     {64 + (i * 7919) % 961}});
  }
  return specs;
}

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// torch.chunk's chunk `rank` of `size` over `n`: [begin, begin + length).
void Chunk(int64_t size, int n, int rank, int64_t& begin, int64_t& length) {
  const int64_t chunk = (size + n - 1) / n;
  begin = std::min(size, chunk * rank);
  length = std::max<int64_t>(0, std::min(chunk, size - begin));
}

}  // namespace

absl::Status WriteWorkload(const std::string& which, const std::string& path) {
  std::vector<SafetensorsTensorSpec> specs;
  if (which == "llama") {
    specs = LlamaSpecs();
  } else if (which == "small") {
    specs = SmallSpecs(10000);
  } else if (which == "small100k") {
    specs = SmallSpecs(100000);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown workload '", which, "' (llama, small, small100k)"));
  }
  const auto make = [&](size_t index) -> absl::StatusOr<Tensor> {
    absl::StatusOr<Tensor> t = Tensor::Empty(specs[index].shape, specs[index].dtype);
    if (!t.ok()) return t.status();
    auto* out = static_cast<uint8_t*>(t->data_ptr());
    const int64_t nbytes = t->nbytes();
    const uint64_t seed = (index + 1) * 0x9E3779B97F4A7C15ULL;
    for (int64_t at = 0, j = 0; at < nbytes; at += 8, ++j) {
      const uint64_t word = SplitMix64(seed + static_cast<uint64_t>(j));
      std::memcpy(out + at, &word, static_cast<size_t>(std::min<int64_t>(8, nbytes - at)));
    }
    return t;
  };
  return WriteSafetensorsStreamed(path, specs, make, {{"format", "pt"}});
}

absl::StatusOr<std::vector<ByteRun>> KeptRuns(const CheckpointSource& source,
                                              const ShardingPlan& plan, const DeviceMesh& mesh,
                                              int rank) {
  if (mesh.ndim() != 1) return absl::InvalidArgumentError("KeptRuns: a 1-D mesh only");
  const int n = static_cast<int>(mesh.size(0));
  std::vector<ByteRun> runs;
  const auto add = [&](int file, int64_t offset, int64_t bytes) {
    if (bytes == 0) return;
    if (!runs.empty() && runs.back().file == file &&
        runs.back().offset + runs.back().bytes == offset) {
      runs.back().bytes += bytes;
    } else {
      runs.push_back({file, offset, bytes});
    }
  };
  for (const CheckpointSourceTensor& t : source.tensors()) {  // file order (tensors())
    absl::StatusOr<std::vector<Placement>> placements = plan.PlacementsFor(t.name, t.shape, mesh);
    if (!placements.ok()) return placements.status();
    const Placement& p = placements->front();
    if (p.is_replicate()) {
      add(t.file, t.offset, t.nbytes);
      continue;
    }
    if (p.kind() != Placement::Kind::kShard) {
      return absl::InvalidArgumentError(
          absl::StrCat("KeptRuns: ", t.name, ": ", p.ToString(), " is not Shard or Replicate"));
    }
    if (IsSubByte(t.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("KeptRuns: ", t.name, ": the floor's runs take whole-byte dtypes"));
    }
    const size_t d = static_cast<size_t>(p.dim());
    int64_t outer = 1, inner = ElementBits(t.dtype) / 8;
    for (size_t k = 0; k < d; ++k) outer *= t.shape[k];
    for (size_t k = d + 1; k < t.shape.size(); ++k) inner *= t.shape[k];
    int64_t begin = 0, length = 0;
    Chunk(t.shape[d], n, rank, begin, length);
    for (int64_t i = 0; i < outer; ++i) {
      add(t.file, t.offset + (i * t.shape[d] + begin) * inner, length * inner);
    }
  }
  return runs;
}

namespace {

// Preads bytes [from, to) of the runs read back to back (the runs' bytes laid end to end)
// into out + from; returns the pread calls.
absl::StatusOr<int64_t> PreadRange(const std::vector<int>& fds, const std::vector<ByteRun>& runs,
                                   uint8_t* out, int64_t from, int64_t to) {
  int64_t calls = 0;
  int64_t at = 0;  // where the run starts in `out`
  for (const ByteRun& r : runs) {
    const int64_t begin = std::max(from, at);
    const int64_t end = std::min(to, at + r.bytes);
    for (int64_t done = begin; done < end;) {
      const ssize_t got = pread(fds[static_cast<size_t>(r.file)], out + done,
                                static_cast<size_t>(end - done), r.offset + (done - at));
      ++calls;
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return Errno(absl::StrCat("pread at ", r.offset + (done - at)));
      if (got == 0) {
        return absl::DataLossError(absl::StrCat("short read at ", r.offset + (done - at)));
      }
      done += got;
    }
    at += r.bytes;
    if (at >= to) break;
  }
  return calls;
}

}  // namespace

absl::StatusOr<int64_t> PreadRuns(const std::vector<int>& fds, const std::vector<ByteRun>& runs,
                                  uint8_t* out, int threads) {
  int64_t total = 0;
  for (const ByteRun& r : runs) total += r.bytes;
  if (threads <= 1) return PreadRange(fds, runs, out, 0, total);
  // Equal byte ranges of the runs, one per thread.
  std::vector<absl::StatusOr<int64_t>> calls(static_cast<size_t>(threads), int64_t{0});
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    const int64_t from = total * t / threads;
    const int64_t to = total * (t + 1) / threads;
    pool.emplace_back([&, t, from, to] {
      calls[static_cast<size_t>(t)] = PreadRange(fds, runs, out, from, to);
    });
  }
  for (std::thread& thread : pool) thread.join();
  int64_t sum = 0;
  for (const absl::StatusOr<int64_t>& c : calls) {
    if (!c.ok()) return c.status();
    sum += *c;
  }
  return sum;
}

absl::StatusOr<double> ResidentFraction(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(path);
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size == 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat or empty"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return Errno(absl::StrCat("mmap ", path));
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((size + page - 1) / page);
  const int rc = mincore(map, size, in_core.data());
  munmap(map, size);
  if (rc != 0) return Errno(absl::StrCat("mincore ", path));
  int64_t resident = 0;
  for (unsigned char c : in_core) resident += c & 1;
  return static_cast<double>(resident) / static_cast<double>(in_core.size());
}

}  // namespace sdrt::bench
