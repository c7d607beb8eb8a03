#include "sdrt/core/distributed/internal/gather_transfer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
#include "sdrt/core/distributed/internal/engine/route_cache.h"
#include "sdrt/core/distributed/internal/fresh_arena.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// The placements a move sees once the Partial mesh dims are reduced: Replicate there.
std::vector<Placement> Reduced(const std::vector<Placement>& placements) {
  std::vector<Placement> out = placements;
  for (Placement& p : out) {
    if (p.is_partial()) p = Placement::Replicate();
  }
  return out;
}

}  // namespace

void PutShardBoxes(const ShardedTensor& st, std::string* out) {
  PutU64(out, st.local_shards().size());
  for (const LocalShard& s : st.local_shards()) {
    PutU64(out, s.metadata.offsets.size());
    for (int64_t v : s.metadata.offsets) PutU64(out, static_cast<uint64_t>(v));
    for (int64_t v : s.metadata.sizes) PutU64(out, static_cast<uint64_t>(v));
  }
}

absl::Status GetShardBoxes(absl::string_view op, ByteReader& reader, int64_t q, IntSpan shape,
                           std::vector<TransferBox>& boxes) {
  const auto malformed = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": rank ", q, " sent a malformed shard box message"));
  };
  uint64_t count = 0;
  if (!reader.Bounded(reader.Remaining() / 8, &count)) return malformed();
  for (uint64_t k = 0; k < count; ++k) {
    uint64_t dims = 0;
    if (!reader.Bounded(kMaxTransferDims, &dims) || dims != shape.size()) return malformed();
    TransferBox box;
    box.rank = q;
    for (IntVector* v : {&box.offsets, &box.sizes}) {
      for (uint64_t d = 0; d < dims; ++d) {
        uint64_t x = 0;
        if (!reader.U64(&x)) return malformed();
        v->push_back(static_cast<int64_t>(x));
      }
    }
    for (size_t d = 0; d < shape.size(); ++d) {
      if (box.sizes[d] < 0 || box.offsets[d] < 0 ||
          (box.sizes[d] > 0 && box.offsets[d] > shape[d] - box.sizes[d])) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": a shard of rank ", q, " at offsets ", ShapeToString(box.offsets), " with sizes ",
            ShapeToString(box.sizes), " does not fit in ", ShapeToString(shape)));
      }
    }
    if (static_cast<int64_t>(boxes.size()) >= kMaxTransferBoxes) return malformed();
    boxes.push_back(std::move(box));
  }
  return absl::OkStatus();
}

const Tensor* GatherTransfer::ReducedOf(const Entry& e) const {
  if (e.dtensor == nullptr || run_.partial().empty()) return nullptr;
  const Tensor& reduced = run_.partial().reduced(e.partial);
  return reduced.defined() ? &reduced : nullptr;
}

GatherTransfer::GatherTransfer(absl::string_view op, Communicator& comm, std::vector<int> keepers,
                               int64_t bucket_bytes, std::function<void(int64_t, int64_t)> progress)
    : op_(op), comm_(comm), keepers_(std::move(keepers)) {
  if (keepers_.empty()) {  // every rank
    for (int r = 0; r < comm.size(); ++r) keepers_.push_back(r);
  }
  std::sort(keepers_.begin(), keepers_.end());
  keepers_.erase(std::unique(keepers_.begin(), keepers_.end()), keepers_.end());
  keepers_.erase(std::remove_if(keepers_.begin(), keepers_.end(),
                                [&](int r) { return r < 0 || r >= comm.size(); }),
                 keepers_.end());
  keeps_ = std::binary_search(keepers_.begin(), keepers_.end(), comm.rank());
  bucket_bytes_ = std::max<int64_t>(bucket_bytes, 1);
  options_.bucket_bytes = std::max<int64_t>(bucket_bytes, 64);
  options_.progress = std::move(progress);
}

size_t GatherTransfer::AddDTensor(absl::string_view path, const DTensor& d,
                                  DeviceMeshComm* mesh_comm, Device target) {
  Entry e;
  e.path = path;
  e.dtensor = &d;
  e.mesh_comm = mesh_comm;
  e.target = target;
  e.moves = NumShards(*d.mesh(), d.placements()) > 1;
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

size_t GatherTransfer::AddSharded(absl::string_view path, const ShardedTensor& st, Device target) {
  Entry e;
  e.path = path;
  e.sharded = &st;
  e.target = target;
  e.moves = true;
  any_sharded_ = true;
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

absl::Status GatherTransfer::Prepare() {
  std::vector<PartialSource> partial;
  for (Entry& e : entries_) {
    if (e.dtensor == nullptr) continue;
    e.partial = partial.size();
    partial.push_back({e.dtensor, e.mesh_comm});
  }
  SDRT_RETURN_IF_ERROR(run_.partial().Prepare(partial, comm_.device(), bucket_bytes_));
  if (keepers_.empty()) {  // nobody keeps anything: nothing moves
    for (Entry& e : entries_) e.moves = false;
    any_sharded_ = false;
  } else if (keeper_mesh_ == nullptr) {
    SDRT_ASSIGN_OR_RETURN(
        DeviceMesh mesh,
        DeviceMesh::Create({static_cast<int64_t>(keepers_.size())},
                           std::vector<int64_t>(keepers_.begin(), keepers_.end())));
    keeper_mesh_ = std::make_shared<const DeviceMesh>(std::move(mesh));
  }
  if (any_sharded_) return absl::OkStatus();  // planned once the boxes are in
  return Plan({});
}

std::string GatherTransfer::payload() const {
  if (!any_sharded_) return run_.prepared() ? run_.payload() : std::string();
  std::string out;
  for (const Entry& e : entries_) {
    if (e.sharded != nullptr) PutShardBoxes(*e.sharded, &out);
  }
  return out;
}

absl::Status GatherTransfer::AllocateResults() {
  results_.assign(entries_.size(), Tensor());
  if (!keeps_) return absl::OkStatus();
  std::vector<FreshPiece> pieces;
  std::vector<Tensor*> cpu;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (!e.moves) continue;
    const DType dtype = e.dtensor != nullptr ? e.dtensor->dtype() : e.sharded->dtype();
    const IntVector& shape =
        e.dtensor != nullptr ? e.dtensor->global_shape() : e.sharded->global_shape();
    if (!e.target.is_cpu()) {
      // Elements no box of a ShardedTensor covers are zero.
      SDRT_ASSIGN_OR_RETURN(results_[i], e.sharded != nullptr
                                             ? Tensor::Zeros(shape, dtype, e.target)
                                             : Tensor::Empty(shape, dtype, e.target));
      continue;
    }
    SDRT_ASSIGN_OR_RETURN(results_[i], Tensor::Meta(shape, dtype));
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(dtype, results_[i].numel()));
    pieces.push_back({bytes, ElementAlignment(dtype)});
    cpu.push_back(&results_[i]);
  }
  if (!pieces.empty()) {
    SDRT_ASSIGN_OR_RETURN(const FreshLayout layout, LayOutFresh(pieces));
    SDRT_RETURN_IF_ERROR(AllocateFresh(layout, Device::CPU(), absl::MakeSpan(cpu)));
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].sharded != nullptr && entries_[i].target.is_cpu() && results_[i].nbytes() > 0) {
      std::memset(results_[i].data_ptr(), 0, static_cast<size_t>(results_[i].nbytes()));
    }
  }
  return absl::OkStatus();
}

// A gather without ShardedTensors for the route cache (route_cache.h): its key is what its
// descriptors are made of (the keepers, and per moving DTensor its path, dtype, global shape,
// mesh, placements and whether its Partial dims were reduced first), so a repeated call
// makes no descriptor.
class GatherTransfer::Request final : public TransferRequest {
 public:
  explicit Request(const GatherTransfer& gather) : gather_(gather) {
    for (const Entry& e : gather.entries_) moving_ += e.moves ? 1 : 0;
  }
  size_t size() const override { return moving_; }

  void AddToKey(RouteKey& key) const override {
    key.Reserve(moving_);
    key.Word(kTag);
    key.Mesh(gather_.keeper_mesh_.get());
    for (const Entry& e : gather_.entries_) {
      if (!e.moves) continue;
      const DTensor& d = *e.dtensor;
      key.Name(e.path);
      key.Word(static_cast<int64_t>(d.dtype()));
      key.Ints(d.global_shape());
      key.Mesh(d.mesh().get());
      key.Word(gather_.ReducedOf(e) != nullptr ? 1 : 0);
      key.Placements(d.placements());
    }
  }

  absl::StatusOr<std::vector<TransferTensor>> Describe() const override {
    std::vector<TransferTensor> tensors(moving_);
    size_t k = 0;
    for (const Entry& e : gather_.entries_) {
      if (e.moves) gather_.Describe(e, nullptr, tensors[k++]);
    }
    return tensors;
  }

 private:
  static constexpr int64_t kTag = 0x5344525447415448;  // "SDRTGATH"
  const GatherTransfer& gather_;
  size_t moving_ = 0;
};

void GatherTransfer::Describe(const Entry& e, std::vector<TransferBox>* boxes,
                              TransferTensor& t) const {
  t.name.assign(e.path.data(), e.path.size());
  t.destination.mesh = keeper_mesh_;
  t.destination.placements.push_back(Placement::Replicate());
  if (e.dtensor != nullptr) {
    const DTensor& d = *e.dtensor;
    t.dtype = d.dtype();
    t.shape = d.global_shape();
    t.source.mesh = d.mesh();
    if (ReducedOf(e) != nullptr) {
      t.source.placements = Reduced(d.placements());
    } else {
      t.source.placements.assign(d.placements().begin(), d.placements().end());
    }
  } else {
    const ShardedTensor& st = *e.sharded;
    t.dtype = st.dtype();
    t.shape = st.global_shape();
    t.source.boxes = std::move(*boxes);
    t.allow_uncovered = true;
  }
}

absl::Status GatherTransfer::Plan(absl::Span<const std::string> payloads) {
  SDRT_RETURN_IF_ERROR(AllocateResults());
  TransferLocals sources, destinations;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (!e.moves) continue;
    if (e.dtensor != nullptr) {
      const Tensor* reduced = ReducedOf(e);
      sources.Add({reduced != nullptr ? reduced : &e.dtensor->local(), 1});
    } else {
      for (const LocalShard& s : e.sharded->local_shards()) {
        sources.tensors.push_back({&s.tensor, nullptr});
      }
      sources.begin.push_back(sources.tensors.size());
    }
    destinations.Add(keeps_ ? absl::Span<const Tensor>(&results_[i], 1)
                            : absl::Span<const Tensor>());
  }
  if (!any_sharded_) {
    return run_.Prepare(comm_, Request(*this), std::move(sources), std::move(destinations),
                        options_);
  }
  // Every rank's boxes of each ShardedTensor, in rank order.
  std::vector<std::vector<TransferBox>> boxes(entries_.size());
  for (size_t q = 0; q < payloads.size(); ++q) {
    ByteReader reader(payloads[q]);
    for (size_t i = 0; i < entries_.size(); ++i) {
      const ShardedTensor* st = entries_[i].sharded;
      if (st != nullptr) {
        SDRT_RETURN_IF_ERROR(
            GetShardBoxes(op_, reader, static_cast<int64_t>(q), st->global_shape(), boxes[i]));
      }
    }
  }
  const absl::Span<TransferTensor> tensors = ReusedDescriptors(entries_.size());
  size_t described = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].moves) Describe(entries_[i], &boxes[i], tensors[described++]);
  }
  return run_.Prepare(comm_, DescribedTransfer(tensors.first(described)), std::move(sources),
                      std::move(destinations), options_);
}

absl::Status GatherTransfer::Run(absl::string_view op, absl::Span<const std::string> payloads,
                                 TransferStats* stats) {
  if (any_sharded_) {
    // The plan needs every rank's boxes: its errors and the exchange counts take one more
    // agreement.
    const absl::Status planned = Plan(payloads);
    AgreementPayload counts;
    counts.mine = planned.ok() ? run_.payload() : std::string();
    SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(comm_, op, "", {}, planned, stats, &counts));
    SDRT_RETURN_IF_ERROR(run_.Agreed(counts.all));
  } else {
    SDRT_RETURN_IF_ERROR(run_.Agreed(payloads));
  }
  SDRT_RETURN_IF_ERROR(run_.Run(op, stats));
  if (!keeps_) return absl::OkStatus();
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.moves) continue;
    const Tensor* reduced = ReducedOf(e);
    const Tensor& value = reduced != nullptr ? *reduced : e.dtensor->local();
    if (value.device() == e.target) {
      results_[i] = value;
    } else {
      SDRT_ASSIGN_OR_RETURN(results_[i], value.To(e.target));
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
