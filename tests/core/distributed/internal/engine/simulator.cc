#include "sdrt/tests/core/distributed/internal/engine/simulator.h"

#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/engine/pack.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt::test {

using internal::TransferMessage;
using internal::TransferPiece;
using internal::TransferPlan;
using internal::TransferTensor;
using internal::TransferTensorPlan;

absl::StatusOr<Tensor> Relayout(const Tensor& local, LocalLayout layout) {
  const int n = local.dim();
  if (layout == LocalLayout::kContiguous) return local.Clone();
  if (layout == LocalLayout::kTransposed) {
    IntVector reversed(local.shape().rbegin(), local.shape().rend());
    SDRT_ASSIGN_OR_RETURN(const Tensor storage, Tensor::Empty(reversed, local.dtype()));
    const IntVector contiguous = ContiguousStrides(reversed);
    IntVector strides(n);
    for (int d = 0; d < n; ++d) strides[d] = contiguous[n - 1 - d];
    SDRT_ASSIGN_OR_RETURN(
        Tensor view, Tensor::FromStorage(storage.storage(), local.dtype(), local.shape(), strides));
    SDRT_RETURN_IF_ERROR(view.CopyFrom(local));
    return view;
  }
  IntVector bigger = local.shape();
  for (int64_t& size : bigger) size += 3;
  Tensor view = HashBytes(bigger, local.dtype(), /*seed=*/99);
  for (int d = 0; d < n; ++d) {
    SDRT_ASSIGN_OR_RETURN(view, view.Narrow(d, 1, local.size(d)));
  }
  SDRT_RETURN_IF_ERROR(view.CopyFrom(local));
  return view;
}

Tensor FloatsOf(const IntVector& shape, DType dtype, const std::vector<double>& values) {
  Tensor t = *Tensor::Empty(shape, dtype);
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < t.numel(); ++i) {
    const float f = static_cast<float>(values[i]);
    if (dtype == DType::kFloat64) t.data<double>()[i] = values[i];
    if (dtype == DType::kFloat32) t.data<float>()[i] = f;
    if (dtype == DType::kBFloat16) t.data<uint16_t>()[i] = internal::FloatToBFloat16(f);
    if (dtype == DType::kFloat16) t.data<uint16_t>()[i] = internal::FloatToFloat16(f);
  }
  return t;
}

Tensor SmallIntegers(const IntVector& shape, DType dtype, int64_t seed) {
  int64_t n = 1;
  for (int64_t size : shape) n *= size;
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<double>((7 * i + seed) % 31 - 15);
  return FloatsOf(shape, dtype, values);
}

absl::StatusOr<RankLocals> PieceLocals(const Tensor& full, const TransferTensor& tensor,
                                       bool source) {
  const internal::TransferLayout& layout = source ? tensor.source : tensor.destination;
  RankLocals locals;
  if (layout.mesh != nullptr) {
    for (int64_t rank : layout.mesh->ranks()) {
      SDRT_ASSIGN_OR_RETURN(const DTensor piece,
                            DistributeTensor(full, layout.mesh, layout.placements, rank));
      locals[rank].push_back(piece.local());
    }
    return locals;
  }
  for (const internal::TransferBox& box : layout.boxes) {
    bool empty = false;
    for (int64_t size : box.sizes) empty = empty || size == 0;
    Tensor piece;
    if (empty) {
      SDRT_ASSIGN_OR_RETURN(piece, Tensor::Empty(box.sizes, full.dtype()));
    } else {
      piece = full;
      for (int d = 0; d < full.dim(); ++d) {
        SDRT_ASSIGN_OR_RETURN(piece, piece.Narrow(d, box.offsets[d], box.sizes[d]));
      }
      SDRT_ASSIGN_OR_RETURN(piece, piece.Clone());
    }
    locals[box.rank].push_back(std::move(piece));
  }
  return locals;
}

absl::Status SimulateReshard(const TransferPlan& plan, const std::vector<RankLocals>& sources,
                             std::vector<RankLocals>& destinations) {
  if (sources.size() != plan.tensors.size()) {
    return absl::InvalidArgumentError("SimulateReshard: one RankLocals per tensor");
  }
  destinations.resize(plan.tensors.size());
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    RankLocals given;
    for (const TransferPiece& piece : plan.tensors[t].destination()) {
      if (destinations[t].count(piece.rank) > 0) continue;
      SDRT_ASSIGN_OR_RETURN(Tensor local, Tensor::Empty(piece.local_shape,
                                                        plan.tensors[t].destination_dtype()));
      given[piece.rank].push_back(std::move(local));
    }
    for (auto& [rank, locals] : given) destinations[t][rank] = std::move(locals);
  }
  // The direct messages, then the fan-out forwards (from the relays' destinations).
  for (const bool forward : {false, true}) {
    for (size_t t = 0; t < plan.tensors.size(); ++t) {
      for (const TransferMessage& message : plan.tensors[t].messages()) {
        if (message.forward != forward) continue;
        const RankLocals& held = forward ? destinations[t] : sources[t];
        const auto from = held.find(message.source_rank);
        if (from == held.end()) {
          return absl::InvalidArgumentError(
              absl::StrCat("SimulateReshard: rank ", message.source_rank, " has no locals"));
        }
        SDRT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> buffer, Storage::AllocateCpu(message.bytes));
        SDRT_RETURN_IF_ERROR(
            internal::PackMessage(plan.tensors[t], message, from->second, buffer, 0));
        // "Sent": the destination rank now owns the buffer.
        const std::shared_ptr<Storage> received = std::move(buffer);
        SDRT_RETURN_IF_ERROR(internal::UnpackMessage(plan.tensors[t], message, received, 0,
                                                     destinations[t][message.destination_rank]));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

bool Holds(const TransferPiece& piece, IntSpan index) {
  for (size_t d = 0; d < index.size(); ++d) {
    bool in = false;
    for (const internal::IndexRun& r : piece.runs[d]) {
      in = in || (index[d] >= r.global && index[d] < r.global + r.length);
    }
    if (!in) return false;
  }
  return true;
}

}  // namespace

int64_t BruteForceOptimumBytes(const TransferTensorPlan& tensor) {
  int64_t missing = 0;
  const size_t ndim = tensor.shape.size();
  for (const TransferPiece& dst : tensor.destination()) {
    std::vector<std::vector<int64_t>> owned(ndim);
    bool empty = false;
    for (size_t d = 0; d < ndim; ++d) {
      for (const internal::IndexRun& r : dst.runs[d]) {
        for (int64_t i = 0; i < r.length; ++i) owned[d].push_back(r.global + i);
      }
      empty = empty || owned[d].empty();
    }
    if (empty) continue;
    std::vector<size_t> pick(ndim, 0);
    IntVector index(ndim);
    while (true) {
      for (size_t d = 0; d < ndim; ++d) index[d] = owned[d][pick[d]];
      // Each Partial contribution not held on the destination's rank travels.
      for (int64_t c = 0; c < tensor.contributions(); ++c) {
        bool local = false;
        for (const TransferPiece& src : tensor.source()) {
          local = local || (src.contribution == c && src.rank == dst.rank && Holds(src, index));
        }
        missing += local ? 0 : 1;
      }
      size_t d = ndim;
      for (; d > 0; --d) {
        if (++pick[d - 1] < owned[d - 1].size()) break;
        pick[d - 1] = 0;
      }
      if (d == 0) break;
    }
  }
  return missing * ElementBits(tensor.dtype) / 8;
}

int64_t BruteForceInternodeBytes(const TransferTensorPlan& tensor,
                                 const std::vector<int64_t>& node_of_rank, bool* duplicates) {
  auto node_of = [&](int64_t rank) {
    return rank < static_cast<int64_t>(node_of_rank.size()) ? node_of_rank[rank] : -1 - rank;
  };
  const size_t ndim = tensor.shape.size();
  int64_t numel = 1;
  for (int64_t s : tensor.shape) numel *= s;
  int64_t missing = 0;
  IntVector index(ndim);
  for (int64_t linear = 0; linear < numel; ++linear) {
    int64_t rest = linear;
    for (size_t d = ndim; d > 0; --d) {
      index[d - 1] = rest % tensor.shape[d - 1];
      rest /= tensor.shape[d - 1];
    }
    std::set<int64_t> needing, holding, ranks;
    for (const TransferPiece& dst : tensor.destination()) {
      if (!Holds(dst, index)) continue;
      needing.insert(node_of(dst.rank));
      if (!ranks.insert(dst.rank).second && duplicates != nullptr) *duplicates = true;
    }
    for (const TransferPiece& src : tensor.source()) {
      if (Holds(src, index)) holding.insert(node_of(src.rank));
    }
    for (int64_t node : needing) missing += holding.count(node) == 0 ? 1 : 0;
  }
  return missing * ElementBits(tensor.dtype) / 8;
}

namespace {

// The plan of one rank keeps exactly the messages of the plan of every rank that it sends
// or receives, with the same stats; checked for the first rank of each side of tensor 0.
absl::Status CheckRankPlans(const std::vector<TransferTensor>& tensors, const TransferPlan& every,
                            const std::vector<int64_t>& node_of_rank) {
  if (every.tensors.empty()) return absl::OkStatus();
  std::vector<int64_t> ranks;
  for (const auto* side : {&every.tensors[0].source(), &every.tensors[0].destination()}) {
    if (!side->empty()) ranks.push_back(side->front().rank);
  }
  for (int64_t rank : ranks) {
    internal::TransferPlanOptions options;
    options.rank = rank;
    options.node_of_rank = node_of_rank;
    SDRT_ASSIGN_OR_RETURN(const TransferPlan mine, internal::PlanTransfer(tensors, options));
    const internal::TransferPlanStats &a = mine.stats, &b = every.stats;
    if (a.wire_bytes != b.wire_bytes || a.self_bytes != b.self_bytes ||
        a.max_sent_bytes != b.max_sent_bytes || a.max_received_bytes != b.max_received_bytes ||
        a.messages != b.messages || mine.rank != rank) {
      return absl::InternalError(absl::StrCat("the plan of rank ", rank, " has other stats"));
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      std::vector<const TransferMessage*> want;
      for (const TransferMessage& m : every.tensors[t].messages()) {
        if (m.source_rank == rank || m.destination_rank == rank) want.push_back(&m);
      }
      const std::vector<TransferMessage>& got = mine.tensors[t].messages();
      bool same = got.size() == want.size();
      for (size_t i = 0; same && i < got.size(); ++i) {
        same = got[i].source_rank == want[i]->source_rank &&
               got[i].destination_rank == want[i]->destination_rank &&
               got[i].bytes == want[i]->bytes && got[i].moves.size() == want[i]->moves.size();
        // The same boxes between the same pieces (the rank's plan keeps fewer pieces, so
        // its indices differ): (rank, local) of each end.
        for (size_t k = 0; same && k < got[i].moves.size(); ++k) {
          const internal::TransferMove &a = got[i].moves[k], &b = want[i]->moves[k];
          const auto ends = [&](const internal::TransferTensorPlan& p,
                                const internal::TransferMove& m) {
            const TransferPiece& from =
                m.forward ? p.destination()[m.source] : p.source()[m.source];
            const TransferPiece& to = p.destination()[m.destination];
            return std::make_tuple(from.rank, from.local, to.rank, to.local, m.begin, m.end);
          };
          same = ends(mine.tensors[t], a) == ends(every.tensors[t], b);
        }
      }
      if (!same) {
        return absl::InternalError(absl::StrCat("tensor '", tensors[t].name, "': the plan of rank ",
                                                rank, " keeps other messages than its share"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TransferPlan> ReshardAndCheck(const std::vector<TransferTensor>& tensors,
                                            const std::vector<Tensor>& fulls, LocalLayout layout,
                                            const std::vector<int64_t>& node_of_rank) {
  internal::TransferPlanOptions options;
  options.node_of_rank = node_of_rank;
  SDRT_ASSIGN_OR_RETURN(TransferPlan plan, internal::PlanTransfer(tensors, options));
  std::vector<RankLocals> sources, destinations;
  for (size_t t = 0; t < tensors.size(); ++t) {
    SDRT_ASSIGN_OR_RETURN(RankLocals locals, PieceLocals(fulls[t], tensors[t], true));
    for (auto& [rank, list] : locals) {
      for (Tensor& local : list) {
        SDRT_ASSIGN_OR_RETURN(local, Relayout(local, layout));
      }
    }
    sources.push_back(std::move(locals));
  }
  SDRT_RETURN_IF_ERROR(SimulateReshard(plan, sources, destinations));
  int64_t needed = 0, brute = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    SDRT_ASSIGN_OR_RETURN(const RankLocals expected, PieceLocals(fulls[t], tensors[t], false));
    for (const auto& [rank, list] : expected) {
      for (size_t i = 0; i < list.size(); ++i) {
        SDRT_ASSIGN_OR_RETURN(const Tensor got, destinations[t][rank][i].Contiguous());
        needed += list[i].nbytes() * plan.tensors[t].contributions();
        if (got.shape() != list[i].shape() ||
            (list[i].nbytes() > 0 &&  // an empty tensor may have no data pointer
             std::memcmp(got.data_ptr(), list[i].data_ptr(), list[i].nbytes()) != 0)) {
          return absl::InternalError(absl::StrCat("tensor '", tensors[t].name, "' rank ", rank,
                                                  " local ", i, ": got ", got.ToString(),
                                                  ", not the bytes of ", list[i].ToString()));
        }
      }
    }
    brute += BruteForceOptimumBytes(plan.tensors[t]);
  }
  const internal::TransferPlanStats& s = plan.stats;
  SDRT_RETURN_IF_ERROR(CheckRankPlans(tensors, plan, node_of_rank));
  // The counted messages are the every-rank plan's (one per forward, contribution and pair;
  // no collectives without the options that allow them).
  int64_t messages = 0, self_messages = 0;
  for (const internal::TransferTensorPlan& t : plan.tensors) {
    for (const TransferMessage& m : t.messages()) {
      ++(m.source_rank == m.destination_rank ? self_messages : messages);
    }
  }
  if (s.messages != messages || s.self_messages != self_messages) {
    return absl::InternalError(absl::StrCat("messages ", s.messages, " and ", s.self_messages,
                                            " to self, the plan's are ", messages, " and ",
                                            self_messages));
  }
  if (!node_of_rank.empty()) {
    int64_t internode = 0;
    bool partial = false, duplicates = false;
    for (const internal::TransferTensorPlan& t : plan.tensors) {
      internode += BruteForceInternodeBytes(t, node_of_rank, &duplicates);
      partial = partial || t.contributions() > 1;
    }
    if (!partial && (duplicates ? s.internode_bytes < internode : s.internode_bytes != internode)) {
      return absl::InternalError(
          absl::StrCat("internode bytes ", s.internode_bytes, " vs brute force ", internode));
    }
  }
  if (s.wire_bytes + s.self_bytes != needed || s.wire_bytes != s.optimum_bytes ||
      s.optimum_bytes != brute) {
    return absl::InternalError(absl::StrCat("bytes: wire ", s.wire_bytes, " + self ", s.self_bytes,
                                            " vs needed ", needed, "; optimum ", s.optimum_bytes,
                                            " vs brute force ", brute));
  }
  return plan;
}

}  // namespace sdrt::test
