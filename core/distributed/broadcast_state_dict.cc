// BroadcastStateDict (core/distributed/distributed_state_dict.h): the root's skeleton (its
// leaves described as the one leaf codec describes them, internal/engine/descriptors.h:
// tensors by dtype and shape, the other values inline) travels with the agreement on the
// options (core/distributed/agreement.h); every rank matches it to its local leaves and plans
// where each tensor goes in them (internal/local_target.h); then each tensor is a transfer
// from the root alone into its local layout (internal/engine/transfer.h): point to point to
// the ranks that keep pieces of it, one broadcast when every rank keeps it whole.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
#include "sdrt/core/distributed/internal/default_comm.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/core/distributed/internal/engine/inline_value.h"
#include "sdrt/core/distributed/internal/engine/route_cache.h"
#include "sdrt/core/distributed/internal/engine/transfer.h"
#include "sdrt/core/distributed/internal/fresh_arena.h"
#include "sdrt/core/distributed/internal/gather_transfer.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/local_target.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr absl::string_view kOp = "BroadcastStateDict";

// The root's skeleton of `full`: its leaves in walk order, tensors of dimension >= 1 as
// plain (dtype, shape; `tensors` gets each), every other leaf inline. Errors name the leaf:
// FailedPrecondition for a meta tensor, InvalidArgument for what cannot be broadcast.
absl::StatusOr<std::string> DescribeFull(const Map& full, std::vector<const Tensor*>& tensors) {
  SDRT_ASSIGN_OR_RETURN(const internal::Leaves leaves, internal::CollectLeaves(full));
  // Written leaf by leaf through one LeafLayout, into memory reserved once: for 10,000
  // leaves, a vector of layouts and the growth of `tensors` and `out` took 1.5 ms against
  // 0.6 ms so (bench/RESULTS.md, "Where tiny broadcast's time goes").
  std::string out;
  out.reserve(sizeof(uint64_t) * (1 + 8 * leaves.size()));
  tensors.reserve(leaves.size());
  internal::PutU64(&out, leaves.size());
  internal::LeafLayout l;
  for (const internal::Leaf& leaf : leaves) {
    l.path.assign(leaf.path.data(), leaf.path.size());
    const Value& v = *leaf.value;
    if (v.kind() == ValueKind::kTensor && v.as_tensor().dim() > 0) {
      const Tensor& t = v.as_tensor();
      if (t.device().is_meta()) {
        return absl::FailedPreconditionError(
            absl::StrCat("'", leaf.path, "': the full state dict holds a meta tensor (no data)"));
      }
      l.kind = internal::LeafLayout::Kind::kPlain;
      l.dtype = t.dtype();
      l.shape = t.shape();
      SDRT_RETURN_IF_ERROR(internal::CheckLeafDims(l));
      tensors.push_back(&t);
      internal::AppendLeafLayout(l, &out);
      continue;
    }
    if (v.is_any_tensor() && v.kind() != ValueKind::kTensor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", leaf.path, "': a ", ValueKindName(v.kind()),
          " cannot be broadcast from a full state dict (plain tensors and Python scalars only)"));
    }
    l.kind = internal::LeafLayout::Kind::kInline;
    l.dtype = DType::kFloat32;  // an inline leaf has no dtype or shape: LeafLayout's defaults
    l.shape.clear();
    SDRT_ASSIGN_OR_RETURN(l.inline_value, internal::EncodeInlineValue(leaf.path, v));
    internal::AppendLeafLayout(l, &out);
  }
  return out;
}

// Writes a filled target back into `local` (moving it to the CPU when asked).
absl::Status Commit(internal::LocalTarget& target, const Communicator& comm, bool cpu_offload,
                    internal::FreshDTensors& made) {
  SDRT_RETURN_IF_ERROR(internal::CommitLocalTarget(target, comm.rank(), made));
  Value& leaf = *target.leaf->value;
  if (cpu_offload && leaf.is_any_tensor()) {
    SDRT_ASSIGN_OR_RETURN(Value moved, internal::MoveToCpu(leaf));
    leaf = std::move(moved);
  }
  return absl::OkStatus();
}

// The fresh CPU locals of the targets (meta until now) as views of one arena, in target
// order (the order their bytes arrive in), instead of one allocation each.
absl::Status AllocateFreshTargets(std::vector<std::unique_ptr<internal::LocalTarget>>& targets) {
  std::vector<internal::FreshPiece> pieces;
  std::vector<Tensor*> fresh;
  for (std::unique_ptr<internal::LocalTarget>& target : targets) {
    for (Tensor& dest : target->dests) {
      if (!dest.is_meta()) continue;
      SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(dest.dtype(), dest.numel()));
      pieces.push_back({bytes, ElementAlignment(dest.dtype())});
      fresh.push_back(&dest);
    }
  }
  SDRT_ASSIGN_OR_RETURN(const internal::FreshLayout layout, internal::LayOutFresh(pieces));
  return internal::AllocateFresh(layout, Device::CPU(), absl::MakeSpan(fresh));
}

// A 1-D mesh over `ranks`, Replicate: the layout of a tensor those ranks hold whole.
absl::StatusOr<std::shared_ptr<const DeviceMesh>> WholeOn(std::vector<int64_t> ranks) {
  const int64_t n = static_cast<int64_t>(ranks.size());
  SDRT_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({n}, std::move(ranks)));
  return std::make_shared<const DeviceMesh>(std::move(mesh));
}

// The descriptors of the targets, into `out` (one per target): each a tensor the root holds
// whole (Replicate on a mesh of the root alone) going into its target's layout (a DTensor's;
// Replicate on every rank for a replaced leaf; for a ShardedTensor target, every rank's
// boxes read from `boxes`, one payload per rank).
absl::Status DescribeTargets(absl::Span<const std::unique_ptr<internal::LocalTarget>> targets,
                             absl::Span<const internal::LeafLayout* const> entries, int root,
                             int world_size, absl::Span<const std::string> boxes,
                             absl::Span<internal::TransferTensor> out) {
  std::vector<int64_t> world(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) world[static_cast<size_t>(r)] = r;
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<const DeviceMesh> root_mesh, WholeOn({root}));
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<const DeviceMesh> world_mesh,
                        WholeOn(std::move(world)));
  std::vector<internal::ByteReader> readers;
  for (const std::string& b : boxes) readers.emplace_back(b);
  for (size_t i = 0; i < targets.size(); ++i) {
    const internal::LocalTarget& target = *targets[i];
    internal::TransferTensor& t = out[i];
    t.name = entries[i]->path;
    t.dtype = entries[i]->dtype;
    t.shape = entries[i]->shape;
    t.source.mesh = root_mesh;
    t.source.placements.push_back(Placement::Replicate());
    switch (target.kind) {
      case internal::LocalTarget::Kind::kFreshDTensor:
      case internal::LocalTarget::Kind::kInPlaceDTensor: {
        const DTensor& d = target.leaf->value->as_dtensor();
        t.destination.mesh = d.mesh();
        t.destination.placements.assign(d.placements().begin(), d.placements().end());
        break;
      }
      case internal::LocalTarget::Kind::kSharded:
        for (size_t q = 0; q < readers.size(); ++q) {
          SDRT_RETURN_IF_ERROR(internal::GetShardBoxes(kOp, readers[q], static_cast<int64_t>(q),
                                                       t.shape, t.destination.boxes));
        }
        break;
      case internal::LocalTarget::Kind::kReplace:
        t.destination.mesh = world_mesh;
        t.destination.placements.push_back(Placement::Replicate());
        break;
    }
  }
  return absl::OkStatus();
}

// The transfers of a call without ShardedTensor targets (their boxes come with the
// agreement, so such a call describes its targets itself), for the route cache
// (route_cache.h): each target's tensor from the root into its layout. Its key is what its
// descriptors are made of (the root, the world size, and per target its path, dtype, shape
// and whether it is replaced or a DTensor's layout), so a repeated call makes no descriptor.
class BroadcastRequest final : public internal::TransferRequest {
 public:
  // `key`: AddTargetToKey of each target, in order.
  BroadcastRequest(const std::vector<std::unique_ptr<internal::LocalTarget>>& targets,
                   const std::vector<const internal::LeafLayout*>& entries,
                   const internal::RouteKey& key, int root, int world_size)
      : targets_(targets), entries_(entries), key_(key), root_(root), world_size_(world_size) {}

  size_t size() const override { return targets_.size(); }

  void AddToKey(internal::RouteKey& key) const override {
    key.Word(kTag);
    key.Word(root_);
    key.Word(world_size_);
    key.AppendDigestOf(key_);
  }

  // The words of one target for the key: what its descriptor is made of (the root's path,
  // dtype and shape; replaced whole, or the DTensor's mesh and placements). Written in the
  // walk that plans the targets, while each leaf is in cache (one walk over them, not two).
  static void AddTargetToKey(const internal::LeafLayout& entry,
                             const internal::LocalTarget& target, internal::RouteKey& key) {
    key.Name(entry.path);
    key.Word(static_cast<int64_t>(entry.dtype));
    key.Ints(entry.shape);
    const bool replace = target.kind == internal::LocalTarget::Kind::kReplace;
    key.Word(replace ? 1 : 0);
    if (!replace) {
      const DTensor& d = target.leaf->value->as_dtensor();
      key.Mesh(d.mesh().get());
      key.Placements(d.placements());
    }
  }

  absl::StatusOr<std::vector<internal::TransferTensor>> Describe() const override {
    std::vector<internal::TransferTensor> tensors(targets_.size());
    SDRT_RETURN_IF_ERROR(DescribeTargets(targets_, entries_, root_, world_size_, {},
                                         absl::MakeSpan(tensors)));
    return tensors;
  }

 private:
  static constexpr int64_t kTag = 0x5344525442524f41;  // "SDRTBROA"
  const std::vector<std::unique_ptr<internal::LocalTarget>>& targets_;
  const std::vector<const internal::LeafLayout*>& entries_;
  const internal::RouteKey& key_;
  const int root_;
  const int world_size_;
};

}  // namespace

absl::StatusOr<BroadcastResult> BroadcastStateDict(const Map& full, Map& local,
                                                   const BroadcastOptions& options) {
  SDRT_ASSIGN_OR_RETURN(Communicator * comm_ptr, internal::ResolveCommunicator(options.comm, kOp));
  Communicator& comm = *comm_ptr;
  TransferStats local_stats;
  TransferStats& stats = options.stats != nullptr ? *options.stats : local_stats;
  stats = TransferStats{};
  const bool is_root = comm.rank() == options.root;
  const Device device =
      options.cpu_offload ? Device::CPU() : options.device.value_or(comm.device());

  // 1. One agreement on the options that shape the collectives (ranks that disagree on
  // the root or the bucket size would otherwise issue mismatched collectives) and on the
  // ranks' early errors, carrying the root's skeleton to everyone.
  absl::Status early = absl::OkStatus();
  if (options.root < 0 || options.root >= comm.size()) {
    early = absl::InvalidArgumentError(
        absl::StrCat("root ", options.root, " is not a rank of the communicator of ", comm.size()));
  } else if (options.bucket_bytes < 1) {
    early = absl::InvalidArgumentError(
        absl::StrCat("bucket_bytes must be at least 1, got ", options.bucket_bytes));
  }
  std::vector<const Tensor*> root_tensors;  // in `full`, which outlives the call
  AgreementPayload root_skeleton;
  if (early.ok() && is_root) {
    absl::StatusOr<std::string> described = DescribeFull(full, root_tensors);
    if (described.ok()) {
      root_skeleton.mine = *std::move(described);
    } else {
      early = described.status();
    }
  }
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(
      comm, kOp, absl::StrCat("root ", options.root, ", bucket_bytes ", options.bucket_bytes), {},
      early, &stats, &root_skeleton));
  SDRT_ASSIGN_OR_RETURN(const std::vector<internal::LeafLayout> entries,
                        internal::DecodeLeafLayouts(root_skeleton.all[options.root], options.root));

  // 2. Match against the local leaves and plan where each tensor goes.
  absl::StatusOr<internal::MutableLeaves> leaves_or = internal::CollectMutableLeaves(local);
  absl::Status local_error = leaves_or.status();
  internal::MutableLeaves leaves;
  if (leaves_or.ok()) leaves = *std::move(leaves_or);
  const auto path_of = [](const auto& x) -> absl::string_view { return x.path; };
  // leaf_of[e]: the local leaf entry e goes to (-1: none); matched[j]: leaf j is named.
  const std::vector<int64_t> leaf_of = internal::MatchPaths(entries, leaves, path_of);
  std::vector<bool> matched(leaves.size(), false);
  for (int64_t j : leaf_of) {
    if (j >= 0) matched[static_cast<size_t>(j)] = true;
  }
  BroadcastResult result;
  std::vector<std::unique_ptr<internal::LocalTarget>> targets;
  std::vector<const internal::LeafLayout*> target_entry;
  // Each target's locals, listed as it is planned (a later walk over 10,000 targets would
  // miss the cache on each); the refs stay valid: the tensors are the root's and the
  // targets' own, whose new locals replace them in place.
  internal::TransferLocals sources, destinations;
  std::vector<std::pair<internal::MutableLeaf*, const Value*>> inline_writes;
  targets.reserve(entries.size());
  for (internal::TransferLocals* side : {&sources, &destinations}) {
    side->tensors.reserve(entries.size());
    side->begin.reserve(entries.size() + 1);
  }
  internal::LocalTargetRules rules;
  rules.rank = comm.rank();
  rules.mesh_ranks = comm.size();
  rules.spans = true;
  rules.device = device;
  rules.allocate = !device.is_cpu();  // CPU: one arena for the call, below
  internal::LocalLayoutCache layouts;
  rules.layouts = &layouts;
  bool any_sharded = false;
  internal::RouteKey key(entries.size());  // BroadcastRequest's words
  size_t tensor_index = 0;
  for (size_t e = 0; e < entries.size(); ++e) {
    const internal::LeafLayout& entry = entries[e];
    const bool is_tensor = entry.kind == internal::LeafLayout::Kind::kPlain;
    const size_t this_tensor = is_tensor ? tensor_index++ : 0;
    if (leaf_of[e] < 0) {
      result.unexpected_keys.push_back(entry.path);
      continue;
    }
    internal::MutableLeaf& leaf = leaves[static_cast<size_t>(leaf_of[e])];
    if (!is_tensor) {
      inline_writes.emplace_back(&leaf, entry.value.get());
      continue;
    }
    // A None local takes nothing, as in PyTorch's _broadcast_tensors.
    if (!local_error.ok() || leaf.value->is_none()) continue;
    auto target = std::make_unique<internal::LocalTarget>();
    local_error = internal::PlanLocalTarget(entry.path, entry.dtype, entry.shape, leaf, rules,
                                            *target);
    if (!local_error.ok()) continue;
    any_sharded = any_sharded || target->kind == internal::LocalTarget::Kind::kSharded;
    targets.push_back(std::move(target));
    if (!any_sharded) BroadcastRequest::AddTargetToKey(entry, *targets.back(), key);
    target_entry.push_back(&entry);
    sources.Add(is_root ? absl::Span<const Tensor>(root_tensors[this_tensor], 1)
                        : absl::Span<const Tensor>());
    destinations.Add(targets.back()->dests);
  }
  if (local_error.ok()) local_error = AllocateFreshTargets(targets);
  for (size_t j = 0; j < leaves.size(); ++j) {
    if (!matched[j]) result.missing_keys.emplace_back(leaves[j].path);
  }

  // 3. The transfers: from the root alone into each target's layout. With ShardedTensor
  // targets the other ranks' boxes come with the agreement, and the plan after it.
  internal::TransferRunOptions run_options;
  run_options.bucket_bytes = std::max<int64_t>(options.bucket_bytes, 64);
  run_options.progress = options.progress;
  internal::TransferRun run;
  // Without ShardedTensor targets the request keys the route cache from the targets alone;
  // with them, the descriptors are made (their boxes come with the agreement).
  const auto plan = [&](absl::Span<const std::string> boxes) -> absl::Status {
    if (!any_sharded) {
      return run.Prepare(comm,
                         BroadcastRequest(targets, target_entry, key, options.root, comm.size()),
                         std::move(sources), std::move(destinations), run_options);
    }
    const absl::Span<internal::TransferTensor> tensors =
        internal::ReusedDescriptors(targets.size());
    SDRT_RETURN_IF_ERROR(
        DescribeTargets(targets, target_entry, options.root, comm.size(), boxes, tensors));
    return run.Prepare(comm, internal::DescribedTransfer(tensors), std::move(sources),
                       std::move(destinations), run_options);
  };
  AgreementPayload payload;
  if (local_error.ok() && !any_sharded) local_error = plan({});
  if (any_sharded) {
    for (const auto& target : targets) {
      if (target->kind == internal::LocalTarget::Kind::kSharded) {
        internal::PutShardBoxes(target->leaf->value->as_sharded(), &payload.mine);
      }
    }
  } else {
    payload.mine = run.prepared() ? run.payload() : std::string();
  }
  // The local skeletons are hashed; their text is written only if the ranks disagree.
  const HashedSkeleton skeleton = internal::HashLeaves(leaves);
  SDRT_RETURN_IF_ERROR(
      AgreeAcrossRanksHashed(comm, kOp, "", skeleton, local_error, &stats, &payload));
  if (any_sharded) {
    AgreementPayload counts;
    const absl::Status planned = plan(payload.all);
    counts.mine = planned.ok() ? run.payload() : std::string();
    SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(comm, kOp, "", {}, planned, &stats, &counts));
    payload = std::move(counts);
  }
  SDRT_RETURN_IF_ERROR(run.Agreed(payload.all));
  SDRT_RETURN_IF_ERROR(run.Run(kOp, &stats));

  // 4. The local tree.
  // New CPU locals are views of one arena, so their DTensors share one block too; new
  // device locals are each their own allocation, and so are their DTensors.
  internal::FreshDTensors made(device.is_cpu() ? targets.size() : 0);
  for (std::unique_ptr<internal::LocalTarget>& target : targets) {
    SDRT_RETURN_IF_ERROR(Commit(*target, comm, options.cpu_offload, made));
  }
  for (auto& [leaf, value] : inline_writes) *leaf->value = *value;
  if (options.strict) {
    std::vector<bool> erase(leaves.size());
    for (size_t i = 0; i < leaves.size(); ++i) erase[i] = !matched[i];
    internal::EraseLeaves(leaves, erase);
  }
  return result;
}

}  // namespace sdrt
