#include "sdrt/tools/sdrt/internal/bench_workloads.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::cli {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

struct Spec {
  std::string name;
  IntVector shape;
  DType dtype;
};

std::vector<Spec> LlamaSpecs() {
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

// small's names with 8 elements each (32 bytes): the per-tensor cost with next to no bytes.
std::vector<Spec> TinySpecs() {
  std::vector<Spec> specs = SmallSpecs();
  for (Spec& s : specs) s.shape = {8};
  return specs;
}

// Tensor `index`'s synthetic bytes into `t`.
void Fill(Tensor& t, uint64_t index) {
  auto* out = static_cast<uint8_t*>(t.data_ptr());
  const int64_t nbytes = t.nbytes();
  const uint64_t seed = (index + 1) * kGolden;
  for (int64_t at = 0, j = 0; at < nbytes; at += 8, ++j) {
    const uint64_t word = SplitMix64(seed + static_cast<uint64_t>(j));
    std::memcpy(out + at, &word, static_cast<size_t>(std::min<int64_t>(8, nbytes - at)));
  }
}

absl::Status Synthesize(const std::vector<Spec>& specs, int64_t max_tensors, bool arena,
                        BenchWorkload* w) {
  const size_t n =
      max_tensors > 0 ? std::min(specs.size(), static_cast<size_t>(max_tensors)) : specs.size();
  std::vector<int64_t> offsets(n);
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(specs[i].shape));
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(specs[i].dtype, numel));
    offsets[i] = total;
    total += (bytes + 63) / 64 * 64;
  }
  std::shared_ptr<Storage> storage;
  if (arena) {
    SDRT_ASSIGN_OR_RETURN(storage, Storage::AllocateCpu(total));
  }
  for (size_t i = 0; i < n; ++i) {
    SDRT_ASSIGN_OR_RETURN(Tensor t, arena ? Tensor::AtByteOffset(storage, offsets[i],
                                                                 specs[i].dtype, specs[i].shape)
                                          : Tensor::Empty(specs[i].shape, specs[i].dtype));
    Fill(t, i);
    w->names.push_back(specs[i].name);
    w->full.push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::Status OpenFile(const std::string& path, const std::string& what, int64_t max_tensors,
                      BenchWorkload* w) {
  SDRT_ASSIGN_OR_RETURN(CheckpointSource opened, CheckpointSource::Open(path));
  if (opened.kind() == CheckpointKind::kShardedFolder) {
    // Its tensors are pieces in rank files, not whole tensors to shard.
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is an sdrt sharded folder; bench takes a checkpoint of whole tensors (a "
              "safetensors file or folder, a Hugging Face folder: `sdrt gather` makes one)"));
  }
  auto source = std::make_shared<const CheckpointSource>(std::move(opened));
  for (const CheckpointSourceTensor& t : source->tensors()) {
    if (max_tensors > 0 && static_cast<int64_t>(w->full.size()) >= max_tensors) break;
    SDRT_ASSIGN_OR_RETURN(Tensor full, source->file(t.file).Get(t.name));
    if (!t.shape.empty() && t.shape[0] > 0 && full.nbytes() % t.shape[0] != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": tensor ", t.name, " (", DTypeName(t.dtype),
                       "): its dim-0 rows are not whole bytes, so Shard(0) cannot cut it"));
    }
    w->names.push_back(t.name);
    w->full.push_back(std::move(full));
  }
  w->source = std::move(source);
  return absl::OkStatus();
}

std::string TypeOf(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return "none";
  for (const Tensor& t : tensors) {
    if (t.dtype() != tensors[0].dtype()) return "mixed";
  }
  return std::string(DTypeName(tensors[0].dtype()));
}

}  // namespace

std::string MiniLmPath() {
  std::string cache;
  if (const char* dir = std::getenv("SDRT_CACHE_DIR"); dir != nullptr && *dir != '\0') {
    cache = dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    cache = absl::StrCat(xdg, "/sdrt");
  } else {
    const char* home = std::getenv("HOME");
    cache = absl::StrCat(home == nullptr ? "" : home, "/.cache/sdrt");
  }
  return absl::StrCat(cache, "/all-MiniLM-L6-v2/model.safetensors");
}

absl::StatusOr<BenchWorkload> MakeBenchWorkload(const std::string& name, int64_t max_tensors,
                                                bool arena) {
  BenchWorkload w;
  w.name = name;
  if (name == "llama") {
    SDRT_RETURN_IF_ERROR(Synthesize(LlamaSpecs(), max_tensors, arena, &w));
  } else if (name == "small") {
    SDRT_RETURN_IF_ERROR(Synthesize(SmallSpecs(), max_tensors, arena, &w));
  } else if (name == "tiny") {
    SDRT_RETURN_IF_ERROR(Synthesize(TinySpecs(), max_tensors, arena, &w));
  } else if (name == "minilm") {
    const std::string path = MiniLmPath();
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(
          absl::StrCat("--workload minilm: ", path, " is absent (", std::strerror(errno),
                       "); run scripts/fetch-model.sh, which puts it there"));
    }
    SDRT_RETURN_IF_ERROR(OpenFile(path, "--workload minilm: " + path, max_tensors, &w));
  } else {
    struct stat st;
    if (stat(name.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat("--workload ", name, ": ", std::strerror(errno),
                                              " (give llama, small, tiny, minilm or a safetensors "
                                              "file or folder)"));
    }
    SDRT_RETURN_IF_ERROR(OpenFile(name, "--workload " + name, max_tensors, &w));
  }
  for (const Tensor& t : w.full) w.bytes += t.nbytes();
  w.digest = BenchDigest(w.full);
  w.type = TypeOf(w.full);
  return w;
}

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t BenchDigest(const std::vector<Tensor>& tensors) {
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

BenchLayout::BenchLayout(const BenchWorkload& workload, int ranks)
    : ranks_(ranks),
      gather_bytes_(static_cast<size_t>(ranks), 0),
      local_bytes_(static_cast<size_t>(ranks), 0) {
  for (const Tensor& t : workload.full) {
    const bool sharded = !t.shape().empty();
    sharded_.push_back(sharded ? 1 : 0);
    if (!sharded) {
      for (int q = 0; q < ranks; ++q) {
        pieces_.push_back({0, t.nbytes()});
        local_bytes_[q] += t.nbytes();
      }
      continue;
    }
    const int64_t dim0 = t.shape()[0];
    const int64_t row_bytes = dim0 == 0 ? 0 : t.nbytes() / dim0;
    const int64_t chunk = (dim0 + ranks - 1) / ranks;
    for (int q = 0; q < ranks; ++q) {
      const int64_t begin = std::min(dim0, chunk * q);
      const int64_t rows = std::max<int64_t>(0, std::min(chunk, dim0 - begin));
      pieces_.push_back({begin * row_bytes, rows * row_bytes});
      gather_bytes_[q] += rows * row_bytes;
      local_bytes_[q] += rows * row_bytes;
    }
  }
}

}  // namespace sdrt::cli
