#include "sdrt/core/distributed/internal/engine/partial_reduce.h"

#include <algorithm>
#include <utility>

#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

absl::Status PartialReduction::Prepare(absl::Span<const PartialSource> sources, Device device,
                                       int64_t bucket_bytes) {
  sources_.assign(sources.begin(), sources.end());
  bucket_bytes_ = std::max<int64_t>(bucket_bytes, 1);
  groups_.clear();
  reduced_.clear();
  for (size_t i = 0; i < sources_.size(); ++i) {
    const DTensor& d = *sources_[i].dtensor;
    const std::vector<Placement>& placements = d.placements();
    if (std::none_of(placements.begin(), placements.end(),
                     [](const Placement& p) { return p.is_partial(); })) {
      continue;  // the local itself
    }
    SDRT_ASSIGN_OR_RETURN(const std::vector<int> order,
                          MeshDimsToReplicate(*d.mesh(), placements));
    std::vector<Reduction> reductions;
    for (int m : order) {
      if (placements[m].is_partial()) reductions.push_back({m, placements[m].reduce_op()});
    }
    if (reductions.empty()) continue;
    auto group = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
      return g.mesh_comm == sources_[i].mesh_comm && g.dtype == d.dtype() &&
             g.reductions == reductions;
    });
    if (group == groups_.end()) {
      Group& added = groups_.emplace_back();
      added.mesh_comm = sources_[i].mesh_comm;
      added.dtype = d.dtype();
      added.reductions = std::move(reductions);
      group = groups_.end() - 1;
    }
    group->members.push_back(i);
  }
  if (groups_.empty()) return absl::OkStatus();
  reduced_.resize(sources_.size());
  for (Group& g : groups_) {
    int64_t at = 0;
    for (size_t m : g.members) {
      g.starts.push_back(at);
      at += sources_[m].dtensor->local().nbytes();
    }
    g.starts.push_back(at);
    // At least one byte, so that members with no elements still have a storage to view.
    SDRT_ASSIGN_OR_RETURN(g.bytes,
                          Tensor::Empty({std::max<int64_t>(at, 1)}, DType::kUInt8, device));
    for (size_t k = 0; k < g.members.size(); ++k) {
      const Tensor& local = sources_[g.members[k]].dtensor->local();
      SDRT_ASSIGN_OR_RETURN(reduced_[g.members[k]],
                            Tensor::AtByteOffset(g.bytes.storage(), g.starts[k], g.dtype,
                                                 local.shape()));
    }
  }
  return absl::OkStatus();
}

absl::Status PartialReduction::Run(int64_t* collectives) const {
  for (const Group& g : groups_) {
    const std::shared_ptr<Storage>& storage = g.bytes.storage();
    std::vector<Communicator*> dim_comms;
    for (const Reduction& r : g.reductions) {
      SDRT_ASSIGN_OR_RETURN(Communicator * c, g.mesh_comm->DimComm(r.mesh_dim));
      // An all-reduce of no elements checks the (dtype, op) pair and moves nothing: a pair
      // the communicator refuses fails here, with its error, before anything is copied.
      SDRT_ASSIGN_OR_RETURN(Tensor none, Tensor::AtByteOffset(storage, 0, g.dtype, {0}));
      SDRT_RETURN_IF_ERROR(c->AllReduce(none, r.op));
      dim_comms.push_back(c);
    }
    for (size_t k = 0; k < g.members.size(); ++k) {
      Tensor view = reduced_[g.members[k]];
      SDRT_RETURN_IF_ERROR(view.CopyFrom(sources_[g.members[k]].dtensor->local()));
    }
    // A reducible dtype has whole-byte elements.
    const int64_t element_bytes = ElementBits(g.dtype) / 8;
    size_t first = 0;
    while (first < g.members.size()) {
      // Members [first, last) form the bucket: one, then more while within bucket_bytes.
      size_t last = first + 1;
      while (last < g.members.size() && g.starts[last + 1] - g.starts[first] <= bucket_bytes_) {
        ++last;
      }
      const int64_t count = (g.starts[last] - g.starts[first]) / element_bytes;
      if (count > 0) {
        SDRT_ASSIGN_OR_RETURN(Tensor bucket,
                              Tensor::AtByteOffset(storage, g.starts[first], g.dtype, {count}));
        for (size_t r = 0; r < dim_comms.size(); ++r) {
          if (collectives != nullptr) ++*collectives;
          SDRT_RETURN_IF_ERROR(dim_comms[r]->AllReduce(bucket, g.reductions[r].op));
        }
      }
      first = last;
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
