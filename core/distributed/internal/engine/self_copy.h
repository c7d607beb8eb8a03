// A chunk from a rank to itself copied box by box from its source locals straight into its
// destination locals: one CopyRuns per box, between a strided view of the source local and
// the destination local's runs, so a device-to-device box is one device copy (a pitched copy
// or the strided-copy kernel) instead of two through the send bucket (pack, then unpack).
// The device twin of DirectBoxes (pack.h), which copies dense host ranges by memmove; a
// chunk that neither takes goes through the send bucket. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SELF_COPY_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SELF_COPY_H_

#include "absl/status/status.h"
#include "sdrt/core/distributed/internal/engine/pack.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/tensor/device.h"

namespace sdrt::internal {

// Whether every box of `message` (a chunk of tensor `tp` from a rank to itself) can be
// copied that way on `device`: contribution 0 (nothing to reduce), no cast (both sides'
// locals in the plan's dtype), a whole-byte dtype, each box covered by its sending piece (a
// source piece, or a destination piece for a forward) in one run per dim, so that the box
// is one view of the sending local (a Narrow per dim), and both locals of every box on
// `device` (a CPU local goes through the bucket, whose copies to and from the host are
// the ones a device communicator stages). `from` and `to` as CopyToSelf's.
bool CopiesToSelfDirectly(const TransferTensorPlan& tp, const TransferMessage& message,
                          LocalRefs from, LocalRefs to, Device device);

// Copies the boxes of `message` (for which CopiesToSelfDirectly holds) from `from` (the
// source locals, or the destination locals for a forward) into `to` (the destination
// locals), indexed by TransferPiece::local: any strides and devices (Tensor::CopyFrom's
// rules), on `stream`, blocking unless `non_blocking` (then the caller keeps both sides
// alive and unchanged until the stream has run the copies). InvalidArgument naming the
// tensor when a local is missing or not of its piece's dtype and shape, or a box's sending
// piece does not hold it in one run per dim; CopyRuns' errors.
absl::Status CopyToSelf(const TransferTensorPlan& tp, const TransferMessage& message,
                        LocalRefs from, LocalRefs to, bool non_blocking, StreamHandle stream);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SELF_COPY_H_
