// The new local tensors of one LoadStateDict call (fresh DTensor locals and tensors that
// replace a leaf) come from one allocation, laid out in the order of their bytes in the
// checkpoint: a piece that follows the previous piece in its file without a gap also
// follows it in memory, so a read that covers several such pieces is read straight into
// them, one pread and no staging copy (load_state_dict.cc's direct reads). One allocation
// instead of one per tensor also removes the per-tensor malloc, and on the CPU an arena of
// 2 MiB or more starts on a 2 MiB boundary (Storage::AllocateCpu).
//
// The tensors share the arena's storage: its memory is released when the last of them is
// gone (docs/ARCHITECTURE.md, loading, says so to users). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_FRESH_ARENA_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_FRESH_ARENA_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// Offsets of a fresh piece in the arena start on this many bytes unless the piece follows
// its predecessor (in the file and so in memory).
inline constexpr int64_t kFreshAlignment = 64;

// One new tensor to place. `bytes` its size, `alignment` the byte multiple its start must
// be (ElementAlignment of its dtype, >= 1). When its bytes are one contiguous range of a
// checkpoint file, `file` >= 0 and [begin, end) that range (end - begin == bytes);
// otherwise file < 0.
struct FreshPiece {
  int64_t bytes = 0;
  int64_t alignment = 1;
  int file = -1;
  int64_t begin = 0;
  int64_t end = 0;
};

struct FreshLayout {
  std::vector<int64_t> offsets;  // per piece, its byte offset in the arena
  int64_t bytes = 0;             // the arena's size
};

// Places `pieces` in order: piece i goes right after piece i - 1 when both are contiguous
// ranges of the same file, piece i begins where piece i - 1 ends, and that position is a
// multiple of piece i's alignment; else at the next multiple of kFreshAlignment that is
// also a multiple of its alignment. InvalidArgument for a negative size, an alignment
// outside [1, 16], or a contiguous piece whose range is not `bytes` long; ResourceExhausted
// when the total overflows int64.
absl::StatusOr<FreshLayout> LayOutFresh(absl::Span<const FreshPiece> pieces);

// Allocates the arena of `layout` on `device` (CPU, or CUDA through the registered device
// backend) and replaces each `dests[i]` (a meta tensor of the piece's shape and dtype) by a
// contiguous view at layout.offsets[i]. dests.size() must equal layout.offsets.size().
// ResourceExhausted when the allocation fails (the size and device in the message);
// FailedPrecondition for CUDA without a backend.
absl::Status AllocateFresh(const FreshLayout& layout, Device device,
                           absl::Span<Tensor* const> dests);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_FRESH_ARENA_H_
