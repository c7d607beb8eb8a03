#include "sdrt/core/distributed/internal/engine/pack.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/engine/reduce.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/backend/fp8_box.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// The address of the box at element `offset` (ContiguousBoxOffset, -1: none) of a checked
// local; null when there is none or the local has no `host` address.
char* BoxAddress(int64_t offset, const LocalRef& ref, DType dtype) {
  if (offset < 0 || ref.host == nullptr) return nullptr;
  return ref.host + offset * (ElementBits(dtype) / 8);
}

// Converts `count` elements of `from_dtype` at `from` into `to_dtype` at `to`, both on
// `device`: on the CPU by ConvertFloats, else by the device's backend on `stream` (blocking
// unless `non_blocking`).
absl::Status Convert(void* to, DType to_dtype, const void* from, DType from_dtype, int64_t count,
                     Device device, bool non_blocking, StreamHandle stream) {
  if (!device.is_cpu()) {
    SDRT_ASSIGN_OR_RETURN(DeviceBackend* const backend, GetDeviceBackend(device.type));
    return backend->ConvertFloats(to, to_dtype, from, from_dtype, count, device, stream,
                                  non_blocking);
  }
  if (!ConvertFloats(from, from_dtype, to, to_dtype, count)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no cast between ", DTypeName(from_dtype), " and ", DTypeName(to_dtype)));
  }
  return absl::OkStatus();
}

// The box of `move` (of `shape`, the elements `runs` name) converted between `local` (checked:
// of `side`, its piece's shape) and the bytes of `buffer` from `at` (of `wire`, the buffer's
// dtype): into the local when `to_local`, else out of it. Straight between the two when the
// box is one dense range of a contiguous local on the buffer's device (one pass, as the copy
// of an uncast box); else through a temporary of the box in `side` on the buffer's device,
// copied from or to the local as an uncast box is (CopyRuns: a strided or cross-device copy),
// and then blocking whatever `non_blocking` says, since the temporary goes on return.
absl::Status CastBox(DType wire, const TransferMove& move, const Tensor& local, DType side,
                     IntSpan shape, const ShardRuns& runs, const std::shared_ptr<Storage>& buffer,
                     int64_t at, bool to_local, bool non_blocking, StreamHandle stream) {
  const Device device = buffer->device();
  char* const slot = static_cast<char*>(buffer->data()) + at;
  const int64_t count = move.bytes / (ElementBits(wire) / 8);
  const int64_t box = to_local ? move.destination_offset : move.source_offset;
  if (box >= 0 && local.device() == device && local.is_contiguous()) {
    char* const mine = static_cast<char*>(local.data_ptr()) + box * (ElementBits(side) / 8);
    return to_local ? Convert(mine, side, slot, wire, count, device, non_blocking, stream)
                    : Convert(slot, wire, mine, side, count, device, non_blocking, stream);
  }
  SDRT_ASSIGN_OR_RETURN(const Tensor temporary, Tensor::Empty(shape, side, device));
  if (to_local) {
    SDRT_RETURN_IF_ERROR(
        Convert(temporary.data_ptr(), side, slot, wire, count, device, false, stream));
    return CopyRuns(temporary, move.begin, local, runs, /*to_local=*/true, false, stream);
  }
  SDRT_RETURN_IF_ERROR(
      CopyRuns(temporary, move.begin, local, runs, /*to_local=*/false, false, stream));
  return Convert(slot, wire, temporary.data_ptr(), side, count, device, false, stream);
}

// The codes of the box of `move` (of `shape`) of `local` (checked: of `side`, its piece's
// shape) into `buffer` from `at`, on the buffer's device (RunFp8Box): straight from the local
// when it is contiguous on that device and the box is one dense range of it (whole rows, or
// part of one) or rows of a 2-D local (a column cut), else through a temporary of the box
// on that device (then blocking whatever `non_blocking` says).
absl::Status QuantizeOut(const TransferTensorPlan& tp, const TransferMove& move,
                         const Tensor& local, DType side, IntSpan shape, const ShardRuns& runs,
                         const BoxScales& scales, const std::shared_ptr<Storage>& buffer,
                         int64_t at, bool non_blocking, StreamHandle stream) {
  const Device device = buffer->device();
  if (scales.tile > 0 && shape.size() != 2) {
    return absl::InvalidArgumentError("block scales are for 2-D tensors");
  }
  int64_t count = 1;
  for (int64_t n : shape) count *= n;
  const bool two_d = shape.size() == 2;
  const int64_t elem = ElementBits(side) / 8;
  const bool here = local.device() == device && local.is_contiguous();
  const char* from = nullptr;
  int64_t row_stride = two_d ? shape[1] : count;
  if (here && move.source_offset >= 0) {
    from = static_cast<const char*>(local.data_ptr()) + move.source_offset * elem;
  } else if (here && two_d && local.dim() == 2 && runs.size() == 2 && runs[0].size() == 1 &&
             runs[1].size() == 1) {
    row_stride = local.size(1);
    from = static_cast<const char*>(local.data_ptr()) +
           (runs[0][0].local * row_stride + runs[1][0].local) * elem;
  }
  Tensor temporary;
  if (from == nullptr) {
    SDRT_ASSIGN_OR_RETURN(temporary, Tensor::Empty(shape, side, device));
    SDRT_RETURN_IF_ERROR(
        CopyRuns(temporary, move.begin, local, runs, /*to_local=*/false, false, stream));
    from = static_cast<const char*>(temporary.data_ptr());
    row_stride = two_d ? shape[1] : count;
  }
  Fp8BoxOp op;
  op.kind = Fp8BoxOp::Kind::kQuantize;
  op.src = from;
  op.src_dtype = side;
  op.dst = static_cast<char*>(buffer->data()) + at;
  op.dst_dtype = tp.dtype;
  op.scales = scales.scales;
  op.rows = two_d ? shape[0] : 1;
  op.cols = two_d ? shape[1] : count;
  op.src_row_stride = row_stride;
  if (scales.tile > 0) {
    op.row0 = move.begin[0];
    op.col0 = move.begin[1];
  }
  op.tile = scales.tile;
  op.grid_cols = scales.grid_cols;
  op.grid_entries = scales.grid_entries;
  return RunFp8Box(op, device, stream, non_blocking && !temporary.defined());
}

// Copies every move of `message` between `buffer` and `locals`: into the locals when
// `to_local` (destination side), else into the buffer (source side), quantized with
// `scales` when given (source side).
absl::Status CopyMessage(const TransferTensorPlan& tp, const TransferMessage& message,
                         LocalRefs locals, const std::shared_ptr<Storage>& buffer, int64_t offset,
                         bool to_local, bool non_blocking, StreamHandle stream,
                         const BoxScales* scales = nullptr) {
  // The text of an error only: a message of many small tensors is copied per call.
  const auto where = [&] {
    return absl::StrCat("reshard of tensor '", tp.name, "', message from rank ",
                        message.source_rank, " to rank ", message.destination_rank);
  };
  if (buffer == nullptr || offset < 0 || offset > buffer->nbytes() - message.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": ", message.bytes, " bytes at offset ", offset,
                     " do not fit the buffer of ", buffer == nullptr ? 0 : buffer->nbytes()));
  }
  const std::vector<TransferPiece>& pieces =
      to_local || message.forward ? tp.destination() : tp.source();
  // The locals' dtype: another than the buffer's on the side that casts.
  const DType side = to_local || message.forward ? tp.destination_dtype() : tp.source_dtype();
  const bool host_buffer = buffer->device().is_cpu() && ElementBits(tp.dtype) % 8 == 0;
  int64_t at = offset;
  IntVector shape;
  for (const TransferMove& move : message.moves) {
    const int index = to_local ? move.destination : move.source;
    if (index < 0 || index >= static_cast<int>(pieces.size())) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": no piece ", index));
    }
    const TransferPiece& piece = pieces[index];
    if (piece.local >= static_cast<int>(locals.size())) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": rank ", piece.rank, " gave ",
                                                     locals.size(), " locals, local ", piece.local,
                                                     " is needed"));
    }
    const LocalRef& ref = locals[piece.local];
    if (scales != nullptr && !to_local && !message.forward && move.bytes > 0) {
      // FP8 codes made on the sender, with the scales of the box's tiles.
      if (ref.tensor == nullptr || !ref.tensor->defined() || ref.tensor->dtype() != side ||
          ref.tensor->shape() != piece.local_shape) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": local ", piece.local, " of rank ", piece.rank, " is not a ",
                         DTypeName(side), ShapeToString(piece.local_shape)));
      }
      shape.resize(move.begin.size());
      for (size_t d = 0; d < shape.size(); ++d) shape[d] = move.end[d] - move.begin[d];
      const absl::Status q = QuantizeOut(tp, move, *ref.tensor, side, shape,
                                         ClipRuns(piece.runs, move.begin, move.end), *scales,
                                         buffer, at, non_blocking, stream);
      if (!q.ok()) return absl::Status(q.code(), absl::StrCat(where(), ": ", q.message()));
      at += move.bytes;
      continue;
    }
    if (!(to_local && message.contribution > 0) && host_buffer && move.bytes > 0) {
      // The common box (a Shard or Replicate piece of a checked dense local): one memcpy, or
      // for a cast one conversion between the local and the buffer.
      const int64_t box = to_local ? move.destination_offset : move.source_offset;
      if (char* const mine = BoxAddress(box, ref, side)) {
        char* const slot = static_cast<char*>(buffer->data()) + at;
        if (side == tp.dtype) {
          std::memcpy(to_local ? mine : slot, to_local ? slot : mine,
                      static_cast<size_t>(move.bytes));
        } else {
          const int64_t count = move.bytes / (ElementBits(tp.dtype) / 8);
          const absl::Status cast =
              to_local ? Convert(mine, side, slot, tp.dtype, count, Device::CPU(), false, nullptr)
                       : Convert(slot, tp.dtype, mine, side, count, Device::CPU(), false, nullptr);
          if (!cast.ok()) {
            return absl::Status(cast.code(), absl::StrCat(where(), ": ", cast.message()));
          }
        }
        at += move.bytes;
        continue;
      }
    }
    static const Tensor kNone;
    const Tensor& local = ref.tensor != nullptr ? *ref.tensor : kNone;
    if (!local.defined() || local.dtype() != side || local.shape() != piece.local_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": local ", piece.local, " of rank ", piece.rank, " is ",
                       local.defined() ? local.ToString() : "undefined", "; expected ",
                       DTypeName(side), ShapeToString(piece.local_shape)));
    }
    const bool host = host_buffer && local.device().is_cpu();
    shape.resize(move.begin.size());
    for (size_t d = 0; d < shape.size(); ++d) shape[d] = move.end[d] - move.begin[d];
    const ShardRuns runs = ClipRuns(piece.runs, move.begin, move.end);
    if (side != tp.dtype) {
      // A cast of a box the memcpy path above does not take (the planner casts no Partial
      // source).
      const absl::Status cast = CastBox(tp.dtype, move, local, side, shape, runs, buffer, at,
                                        to_local, non_blocking, stream);
      if (!cast.ok()) return absl::Status(cast.code(), absl::StrCat(where(), ": ", cast.message()));
    } else if (to_local && message.contribution > 0) {
      // A later Partial contribution: what the local holds, combined with the box, back.
      if (!buffer->device().is_cpu()) {
        return absl::UnimplementedError(
            absl::StrCat(where(), ": Partial contributions are reduced from CPU buffers only"));
      }
      // ReduceInto reads elements as their type: a box that follows a narrower dtype's in
      // the same message may sit at an offset the type cannot be read from, so such a box is
      // copied to aligned memory first.
      const char* const bytes = static_cast<const char*>(buffer->data()) + at;
      Tensor box;
      if (reinterpret_cast<uintptr_t>(bytes) % ElementAlignment(tp.dtype) == 0) {
        SDRT_ASSIGN_OR_RETURN(box, Tensor::AtByteOffset(buffer, at, tp.dtype, shape));
      } else {
        SDRT_ASSIGN_OR_RETURN(box, Tensor::Empty(shape, tp.dtype));
        if (move.bytes > 0) std::memcpy(box.data_ptr(), bytes, static_cast<size_t>(move.bytes));
      }
      SDRT_ASSIGN_OR_RETURN(const Tensor acc, Tensor::Empty(shape, tp.dtype));
      SDRT_RETURN_IF_ERROR(CopyRuns(acc, move.begin, local, runs, /*to_local=*/false));
      SDRT_RETURN_IF_ERROR(ReduceInto(acc, box, tp.reduce_op()));
      if (tp.reduce_op() == ReduceOp::kAvg && message.contribution == tp.contributions() - 1) {
        // The last contribution of these elements: the sum becomes the mean.
        SDRT_RETURN_IF_ERROR(DivideBy(acc, tp.contributions()));
      }
      SDRT_RETURN_IF_ERROR(CopyRuns(acc, move.begin, local, runs, /*to_local=*/true));
    } else if (host) {
      // Host to host: the box is a span of the buffer, no tensor made for it.
      const PackedBlock box{static_cast<char*>(buffer->data()) + at, shape};
      SDRT_RETURN_IF_ERROR(CopyRuns(box, move.begin, local, runs, to_local));
    } else {
      SDRT_ASSIGN_OR_RETURN(const Tensor box, Tensor::AtByteOffset(buffer, at, tp.dtype, shape));
      SDRT_RETURN_IF_ERROR(CopyRuns(box, move.begin, local, runs, to_local, non_blocking, stream));
    }
    at += move.bytes;
  }
  return absl::OkStatus();
}

// Unchecked refs of `locals` (every box through CopyRuns, after the checks).
absl::InlinedVector<LocalRef, 4> Refs(absl::Span<const Tensor> locals) {
  absl::InlinedVector<LocalRef, 4> refs;
  for (const Tensor& t : locals) refs.push_back({&t, nullptr});
  return refs;
}

}  // namespace

LocalRef CheckedRef(const Tensor& local) {
  LocalRef ref{&local, nullptr};
  if (local.device().is_cpu() && !IsSubByte(local.dtype()) && local.is_contiguous()) {
    ref.host = static_cast<char*>(local.data_ptr());
  }
  return ref;
}

absl::Status PackMessage(const TransferTensorPlan& tp, const TransferMessage& message,
                         LocalRefs locals, const std::shared_ptr<Storage>& buffer, int64_t offset,
                         bool non_blocking, StreamHandle stream, const BoxScales* scales) {
  return CopyMessage(tp, message, locals, buffer, offset, /*to_local=*/false, non_blocking, stream,
                     scales != nullptr && scales->scales != nullptr ? scales : nullptr);
}

absl::Status PackMessage(const TransferTensorPlan& tp, const TransferMessage& message,
                         absl::Span<const Tensor> locals, const std::shared_ptr<Storage>& buffer,
                         int64_t offset, bool non_blocking, StreamHandle stream) {
  const absl::InlinedVector<LocalRef, 4> refs = Refs(locals);
  return PackMessage(tp, message, refs, buffer, offset, non_blocking, stream);
}

absl::Status UnpackMessage(const TransferTensorPlan& tp, const TransferMessage& message,
                           const std::shared_ptr<Storage>& buffer, int64_t offset, LocalRefs locals,
                           bool non_blocking, StreamHandle stream) {
  return CopyMessage(tp, message, locals, buffer, offset, /*to_local=*/true, non_blocking, stream);
}

absl::Status UnpackMessage(const TransferTensorPlan& tp, const TransferMessage& message,
                           const std::shared_ptr<Storage>& buffer, int64_t offset,
                           absl::Span<const Tensor> locals, bool non_blocking,
                           StreamHandle stream) {
  const absl::InlinedVector<LocalRef, 4> refs = Refs(locals);
  return UnpackMessage(tp, message, buffer, offset, refs, non_blocking, stream);
}

int64_t ContiguousBoxOffset(const TransferPiece& piece, const TransferMove& move) {
  const size_t n = move.begin.size();
  if (piece.runs.size() != n || piece.local_shape.size() != n || move.end.size() != n) return -1;
  int64_t offset = 0;
  int64_t stride = 1;  // the contiguous local's stride of dim d
  int64_t dense = 1;   // the stride a dense box has on dim d
  for (size_t d = n; d-- > 0;) {
    if (piece.runs[d].size() != 1) return -1;
    const IndexRun& r = piece.runs[d][0];
    const int64_t first = r.local + (move.begin[d] - r.global);
    const int64_t length = move.end[d] - move.begin[d];
    if (move.begin[d] < r.global || move.end[d] > r.global + r.length || first < 0 || length < 0 ||
        first + length > piece.local_shape[d]) {
      return -1;
    }
    // A dim of one element (on the box or the local) is dense whatever its stride.
    if (length != 1 && piece.local_shape[d] != 1 && stride != dense) return -1;
    offset += first * stride;
    dense *= length;
    stride *= piece.local_shape[d];
  }
  return offset;
}

bool GoesDirect(const TransferTensorPlan& tp, const TransferMessage& message, bool to_local) {
  if (message.moves.size() != 1 || message.contribution > 0 || IsSubByte(tp.dtype) ||
      message.bytes < kDirectRangeBytes ||
      (to_local || message.forward ? tp.destination_dtype() : tp.source_dtype()) != tp.dtype) {
    return false;
  }
  return (to_local ? message.moves[0].destination_offset : message.moves[0].source_offset) >= 0;
}

char* DirectRange(const TransferTensorPlan& tp, const TransferMessage& message, LocalRefs locals,
                  bool to_local) {
  if (!GoesDirect(tp, message, to_local)) return nullptr;
  const TransferMove& move = message.moves[0];
  const std::vector<TransferPiece>& pieces =
      to_local || message.forward ? tp.destination() : tp.source();
  const int index = to_local ? move.destination : move.source;
  if (index < 0 || index >= static_cast<int>(pieces.size()) ||
      pieces[index].local >= static_cast<int>(locals.size())) {
    return nullptr;
  }
  return BoxAddress(to_local ? move.destination_offset : move.source_offset,
                    locals[pieces[index].local], tp.dtype);
}

bool DirectBoxes(const TransferTensorPlan& tp, const TransferMessage& message, LocalRefs from,
                 LocalRefs to, std::vector<BoxCopy>& out) {
  if (message.contribution > 0 || IsSubByte(tp.dtype) || tp.cast.has_value()) return false;
  const std::vector<TransferPiece>& sources = message.forward ? tp.destination() : tp.source();
  const std::vector<TransferPiece>& destinations = tp.destination();
  const size_t first = out.size();
  for (const TransferMove& move : message.moves) {
    if (move.source < 0 || move.source >= static_cast<int>(sources.size()) ||
        move.destination < 0 || move.destination >= static_cast<int>(destinations.size())) {
      out.resize(first);
      return false;
    }
    const int s = sources[move.source].local;
    const int d = destinations[move.destination].local;
    const char* const a = s < static_cast<int>(from.size())
                              ? BoxAddress(move.source_offset, from[s], tp.dtype)
                              : nullptr;
    char* const b = d < static_cast<int>(to.size())
                        ? BoxAddress(move.destination_offset, to[d], tp.dtype)
                        : nullptr;
    if (move.bytes > 0 && (a == nullptr || b == nullptr)) {
      out.resize(first);
      return false;
    }
    if (move.bytes > 0) out.push_back({a, b, move.bytes});
  }
  // A box written before a later box is read must not overlap it (a source and a
  // destination local may share memory); the buffer path copes with that.
  for (size_t i = first; i < out.size(); ++i) {
    for (size_t j = i + 1; j < out.size(); ++j) {
      if (out[i].to < out[j].from + out[j].bytes && out[j].from < out[i].to + out[i].bytes) {
        out.resize(first);
        return false;
      }
    }
  }
  return true;
}

bool BucketBoxes(const TransferTensorPlan& tp, const TransferMessage& message, LocalRefs locals,
                 char* slot, bool to_local, std::vector<BoxCopy>& out) {
  if ((to_local && message.contribution > 0) || IsSubByte(tp.dtype) ||
      (to_local || message.forward ? tp.destination_dtype() : tp.source_dtype()) != tp.dtype) {
    return false;
  }
  const std::vector<TransferPiece>& pieces =
      to_local || message.forward ? tp.destination() : tp.source();
  const size_t first = out.size();
  int64_t at = 0;
  for (const TransferMove& move : message.moves) {
    const int index = to_local ? move.destination : move.source;
    char* const mine = index >= 0 && index < static_cast<int>(pieces.size()) &&
                               pieces[index].local < static_cast<int>(locals.size())
                           ? BoxAddress(to_local ? move.destination_offset : move.source_offset,
                                        locals[pieces[index].local], tp.dtype)
                           : nullptr;
    if (move.bytes > 0 && mine == nullptr) {
      out.resize(first);
      return false;
    }
    if (move.bytes > 0) {
      out.push_back(to_local ? BoxCopy{slot + at, mine, move.bytes}
                             : BoxCopy{mine, slot + at, move.bytes});
    }
    at += move.bytes;
  }
  return true;
}

}  // namespace sdrt::internal
