#include "sdrt/core/distributed/internal/partial_buckets.h"

#include <algorithm>
#include <utility>

#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/reduce_op.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

struct Reduction {
  int mesh_dim;
  ReduceOp op;
  bool operator==(const Reduction& o) const { return mesh_dim == o.mesh_dim && op == o.op; }
};

// DTensors that reduce together (the header's rule) and the inputs that are its members.
struct Group {
  DeviceMeshComm* mesh_comm;
  DType dtype;
  std::vector<Reduction> reductions;
  std::vector<size_t> members;  // input indices, in input order
};

// The Partial mesh dims of `d` in MeshDimsToReplicate order, with their ops.
absl::StatusOr<std::vector<Reduction>> ReductionsOf(const DTensor& d) {
  const std::vector<Placement>& placements = d.placements();
  std::vector<Reduction> reductions;
  bool any = false;
  for (const Placement& p : placements) any = any || p.is_partial();
  if (!any) return reductions;
  SDRT_ASSIGN_OR_RETURN(const std::vector<int> order, MeshDimsToReplicate(*d.mesh(), placements));
  for (int i : order) {
    if (placements[i].is_partial()) reductions.push_back({i, placements[i].reduce_op()});
  }
  return reductions;
}

// Copies the members' locals into one allocation on `device`, back to back, then
// all-reduces it bucket by bucket; `out[member]` becomes the member's view.
absl::Status ReduceGroup(const Group& group, absl::Span<const PartialInput> inputs, Device device,
                         int64_t bucket_bytes, CollectiveStats* stats, std::vector<Tensor>& out) {
  std::vector<int64_t> starts;  // byte offsets of the members, then the end
  starts.reserve(group.members.size() + 1);
  int64_t at = 0;
  for (size_t m : group.members) {
    starts.push_back(at);
    at += inputs[m].dtensor->local().nbytes();
  }
  starts.push_back(at);
  // At least one byte, so that members with no elements still have a storage to view.
  SDRT_ASSIGN_OR_RETURN(Tensor bytes,
                        Tensor::Empty({std::max<int64_t>(at, 1)}, DType::kUInt8, device));
  const std::shared_ptr<Storage>& storage = bytes.storage();

  std::vector<Communicator*> dim_comms;
  for (const Reduction& r : group.reductions) {
    SDRT_ASSIGN_OR_RETURN(Communicator * c, group.mesh_comm->DimComm(r.mesh_dim));
    // An all-reduce of no elements checks the (dtype, op) pair and moves nothing: a pair
    // the communicator refuses fails here, with its error, before anything is copied.
    SDRT_ASSIGN_OR_RETURN(Tensor none, Tensor::AtByteOffset(storage, 0, group.dtype, {0}));
    SDRT_RETURN_IF_ERROR(c->AllReduce(none, r.op));
    dim_comms.push_back(c);
  }
  for (size_t k = 0; k < group.members.size(); ++k) {
    const Tensor& local = inputs[group.members[k]].dtensor->local();
    Tensor& view = out[group.members[k]];
    SDRT_ASSIGN_OR_RETURN(view,
                          Tensor::AtByteOffset(storage, starts[k], group.dtype, local.shape()));
    SDRT_RETURN_IF_ERROR(view.CopyFrom(local));
  }

  // A reducible dtype has whole-byte elements.
  const int64_t element_bytes = ElementBits(group.dtype) / 8;
  size_t first = 0;
  while (first < group.members.size()) {
    // Members [first, last) form the bucket: one, then more while within bucket_bytes.
    size_t last = first + 1;
    while (last < group.members.size() && starts[last + 1] - starts[first] <= bucket_bytes) ++last;
    const int64_t count = (starts[last] - starts[first]) / element_bytes;
    if (count > 0) {
      SDRT_ASSIGN_OR_RETURN(Tensor bucket,
                            Tensor::AtByteOffset(storage, starts[first], group.dtype, {count}));
      for (size_t r = 0; r < dim_comms.size(); ++r) {
        if (stats != nullptr) ++stats->collectives;
        SDRT_RETURN_IF_ERROR(dim_comms[r]->AllReduce(bucket, group.reductions[r].op));
      }
    }
    first = last;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> ReducePartialsInBuckets(absl::Span<const PartialInput> inputs,
                                                            Device device, int64_t bucket_bytes,
                                                            CollectiveStats* stats) {
  std::vector<Tensor> out;
  std::vector<Group> groups;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DTensor& d = *inputs[i].dtensor;
    SDRT_ASSIGN_OR_RETURN(std::vector<Reduction> reductions, ReductionsOf(d));
    if (reductions.empty()) continue;  // the local itself
    Group* group = nullptr;
    for (Group& g : groups) {
      if (g.mesh_comm == inputs[i].mesh_comm && g.dtype == d.dtype() &&
          g.reductions == reductions) {
        group = &g;
        break;
      }
    }
    if (group == nullptr) {
      groups.push_back({inputs[i].mesh_comm, d.dtype(), std::move(reductions), {}});
      group = &groups.back();
    }
    group->members.push_back(i);
  }
  if (!groups.empty()) out.resize(inputs.size());
  for (const Group& g : groups) {
    SDRT_RETURN_IF_ERROR(ReduceGroup(g, inputs, device, bucket_bytes, stats, out));
  }
  return out;
}

}  // namespace sdrt::internal
