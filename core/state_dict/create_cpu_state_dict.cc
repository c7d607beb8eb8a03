// CreateCpuStateDict (core/state_dict/state_dict_ops.h): the CPU staging state dict, from one
// arena.
//
// Two passes over the same tree in the engine's visiting order (internal::ForEachTensor
// walks it exactly as IterateStateDict does): the first gives every tensor that needs
// bytes a 256-byte aligned slot, the arena is then allocated (and pinned) once, and the
// second pass, through the engine, makes each tensor a contiguous view of its slot. A
// tensor that appears twice (tied weights) gets two slots, as PyTorch makes two buffers.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/core/state_dict/state_dict_ops.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// Whether `t` gets a slot in the arena: it has dims, elements and data
// (docs/SEMANTICS.md 6 rules 3-5).
bool NeedsSlot(const Tensor& t) { return t.dim() > 0 && t.numel() > 0 && t.data_ptr() != nullptr; }

int64_t AlignUp(int64_t n, int64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

class ArenaBuilder {
 public:
  explicit ArenaBuilder(const CreateCpuOptions& options) : options_(options) {}

  // Pass 1: a slot for `t` if it needs one.
  void Plan(const Tensor& t) {
    if (t.device().is_cuda() && pin_device_ == kCurrentCudaDevice) pin_device_ = t.device().index;
    if (!NeedsSlot(t)) return;
    const int64_t offset = AlignUp(total_bytes_, Storage::kDefaultAlignment);
    slots_.push_back(Slot{offset, t.nbytes()});
    total_bytes_ = offset + t.nbytes();
  }

  // One allocation for every slot (none when no tensor needs bytes).
  absl::Status Allocate() {
    if (total_bytes_ == 0) return absl::OkStatus();
    absl::StatusOr<std::shared_ptr<Storage>> arena;
    if (options_.share_memory) {
      arena = Storage::AllocateShared(total_bytes_);
      if (arena.ok() && options_.pin_memory) {
        HostRegistrationOptions registration;
        registration.device = pin_device_;
        // No registration boundary inside a tensor: each is copied in one piece.
        registration.unbroken_ranges.reserve(slots_.size());
        for (const Slot& slot : slots_) {
          registration.unbroken_ranges.emplace_back(slot.offset, slot.nbytes);
        }
        absl::Status pinned = PinStorage(**arena, kHostRegisterPortable, registration);
        if (!pinned.ok()) arena = pinned;
      }
    } else if (options_.pin_memory) {
      arena = PinnedHostAllocator::Allocate(total_bytes_, pin_device_);
    } else {
      arena = Storage::AllocateCpu(total_bytes_, Storage::kDefaultAlignment);
    }
    if (!arena.ok()) {
      return absl::Status(arena.status().code(),
                          absl::StrCat("CreateCpuStateDict: the ", total_bytes_, "-byte arena (",
                                       options_.pin_memory ? "pinned" : "not pinned", ", ",
                                       options_.share_memory ? "shared" : "not shared", ") for ",
                                       slots_.size(), " tensors: ", arena.status().message()));
    }
    arena_ = *std::move(arena);
    return absl::OkStatus();
  }

  // Pass 2: the CPU buffer standing for `t` (docs/SEMANTICS.md 6 tensor rules).
  absl::StatusOr<Tensor> Make(const Tensor& t) {
    if (t.dim() == 0) return Tensor::Zeros({}, t.dtype());
    if (!NeedsSlot(t)) return Zeros(t);
    if (next_slot_ >= slots_.size() || slots_[next_slot_].nbytes != t.nbytes()) {
      return absl::InternalError(
          absl::StrCat("CreateCpuStateDict: slot ", next_slot_, " does not match ", t.ToString()));
    }
    const Slot& slot = slots_[next_slot_++];
    return Tensor::AtByteOffset(arena_, slot.offset, t.dtype(), t.shape());
  }

 private:
  struct Slot {
    int64_t offset;  // bytes from the start of the arena, a multiple of 256
    int64_t nbytes;
  };

  // CPU zeros for a tensor without elements or without data; a meta tensor with elements
  // gets its own (zero-filled) shared segment when sharing, never pinned.
  absl::StatusOr<Tensor> Zeros(const Tensor& t) const {
    if (!options_.share_memory || t.numel() == 0) return Tensor::Zeros(t.shape(), t.dtype());
    SDRT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> shared, Storage::AllocateShared(t.nbytes()));
    return Tensor::FromStorage(std::move(shared), t.dtype(), t.shape());
  }

  const CreateCpuOptions& options_;
  // The context pinning runs in (the memory is portable, usable from every device): the
  // first CUDA tensor's device, else the calling thread's current device.
  int pin_device_ = kCurrentCudaDevice;
  std::vector<Slot> slots_;
  int64_t total_bytes_ = 0;
  std::shared_ptr<Storage> arena_;
  size_t next_slot_ = 0;
};

}  // namespace

absl::StatusOr<Map> CreateCpuStateDict(const Map& state_dict, const CreateCpuOptions& options) {
  ArenaBuilder arena(options);
  const auto plan = [&arena](const Tensor& t) { arena.Plan(t); };
  const absl::Status walked = internal::ForEachTensor(state_dict, plan);
  if (!walked.ok()) {
    return absl::Status(walked.code(), absl::StrCat("CreateCpuStateDict: ", walked.message()));
  }
  SDRT_RETURN_IF_ERROR(arena.Allocate());

  internal::IterateVisitors visitors;
  visitors.tensor = [&arena](const Tensor& t, const Value*) -> absl::StatusOr<Value> {
    SDRT_ASSIGN_OR_RETURN(Tensor out, arena.Make(t));
    return Value(std::move(out));
  };
  visitors.dtensor = [&arena](const DTensor& dt, const Value*) -> absl::StatusOr<Value> {
    SDRT_ASSIGN_OR_RETURN(Tensor local, arena.Make(dt.local()));
    SDRT_ASSIGN_OR_RETURN(DTensor out, dt.WithLocal(std::move(local)));
    return Value(std::move(out));
  };
  visitors.sharded = [&arena](const ShardedTensor& st, const Value*) -> absl::StatusOr<Value> {
    if (st.local_shards().empty()) return Value(st);
    std::vector<Tensor> tensors;
    for (const LocalShard& shard : st.local_shards()) {
      SDRT_ASSIGN_OR_RETURN(Tensor out, arena.Make(shard.tensor));
      tensors.push_back(std::move(out));
    }
    SDRT_ASSIGN_OR_RETURN(ShardedTensor out, internal::ShardedOnCpu(st, std::move(tensors)));
    return Value(std::move(out));
  };
  internal::IterateOptions iterate;
  iterate.type_check = false;
  absl::StatusOr<Map> out = internal::IterateStateDict(state_dict, visitors, nullptr, iterate);
  if (!out.ok()) {
    return absl::Status(out.status().code(),
                        absl::StrCat("CreateCpuStateDict: ", out.status().message()));
  }
  return out;
}

}  // namespace sdrt
