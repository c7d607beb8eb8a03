// BroadcastStateDict (core/distributed/distributed_state_dict.h): the root's skeleton travels
// with the agreement on the options (core/distributed/agreement.h), the ranks agree on
// their local skeletons and plan the same buckets, then the tensor bytes travel bucket by
// bucket: as a scatter of each rank's own pieces when every rank keeps only its pieces on
// a CPU communicator (internal/broadcast_scatter.h), else broadcast whole, pipelined with
// packing on the root and slicing everywhere.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/core/distributed/internal/broadcast_scatter.h"
#include "sdrt/core/distributed/internal/broadcast_skeleton.h"
#include "sdrt/core/distributed/internal/buckets.h"
#include "sdrt/core/distributed/internal/default_comm.h"
#include "sdrt/core/distributed/internal/fresh_arena.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/local_target.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr absl::string_view kOp = "BroadcastStateDict";
// Below this bucket size the pack/slice threads cost more than they overlap.
constexpr int64_t kPipelineMinBucketBytes = int64_t{1} << 20;

// Whether the pack and slice threads have cores to run on. CUDA: they only enqueue
// copies. CPU: the ranks of one machine busy-poll in MPI, so threads help only when the
// machine has cores to spare, assumed when it has at least twice as many as the
// communicator has ranks (measured: with 4 ranks on 2 cores, pipelined 1 MiB buckets took
// 0.6-2.7 s where serial ones took 0.1-0.2 s).
bool HasSpareCores(const Communicator& comm) {
  if (comm.device().is_cuda()) return true;
  return static_cast<int64_t>(std::thread::hardware_concurrency()) >= 2 * int64_t{comm.size()};
}

absl::StatusOr<Tensor> Box(const Tensor& t, IntSpan begin, IntSpan end) {
  Tensor view = t;
  for (int d = 0; d < t.dim(); ++d) {
    SDRT_ASSIGN_OR_RETURN(view, view.Narrow(d, begin[d], end[d] - begin[d]));
  }
  return view;
}

// The data phase: buckets broadcast from the root and sliced into the targets.
class BucketPipeline {
 public:
  BucketPipeline(Communicator& comm, int root, const std::vector<internal::Bucket>& buckets,
                 const internal::ScatterTensors& tensors, CollectiveStats& stats,
                 const std::function<void(int64_t, int64_t)>& progress)
      : comm_(comm),
        root_(root),
        buckets_(buckets),
        tensors_(tensors),
        sources_(tensors.sources),
        targets_(tensors.targets),
        dtypes_(tensors.dtypes),
        stats_(stats),
        progress_(progress) {
    for (const internal::Bucket& b : buckets_) total_bytes_ += b.bytes;
  }

  absl::Status Run(int64_t bucket_bytes) {
    if (buckets_.empty()) return absl::OkStatus();
    // Every rank keeps only its own pieces: each bucket a scatter from the root.
    if (std::all_of(buckets_.begin(), buckets_.end(), [&](const internal::Bucket& b) {
          return internal::CanScatterBucket(comm_, b, tensors_);
        })) {
      for (size_t k = 0; k < buckets_.size(); ++k) {
        if (absl::Status s = internal::ScatterBucket(comm_, root_, buckets_[k], tensors_, stats_);
            !s.ok()) {
          return absl::Status(s.code(),
                              absl::StrCat("bucket ", k + 1, " of ", buckets_.size(), " (",
                                           buckets_[k].bytes, " bytes): ", s.message()));
        }
        done_bytes_ += buckets_[k].bytes;
        if (progress_) progress_(done_bytes_, total_bytes_);
      }
      return absl::OkStatus();
    }
    int64_t largest = 0;
    for (const internal::Bucket& b : buckets_) largest = std::max(largest, b.bytes);
    const bool pipelined =
        buckets_.size() > 1 && bucket_bytes >= kPipelineMinBucketBytes && HasSpareCores(comm_);
    // The root packs, sends and slices three buckets at once; a receiving rank holds only
    // the one in flight and the one it slices.
    const int count = !pipelined ? 1 : comm_.rank() == root_ ? 3 : 2;
    for (int i = 0; i < count; ++i) {
      SDRT_ASSIGN_OR_RETURN(Tensor buffer, Tensor::Empty({largest}, DType::kUInt8, comm_.device()));
      buffers_.push_back(std::move(buffer));
    }
    const int n = static_cast<int>(buckets_.size());
    if (!pipelined) {
      for (int k = 0; k < n; ++k) {
        SDRT_RETURN_IF_ERROR(Pack(k, buffers_[0]));
        SDRT_RETURN_IF_ERROR(Send(k, buffers_[0]));
        SDRT_RETURN_IF_ERROR(Slice(k, buffers_[0]));
      }
      return absl::OkStatus();
    }
    // Step k: bucket k in flight on this thread; bucket k + 1 packed (root) and bucket
    // k - 1 sliced on two helpers, each in its own buffer.
    SDRT_RETURN_IF_ERROR(Pack(0, buffers_[0]));
    for (int k = 0; k <= n; ++k) {
      absl::Status pack_status, slice_status;
      std::thread packer, slicer;
      if (k + 1 < n && comm_.rank() == root_) {
        packer = std::thread([&, k] {
          pack_status = EnterCommDevice();
          if (pack_status.ok()) pack_status = Pack(k + 1, buffers_[(k + 1) % count]);
        });
      }
      if (k >= 1) {
        slicer = std::thread([&, k] {
          slice_status = EnterCommDevice();
          if (slice_status.ok()) slice_status = Slice(k - 1, buffers_[(k - 1) % count]);
        });
      }
      const absl::Status send_status = k < n ? Send(k, buffers_[k % count]) : absl::OkStatus();
      if (packer.joinable()) packer.join();
      if (slicer.joinable()) slicer.join();
      SDRT_RETURN_IF_ERROR(send_status);
      SDRT_RETURN_IF_ERROR(pack_status);
      SDRT_RETURN_IF_ERROR(slice_status);
    }
    return absl::OkStatus();
  }

 private:
  // A new thread starts on CUDA device 0: a helper makes the communicator's device (where
  // its buffers live) current before any CUDA call, so it opens no context on GPU 0. Other
  // devices a copy touches are entered by the copy's own guard.
  absl::Status EnterCommDevice() const {
    if (!comm_.device().is_cuda()) return absl::OkStatus();
    return SetCurrentCudaDevice(comm_.device().index);
  }

  absl::Status Pack(int k, const Tensor& buffer) {
    if (comm_.rank() != root_) return absl::OkStatus();
    IntVector box_shape;
    for (const internal::Piece& p : buckets_[k].pieces) {
      const Tensor& source = *sources_[p.tensor];
      if (buffer.device().is_cpu() && source.device().is_cpu() && !IsSubByte(source.dtype())) {
        // Host to host: the box's runs straight into its slot, no views made.
        box_shape.resize(p.begin.size());
        for (size_t d = 0; d < box_shape.size(); ++d) box_shape[d] = p.end[d] - p.begin[d];
        const internal::PackedBlock slot{static_cast<char*>(buffer.data_ptr()) + p.offset,
                                         box_shape};
        const IntVector origin(p.begin.size(), 0);
        SDRT_RETURN_IF_ERROR(internal::CopyRuns(
            source, origin, slot, internal::BoxRuns(p.begin, box_shape), /*to_local=*/true));
        continue;
      }
      SDRT_ASSIGN_OR_RETURN(const Tensor src, Box(source, p.begin, p.end));
      SDRT_ASSIGN_OR_RETURN(Tensor dst,
                            internal::ByteView(buffer, p.offset, dtypes_[p.tensor], src.shape()));
      SDRT_RETURN_IF_ERROR(dst.CopyFrom(src));
    }
    return absl::OkStatus();
  }

  absl::Status Send(int k, const Tensor& buffer) {
    SDRT_ASSIGN_OR_RETURN(Tensor bytes,
                          internal::ByteView(buffer, 0, DType::kUInt8, {buckets_[k].bytes}));
    ++stats_.collectives;
    ++stats_.data_collectives;
    ++stats_.buckets;
    if (absl::Status sent = comm_.Broadcast(absl::MakeSpan(&bytes, 1), root_); !sent.ok()) {
      // Which bucket, so that a timeout or a failed rank can be placed in the run.
      return absl::Status(sent.code(),
                          absl::StrCat("bucket ", k + 1, " of ", buckets_.size(), " (",
                                       buckets_[k].bytes, " bytes): ", sent.message()));
    }
    done_bytes_ += buckets_[k].bytes;
    if (comm_.rank() == root_) stats_.bytes += buckets_[k].bytes;
    stats_.largest_bucket_bytes = std::max(stats_.largest_bucket_bytes, buckets_[k].bytes);
    if (progress_) progress_(done_bytes_, total_bytes_);
    return absl::OkStatus();
  }

  absl::Status Slice(int k, const Tensor& buffer) {
    IntVector box_shape;
    for (const internal::Piece& p : buckets_[k].pieces) {
      box_shape.resize(p.begin.size());
      for (size_t d = 0; d < box_shape.size(); ++d) box_shape[d] = p.end[d] - p.begin[d];
      const internal::LocalTarget& target = *targets_[p.tensor];
      const bool host = buffer.device().is_cpu() && !IsSubByte(dtypes_[p.tensor]);
      Tensor box;
      for (size_t i = 0; i < target.dests.size(); ++i) {
        const internal::ShardRuns runs = internal::ClipRuns(target.runs[i], p.begin, p.end);
        if (host && target.dests[i].device().is_cpu()) {
          // Host to host: from the slot straight into the local, no views made.
          const internal::PackedBlock slot{static_cast<char*>(buffer.data_ptr()) + p.offset,
                                           box_shape};
          SDRT_RETURN_IF_ERROR(
              internal::CopyRuns(slot, p.begin, target.dests[i], runs, /*to_local=*/true));
          continue;
        }
        if (!box.defined()) {
          SDRT_ASSIGN_OR_RETURN(box,
                                internal::ByteView(buffer, p.offset, dtypes_[p.tensor], box_shape));
        }
        SDRT_RETURN_IF_ERROR(
            internal::CopyRuns(box, p.begin, target.dests[i], runs, /*to_local=*/true));
      }
    }
    return absl::OkStatus();
  }

  Communicator& comm_;
  int root_;
  const std::vector<internal::Bucket>& buckets_;
  const internal::ScatterTensors& tensors_;
  const std::vector<const Tensor*>& sources_;
  const std::vector<internal::LocalTarget*>& targets_;
  const std::vector<DType>& dtypes_;
  CollectiveStats& stats_;
  const std::function<void(int64_t, int64_t)>& progress_;
  int64_t total_bytes_ = 0;
  int64_t done_bytes_ = 0;
  std::vector<Tensor> buffers_;
};

// Writes a filled target back into `local` (moving it to the CPU when asked).
absl::Status Commit(internal::LocalTarget& target, const Communicator& comm, bool cpu_offload) {
  SDRT_RETURN_IF_ERROR(internal::CommitLocalTarget(target, comm.rank()));
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

}  // namespace

absl::StatusOr<BroadcastResult> BroadcastStateDict(const Map& full, Map& local,
                                                   const BroadcastOptions& options) {
  SDRT_ASSIGN_OR_RETURN(Communicator * comm_ptr, internal::ResolveCommunicator(options.comm, kOp));
  Communicator& comm = *comm_ptr;
  CollectiveStats local_stats;
  CollectiveStats& stats = options.stats != nullptr ? *options.stats : local_stats;
  stats = CollectiveStats{};
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
  std::vector<Tensor> root_tensors;
  AgreementPayload root_skeleton;
  if (early.ok() && is_root) {
    absl::StatusOr<std::string> encoded = internal::EncodeBroadcastSkeleton(full, &root_tensors);
    if (encoded.ok()) {
      root_skeleton.mine = *std::move(encoded);
    } else {
      early = encoded.status();
    }
  }
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(
      comm, kOp, absl::StrCat("root ", options.root, ", bucket_bytes ", options.bucket_bytes), {},
      early, &stats, &root_skeleton));
  SDRT_ASSIGN_OR_RETURN(std::vector<internal::SkeletonEntry> entries,
                        internal::DecodeBroadcastSkeleton(root_skeleton.all[options.root]));

  // 2. Match against the local leaves; plan targets; agree (one collective).
  absl::StatusOr<internal::MutableLeaves> leaves_or = internal::CollectMutableLeaves(local);
  absl::Status local_error = leaves_or.status();
  internal::MutableLeaves leaves;
  if (leaves_or.ok()) leaves = *std::move(leaves_or);
  const auto path_of = [](const auto& x) { return x.path; };
  // leaf_of[e]: the local leaf entry e goes to (-1: none); matched[j]: leaf j is named.
  const std::vector<int64_t> leaf_of = internal::MatchPaths(entries, leaves, path_of);
  std::vector<bool> matched(leaves.size(), false);
  for (int64_t j : leaf_of) {
    if (j >= 0) matched[static_cast<size_t>(j)] = true;
  }
  BroadcastResult result;
  std::vector<std::unique_ptr<internal::LocalTarget>> targets;
  std::vector<internal::PlannedTensor> planned;
  std::vector<const Tensor*> sources;
  std::vector<internal::LocalTarget*> target_of;
  std::vector<DType> dtypes;
  std::vector<std::pair<internal::MutableLeaf*, const Value*>> inline_writes;
  targets.reserve(entries.size());
  internal::LocalTargetRules rules;
  rules.rank = comm.rank();
  rules.mesh_ranks = comm.size();
  rules.device = device;
  rules.allocate = !device.is_cpu();  // CPU: one arena for the call, below
  internal::LocalLayoutCache layouts;
  rules.layouts = &layouts;
  size_t tensor_index = 0;
  for (size_t e = 0; e < entries.size(); ++e) {
    const internal::SkeletonEntry& entry = entries[e];
    const size_t this_tensor = entry.is_tensor ? tensor_index++ : 0;
    if (leaf_of[e] < 0) {
      result.unexpected_keys.emplace_back(entry.path);
      continue;
    }
    internal::MutableLeaf& leaf = leaves[static_cast<size_t>(leaf_of[e])];
    if (!entry.is_tensor) {
      inline_writes.emplace_back(&leaf, &entry.value);
      continue;
    }
    // A None local takes nothing, as in PyTorch's _broadcast_tensors.
    if (!local_error.ok() || leaf.value->is_none()) continue;
    absl::StatusOr<internal::LocalTarget> target =
        internal::PlanLocalTarget(entry.path, entry.dtype, entry.shape, leaf, rules);
    if (!target.ok()) {
      local_error = target.status();
      continue;
    }
    targets.push_back(std::make_unique<internal::LocalTarget>(*std::move(target)));
    planned.push_back({entry.shape, ElementBits(entry.dtype)});
    sources.push_back(is_root ? &root_tensors[this_tensor] : nullptr);
    target_of.push_back(targets.back().get());
    dtypes.push_back(entry.dtype);
  }
  if (local_error.ok()) local_error = AllocateFreshTargets(targets);
  for (size_t j = 0; j < leaves.size(); ++j) {
    if (!matched[j]) result.missing_keys.emplace_back(leaves[j].path);
  }
  // The leaves are hashed; their text is written only if the ranks disagree.
  const HashedSkeleton skeleton = internal::HashLeaves(leaves);
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanksHashed(comm, kOp, "", skeleton, local_error, &stats));

  // 3. Data, then the local tree.
  const std::vector<internal::Bucket> buckets =
      internal::PlanBuckets(planned, options.bucket_bytes);
  const internal::ScatterTensors tensors{dtypes, target_of, sources, planned};
  BucketPipeline pipeline(comm, options.root, buckets, tensors, stats, options.progress);
  SDRT_RETURN_IF_ERROR(pipeline.Run(options.bucket_bytes));
  for (std::unique_ptr<internal::LocalTarget>& target : targets) {
    SDRT_RETURN_IF_ERROR(Commit(*target, comm, options.cpu_offload));
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
