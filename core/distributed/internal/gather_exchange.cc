#include "sdrt/core/distributed/internal/gather_exchange.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/buckets.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// One piece of the bucket: item `item`'s k-th piece of rank `rank`.
struct PieceRef {
  size_t item = 0;
  int rank = 0;
  size_t k = 0;  // its index among the rank's pieces of the item (and in the item's sends)
  const GatherPiece* piece = nullptr;
  int64_t bytes = 0;
  // The byte offset of the piece in the full tensor when it goes straight there; -1 when
  // it travels packed.
  int64_t direct_at = -1;
  int64_t packed_at = 0;  // its offset in its rank's packed message
};

}  // namespace

bool CanExchangeBucket(const Communicator& comm, absl::Span<GatherItem* const> bucket) {
  if (!comm.device().is_cpu() || !comm.SupportsExchange()) return false;
  for (const GatherItem* item : bucket) {
    if (!item->target.is_cpu() || IsSubByte(item->dtype)) return false;
    for (const Tensor& t : item->sends) {
      if (!t.device().is_cpu()) return false;
    }
  }
  return true;
}

absl::Status GatherBucketByExchange(Communicator& comm, absl::Span<GatherItem* const> bucket,
                                    const std::vector<bool>& keeps, absl::Span<Tensor> fulls,
                                    CollectiveStats* stats) {
  const int size = comm.size();
  const int me = comm.rank();
  // Every piece in (rank, item, piece) order; each rank's packed ones laid out in order.
  std::vector<PieceRef> pieces;
  std::vector<int64_t> packed_bytes(static_cast<size_t>(size), 0);
  int64_t total = 0;
  for (int q = 0; q < size; ++q) {
    for (size_t i = 0; i < bucket.size(); ++i) {
      const GatherItem& item = *bucket[i];
      const absl::Span<const GatherPiece> of_q = item.layout->PiecesOf(q);
      for (size_t k = 0; k < of_q.size(); ++k) {
        PieceRef ref{i, q, k, &of_q[k]};
        SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(of_q[k].shape));
        SDRT_ASSIGN_OR_RETURN(ref.bytes, BytesForElements(item.dtype, numel));
        if (ref.bytes >= kDirectPieceBytes) {
          // The piece packs in its local order, which is its order in the full tensor only
          // when its local indices start at 0 on every dim.
          const int64_t at = ContiguousRangeOffset(item.global_shape, of_q[k].runs);
          const int64_t local_at = ContiguousRangeOffset(of_q[k].shape, of_q[k].runs, true);
          if (at >= 0 && local_at == 0) ref.direct_at = at * ElementAlignment(item.dtype);
        }
        if (ref.direct_at < 0) {
          ref.packed_at = packed_bytes[q];
          packed_bytes[q] += AlignUp(ref.bytes);
          total += AlignUp(ref.bytes);  // the padding travels too
        } else {
          total += ref.bytes;
        }
        pieces.push_back(ref);
      }
    }
  }
  // pieces of rank q: [rank_begin[q], rank_begin[q + 1]).
  std::vector<size_t> rank_begin(static_cast<size_t>(size) + 1, pieces.size());
  for (size_t j = pieces.size(); j-- > 0;) rank_begin[pieces[j].rank] = j;
  for (int q = size; q-- > 0;) rank_begin[q] = std::min(rank_begin[q], rank_begin[q + 1]);
  const auto of_rank = [&](int q) {
    return absl::MakeConstSpan(pieces).subspan(rank_begin[q], rank_begin[q + 1] - rank_begin[q]);
  };
  const bool keep = keeps[me];
  bool others_keep = false;
  for (int q = 0; q < size; ++q) others_keep = others_keep || (q != me && keeps[q]);

  // This rank's sends: its packed pieces in one buffer, its large ones from contiguous
  // locals (a strided local is made contiguous once).
  std::vector<Communicator::SendMessage> sends;
  std::vector<Communicator::ReceiveMessage> receives;
  Tensor packed;
  std::vector<Tensor> contiguous;  // kept alive until the exchange is done
  std::vector<std::pair<const void*, int64_t>> direct_sends;
  if (others_keep) {
    SDRT_ASSIGN_OR_RETURN(packed, Tensor::Empty({packed_bytes[me]}, DType::kUInt8));
    for (const PieceRef& p : of_rank(me)) {
      const Tensor& local = bucket[p.item]->sends[p.k];
      if (p.direct_at < 0 && local.is_contiguous()) {  // the common small piece: its bytes
        std::memcpy(static_cast<char*>(packed.data_ptr()) + p.packed_at, local.data_ptr(),
                    static_cast<size_t>(p.bytes));
        continue;
      }
      if (p.direct_at < 0) {
        const IntVector origin(local.shape().size(), 0);
        const PackedBlock slot{static_cast<char*>(packed.data_ptr()) + p.packed_at, local.shape()};
        SDRT_RETURN_IF_ERROR(
            CopyRuns(local, origin, slot, BoxRuns(origin, local.shape()), /*to_local=*/true));
        continue;
      }
      if (local.is_contiguous()) {
        direct_sends.emplace_back(local.data_ptr(), p.bytes);
      } else {
        SDRT_ASSIGN_OR_RETURN(Tensor dense, local.Contiguous());
        direct_sends.emplace_back(dense.data_ptr(), p.bytes);
        contiguous.push_back(std::move(dense));
      }
    }
    // Peers in ring order from this rank's next, so the ranks do not all start on rank 0.
    for (int step = 1; step < size; ++step) {
      const int q = (me + step) % size;
      if (!keeps[q]) continue;
      if (packed_bytes[me] > 0) sends.push_back({q, packed.data_ptr(), packed_bytes[me]});
      for (const auto& [data, bytes] : direct_sends) sends.push_back({q, data, bytes});
    }
  }

  // This rank's receives.
  Tensor received;
  std::vector<int64_t> base(static_cast<size_t>(size), 0);
  if (keep) {
    int64_t received_bytes = 0;
    for (int q = 0; q < size; ++q) {
      base[q] = received_bytes;
      if (q != me) received_bytes += packed_bytes[q];
    }
    SDRT_ASSIGN_OR_RETURN(received, Tensor::Empty({received_bytes}, DType::kUInt8));
    for (int step = 1; step < size; ++step) {
      const int q = (me + size - step) % size;  // the ring's other direction: who sends first
      if (packed_bytes[q] > 0) {
        receives.push_back({q, static_cast<char*>(received.data_ptr()) + base[q], packed_bytes[q]});
      }
      for (const PieceRef& p : of_rank(q)) {
        if (p.direct_at < 0) continue;
        receives.push_back(
            {q, static_cast<char*>(fulls[p.item].data_ptr()) + p.direct_at, p.bytes});
      }
    }
  }
  // This rank's own pieces are copied into place while the messages move.
  const auto own_pieces = [&]() -> absl::Status {
    if (!keep) return absl::OkStatus();
    for (const PieceRef& p : of_rank(me)) {
      const Tensor& full = fulls[p.item];
      const IntVector origin(full.shape().size(), 0);
      SDRT_RETURN_IF_ERROR(CopyRuns(full, origin, bucket[p.item]->sends[p.k], p.piece->runs,
                                    /*to_local=*/false));
    }
    return absl::OkStatus();
  };

  CountBucket(stats, total);
  SDRT_RETURN_IF_ERROR(comm.Exchange(sends, receives, own_pieces));
  if (!keep) return absl::OkStatus();
  for (const PieceRef& p : pieces) {
    if (p.rank == me || p.direct_at >= 0) continue;
    const Tensor& full = fulls[p.item];
    const IntVector origin(full.shape().size(), 0);
    const PackedBlock slot{static_cast<char*>(received.data_ptr()) + base[p.rank] + p.packed_at,
                           p.piece->shape};
    SDRT_RETURN_IF_ERROR(CopyRuns(full, origin, slot, p.piece->runs, /*to_local=*/false));
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
