// The soak's model, layouts and values (soak_state.h).
#include "sdrt/bench/soak_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/synthetic.h"

namespace sdrt::bench {
namespace {

// The full tensor of `spec` whose element i is i (int64).
absl::StatusOr<Tensor> Iota(const SafetensorsTensorSpec& spec) {
  SDRT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(spec.shape, DType::kInt64));
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = i;
  return t;
}

int64_t WrongIn(const SoakSlot& s, int64_t step) {
  int64_t wrong = 0;
  for (int64_t j = 0; j < s.n; ++j) {
    const float want = SoakValue(s.index != nullptr ? s.index[j] : j, s.tensor, step);
    wrong += std::memcmp(&s.values[j], &want, sizeof want) != 0 ? 1 : 0;
  }
  return wrong;
}

}  // namespace

float SoakValue(int64_t index, int64_t tensor, int64_t step) {
  uint64_t h = static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull +
               static_cast<uint64_t>(tensor) * 0xBF58476D1CE4E5B9ull +
               static_cast<uint64_t>(step) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<int64_t>(h >> 44) - (int64_t{1} << 19)) / 1024.0f;
}

absl::StatusOr<std::vector<SafetensorsTensorSpec>> SoakModel(double scale) {
  SDRT_ASSIGN_OR_RETURN(const cli::ArchConfig config, cli::ScaledArch("tiny-llama", scale));
  SDRT_ASSIGN_OR_RETURN(const cli::SyntheticStateDict model,
                        cli::SyntheticStateDict::Create(config, DType::kFloat32, /*seed=*/0));
  return model.specs();
}

absl::StatusOr<SoakSide> SoakSide::Make(const std::vector<SafetensorsTensorSpec>& model,
                                        const std::string& plan,
                                        std::shared_ptr<const DeviceMesh> mesh, int64_t rank) {
  SDRT_ASSIGN_OR_RETURN(const ShardingPlan sharding, ShardingPlan::Builtin(plan));
  SoakSide side;
  SDRT_ASSIGN_OR_RETURN(side.map_, sharding.MetaStateDict(model, mesh, rank));
  side.indices_.reserve(side.map_.size());
  side.slots_.reserve(side.map_.size());
  for (size_t t = 0; t < side.map_.size(); ++t) {
    const DTensor& meta = side.map_.value(t).as_dtensor();
    SDRT_ASSIGN_OR_RETURN(const Tensor iota, Iota(model[t]));
    SDRT_ASSIGN_OR_RETURN(const DTensor index,
                          DistributeTensor(iota, meta.mesh(), meta.placements(), rank));
    SDRT_ASSIGN_OR_RETURN(Tensor local, Tensor::Empty(meta.local().shape(), DType::kFloat32));
    side.slots_.push_back({local.data<float>(), index.local().data<int64_t>(), local.numel(),
                           static_cast<int64_t>(t)});
    side.indices_.push_back(index.local());
    SDRT_ASSIGN_OR_RETURN(DTensor allocated, meta.WithLocal(std::move(local)));
    side.map_.value(t) = Value(std::move(allocated));
  }
  return side;
}

void SoakSide::Write(int64_t step) {
  for (const SoakSlot& s : slots_) {
    for (int64_t j = 0; j < s.n; ++j) s.values[j] = SoakValue(s.index[j], s.tensor, step);
  }
}

void SoakSide::Poison() {
  for (const SoakSlot& s : slots_) std::memset(s.values, 0xFF, sizeof(float) * s.n);
}

int64_t SoakSide::CountWrong(int64_t step) const {
  int64_t wrong = 0;
  for (const SoakSlot& s : slots_) wrong += WrongIn(s, step);
  return wrong;
}

int64_t CountWrongFull(const Map& result, const std::vector<SafetensorsTensorSpec>& model,
                       int64_t step) {
  int64_t wrong = 0;
  for (size_t t = 0; t < model.size(); ++t) {
    int64_t numel = 1;
    for (const int64_t d : model[t].shape) numel *= d;
    const Value* v = result.Find(model[t].name);
    if (v == nullptr || v->kind() != ValueKind::kTensor) {
      wrong += numel;
      continue;
    }
    const Tensor& full = v->as_tensor();
    if (full.dtype() != DType::kFloat32 || !full.is_contiguous() ||
        full.shape() != model[t].shape) {
      wrong += numel;
      continue;
    }
    wrong += WrongIn({full.data<float>(), nullptr, numel, static_cast<int64_t>(t)}, step);
  }
  return wrong;
}

absl::Status WriteSoakFile(const std::vector<SafetensorsTensorSpec>& model, int64_t step,
                           const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (size_t t = 0; t < model.size(); ++t) {
    SDRT_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty(model[t].shape, DType::kFloat32));
    float* p = full.data<float>();
    for (int64_t i = 0; i < full.numel(); ++i) {
      p[i] = SoakValue(i, static_cast<int64_t>(t), step);
    }
    tensors.emplace_back(model[t].name, std::move(full));
  }
  return WriteSafetensors(path, tensors);
}

Resident ResidentMemory() {
  Resident r;
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return r;
  char text[4096] = {};
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return r;
  const auto kib = [&](const char* field) -> int64_t {
    const char* at = std::strstr(text, field);
    return at == nullptr ? -1 : std::strtoll(at + std::strlen(field), nullptr, 10) * 1024;
  };
  r.total = kib("VmRSS:");
  r.shared = kib("RssShmem:");
  return r;
}

}  // namespace sdrt::bench
