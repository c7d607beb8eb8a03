// Packing of reshard messages (plan.h): the boxes of one message copied from a
// source rank's local tensors into one contiguous byte buffer, and from such a buffer into
// a destination rank's local tensors. The same code serves the executor (a buffer per
// peer, sent and received by the communicator) and the one-process simulator of the
// tests. Not public API.
//
// Buffer layout: the message's moves in order, each a row-major tensor of its box's shape
// (end - begin per dim) starting where the previous one ended (every box is a whole number
// of bytes, also for sub-byte dtypes); message.bytes in all.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PACK_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PACK_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// One local tensor as the executor sees it, by pointer (it copies no tensor).
struct LocalRef {
  const Tensor* tensor = nullptr;  // null: none
  // Set only for a local checked against its piece (dtype, shape, device), by CheckedRef:
  // its first byte when it is a contiguous CPU tensor of a whole-byte dtype with data, so
  // that a box at a ContiguousBoxOffset is copied without reading the tensor again.
  char* host = nullptr;
};
// A rank's locals of one plan tensor, indexed by TransferPiece::local.
using LocalRefs = absl::Span<const LocalRef>;

// The ref of `local`, which the caller has checked against its piece: `host` set where it
// applies.
LocalRef CheckedRef(const Tensor& local);

// The scales a sender makes FP8 codes with (core/distributed/internal/mapping/quantize.h):
// row-major [ceil(rows / tile), grid_cols] float32 scales of a 2-D tensor's tiles (as
// stored: e8m0 ones widened), or one (`tile` 0) for the whole tensor. Owned by the caller.
struct BoxScales {
  const float* scales = nullptr;  // on the buffers' device
  int64_t tile = 0;
  int64_t grid_cols = 1;
  int64_t grid_entries = 1;  // the grid's entries in all
};

// Copies the boxes of `message` (a message of tensor `tp`) from `locals`, the source
// rank's local tensors of that tensor (a checked ref's box at the move's offset by one
// memcpy, without reading the tensor) (its destination locals for a forward message: the
// relay's) indexed by TransferPiece::local (any strides: transposed views and
// narrowed buffers are read element by element through their strides), into `buffer`
// from byte `offset`. `locals` and `buffer` may be on any device (Tensor::CopyFrom rules,
// on `stream`; blocking unless `non_blocking`, when the caller keeps both alive and
// unchanged until the stream has run). A cast (locals of another dtype than the plan's) is
// converted on the buffer's device (ConvertFloats on the CPU, DeviceBackend::ConvertFloats
// off it): straight from a box that is one dense range of a contiguous local on that device,
// else through a temporary of the box there, and then blocking. InvalidArgument naming the
// tensor, the ranks and the local when a local is missing, undefined, or not of the piece's
// dtype and shape, or when the buffer is shorter than offset + message.bytes; the errors of
// CopyRuns and of the conversion. With `scales` (a cast into float8 codes) each box is
// quantized with its tiles' scales instead of cast (on the buffer's device).
absl::Status PackMessage(const TransferTensorPlan& tp, const TransferMessage& message,
                         LocalRefs locals, const std::shared_ptr<Storage>& buffer, int64_t offset,
                         bool non_blocking = false, StreamHandle stream = nullptr,
                         const BoxScales* scales = nullptr);
absl::Status PackMessage(const TransferTensorPlan& tp, const TransferMessage& message,
                         absl::Span<const Tensor> locals, const std::shared_ptr<Storage>& buffer,
                         int64_t offset, bool non_blocking = false, StreamHandle stream = nullptr);

// The inverse: copies the boxes of `message` from `buffer` (from byte `offset`) into
// `locals`, the destination rank's local tensors of `tp` indexed by
// TransferPiece::local, in place (any strides without overlapping elements). A message of
// Partial contribution > 0 is reduced into the locals instead (ReduceInto with the plan's
// op, blocking, through a CPU temporary of each box; Unimplemented for a buffer off the
// CPU), so it must come after the contribution-0 messages of its tensor; for avg the
// message of the last contribution (contributions() - 1) also divides the sum by
// contributions() (DivideBy), so it must come after every other contribution's messages
// of its tensor to that rank (the plan's order). Same rules and errors otherwise.
absl::Status UnpackMessage(const TransferTensorPlan& tp, const TransferMessage& message,
                           const std::shared_ptr<Storage>& buffer, int64_t offset, LocalRefs locals,
                           bool non_blocking = false, StreamHandle stream = nullptr);
absl::Status UnpackMessage(const TransferTensorPlan& tp, const TransferMessage& message,
                           const std::shared_ptr<Storage>& buffer, int64_t offset,
                           absl::Span<const Tensor> locals, bool non_blocking = false,
                           StreamHandle stream = nullptr);

// One box copied with nothing in between: `bytes` bytes from `from` to `to`.
struct BoxCopy {
  const char* from = nullptr;
  char* to = nullptr;
  int64_t bytes = 0;
};

// A chunk from this rank to itself, without a buffer: when every box of `message` (of
// contribution 0, whole-byte dtype) is one dense range of a checked CPU local on both sides
// (`from`: the source locals, or the destination locals for a forward; `to`: the
// destination locals) and no box is written before a later box that overlaps it is read,
// appends each box's copy to `out`, to be made in order by memmove (safe for ranges that
// overlap, though the executor's callers keep sources and destinations apart: it copies them
// while the exchange's messages move), and returns true; else appends nothing and returns false,
// for the caller to pack and unpack through a buffer (which reports any error).
bool DirectBoxes(const TransferTensorPlan& tp, const TransferMessage& message, LocalRefs from,
                 LocalRefs to, std::vector<BoxCopy>& out);

// The boxes of `message` between `locals` and the host memory at `slot` that holds (or will
// hold) the message's packed bytes (the buffer layout above): into the locals when
// `to_local`, else out of them (the source locals, or the relay's destination locals for a
// forward). When the dtype is whole bytes, every box is one dense range of a checked
// contiguous CPU local (at its move's ContiguousBoxOffset) and, into the locals, the
// message is of contribution 0 (nothing to reduce): appends each box's copy to `out` and
// returns true; else appends nothing and returns false (the message goes through
// PackMessage / UnpackMessage, which report any error).
bool BucketBoxes(const TransferTensorPlan& tp, const TransferMessage& message, LocalRefs locals,
                 char* slot, bool to_local, std::vector<BoxCopy>& out);

// The offset, in elements, of box [move.begin, move.end) in a row-major contiguous local of
// `piece` (of piece.local_shape) when the piece is one run per dim and the box is one
// dense range of that local in the box's row-major order; -1 otherwise (also for a box
// outside the piece). ScheduleTransfer stores it in each chunk's moves, so that the copies
// of a call find a box's bytes with no arithmetic per dim.
int64_t ContiguousBoxOffset(const TransferPiece& piece, const TransferMove& move);

// Where a message goes on the wire without a buffer: when `message` is one box of at
// least kDirectRangeBytes, of contribution 0 and a whole-byte dtype, and that box is one
// dense range (at its move's offset) of a checked contiguous CPU local in `locals` (the destination
// locals when `to_local`, else the source ones, or the relay's destination locals for a forward),
// that range's first byte; null otherwise (the message is packed or unpacked through a bucket).
inline constexpr int64_t kDirectRangeBytes = int64_t{64} << 10;
// DirectRange's test without the locals: whether the message goes on the wire from its
// local (`to_local`: into it) when that local is row-major contiguous on the CPU.
bool GoesDirect(const TransferTensorPlan& tp, const TransferMessage& message, bool to_local);
char* DirectRange(const TransferTensorPlan& tp, const TransferMessage& message, LocalRefs locals,
                  bool to_local);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PACK_H_
