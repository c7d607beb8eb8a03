// LoadEveryRank (load_paths.h), LoadStateDict's kAll: plan the targets from the local
// leaves, plan the reads from the source's header, agree, read through the staging pool
// into the targets, agree again, then write the local tree.
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/core/distributed/internal/load/device_staging.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/load/load_paths.h"
#include "sdrt/core/distributed/internal/load/mapped_pieces.h"
#include "sdrt/core/distributed/internal/load/node_reads.h"
#include "sdrt/core/distributed/internal/load/read_dests.h"
#include "sdrt/core/distributed/internal/local_target.h"
#include "sdrt/core/distributed/internal/node.h"
#include "sdrt/core/distributed/internal/load/read_plan.h"
#include "sdrt/core/distributed/internal/load/read_policy.h"
#include "sdrt/core/distributed/internal/load/staged_reader.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

constexpr absl::string_view kOp = "LoadStateDict";

// The CUDA device of the targets' tensors (nullopt: all on the CPU). FailedPrecondition
// for tensors on two CUDA devices or on a device type without a staging path.
absl::StatusOr<std::optional<int>> LocalsDevice(const std::vector<LocalTarget>& targets) {
  std::optional<int> cuda;
  for (const LocalTarget& target : targets) {
    for (const Tensor& dest : target.dests) {
      if (dest.device().is_cpu()) continue;
      if (!dest.device().is_cuda()) {
        return absl::FailedPreconditionError(absl::StrCat(
            kOp, ": a local tensor on ", dest.device().ToString(), " (CPU or CUDA only)"));
      }
      if (cuda.has_value() && *cuda != dest.device().index) {
        return absl::FailedPreconditionError(absl::StrCat(kOp, ": local tensors on cuda:", *cuda,
                                                          " and cuda:", dest.device().index,
                                                          " (one CUDA device per call)"));
      }
      cuda = dest.device().index;
    }
  }
  return cuda;
}

// Whether the call reads each tensor once per node and shares it (LoadOptions::share_reads).
bool SharesReads(const LoadOptions& options) {
  return options.share_reads && options.comm != nullptr && options.comm->size() > 1;
}

// What PlanAll works out, used until the targets are committed. Pointers run one way:
// dests into targets (reserved to the header's tensor count, so they never move), targets'
// and reads' runs into layouts or the targets' own runs.
struct AllPlan {
  LocalLayoutCache layouts;
  std::vector<LocalTarget> targets;
  std::vector<ReadDest> dests;    // dests[i] fills reads[i]
  std::vector<ReadTensor> reads;
  ReadPlan plan;
  std::vector<bool> matched;      // matched[i]: leaf i names a checkpoint tensor
  NodeReads node_reads;           // who of the node reads a tensor its ranks keep alike
  std::optional<MappedPieces> mapped;  // with LoadOptions::map_results on the CPU
};

// Plans every target and the reads, and allocates the fresh dests; the first local error
// is returned.
absl::Status PlanAll(const CheckpointSource& source, MutableLeaves& leaves,
                     const LoadOptions& options, int rank, LoadResult& result, AllPlan& all) {
  std::vector<LocalTarget>& targets = all.targets;
  std::vector<ReadDest>& dests = all.dests;
  std::vector<ReadTensor>& reads = all.reads;
  std::vector<bool>& matched = all.matched;
  // The leaf of each checkpoint tensor: one comparison per tensor when the leaves list the
  // header's names in its order (a state dict built from the checkpoint's own specs).
  const std::vector<int64_t> leaf_of = MatchPaths(source.tensors(), leaves, [](const auto& x) {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, CheckpointSourceTensor>) {
      return absl::string_view(x.name);
    } else {
      return x.path;
    }
  });
  matched.assign(leaves.size(), false);
  LocalTargetRules rules;
  rules.rank = rank;
  // Reading once per node decides its groups from the layouts, over the communicator's
  // ranks: every mesh spans them. Otherwise a rank reads alone and a mesh need only hold it
  // among the communicator's ranks (a pipeline stage's tensors live on the stage's ranks).
  if (options.comm != nullptr) rules.mesh_ranks = options.comm->size();
  rules.spans = SharesReads(options);
  rules.device = options.device;
  rules.allocate = false;
  rules.allow_cast = true;  // CopyOut converts
  rules.layouts = &all.layouts;
  targets.reserve(source.tensors().size());  // at most one per tensor: never reallocated
  std::vector<const CheckpointSourceTensor*> entries;  // of each target
  entries.reserve(source.tensors().size());
  // A ShardedTensor has a dest per local shard, so these may grow past the reserve.
  reads.reserve(source.tensors().size());
  dests.reserve(source.tensors().size());
  std::vector<bool> mapped_dests;  // per dest of each target in turn: a view of the file
  if (options.map_results && options.device.is_cpu()) all.mapped.emplace(source);
  for (size_t t = 0; t < source.tensors().size(); ++t) {
    const CheckpointSourceTensor& entry = source.tensors()[t];
    const int64_t leaf = leaf_of[t];
    if (leaf < 0) {
      result.unexpected_keys.push_back(entry.name);
      continue;
    }
    matched[leaf] = true;
    if (leaves[leaf].value->is_none()) continue;
    LocalTarget& planned = targets.emplace_back();
    SDRT_RETURN_IF_ERROR(
        PlanLocalTarget(entry.name, entry.dtype, entry.shape, leaves[leaf], rules, planned));
    entries.push_back(&entry);
    // Mapped while the target is at hand. Not a Partial local: ranks off coordinate 0
    // overwrite it with the identity.
    for (size_t d = 0; d < planned.dests.size(); ++d) {
      bool mapped = false;
      if (all.mapped.has_value() && !planned.partial) {
        SDRT_ASSIGN_OR_RETURN(mapped,
                              all.mapped->TryMap(entry, *planned.runs[d], planned.dests[d]));
      }
      mapped_dests.push_back(mapped);
    }
  }
  // The ReadTensors borrow the header's shape and the target's runs (the layout cache's or
  // the target's own, which stay where they are); none when another rank of the node reads
  // the tensor for this one, or when the piece is mapped.
  const std::vector<bool> reads_it = all.node_reads.Decide(targets, all.layouts);
  size_t dest_index = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    LocalTarget& planned = targets[t];
    const CheckpointSourceTensor& entry = *entries[t];
    for (size_t d = 0; d < planned.dests.size(); ++d) {
      const bool mapped = mapped_dests[dest_index++];
      reads.push_back(ReadTensor{entry.file, entry.offset, ElementBits(entry.dtype), entry.shape,
                                 reads_it[t] && !mapped ? planned.runs[d] : nullptr});
      dests.push_back(ReadDest{&planned, &entry, d, planned.runs[d]});
    }
  }
  for (size_t i = 0; i < leaves.size(); ++i) {
    // A path that two leaves spell alike matched only the first of them above.
    if (!matched[i]) matched[i] = source.Find(leaves[i].path) != nullptr;
    if (!matched[i]) result.missing_keys.emplace_back(leaves[i].path);
  }
  ReadPlanOptions read_options;
  read_options.max_gap_bytes = options.max_gap_bytes;
  read_options.max_read_bytes = options.staging_bytes;
  SDRT_ASSIGN_OR_RETURN(all.plan, PlanReads(reads, read_options));
  SDRT_RETURN_IF_ERROR(AllocateFreshDests(all.plan, dests, options.device));
  // The mapped pieces' page tables now: a file cut short fails here, agreed like any error.
  return all.mapped.has_value() ? all.mapped->Populate() : absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadResult> LoadEveryRank(const CheckpointSource* source,
                                         const absl::Status& precondition, Map& local,
                                         const LoadOptions& options, LoadStats& stats) {
  const auto start = std::chrono::steady_clock::now();
  Communicator* comm = options.comm;
  const int rank = options.rank >= 0 || comm == nullptr ? options.rank : comm->rank();
  absl::Status local_error = precondition;
  MutableLeaves leaves;
  if (local_error.ok()) {
    absl::StatusOr<MutableLeaves> leaves_or = CollectMutableLeaves(local);
    local_error = leaves_or.status();
    if (leaves_or.ok()) leaves = *std::move(leaves_or);
  }
  LoadResult result;
  AllPlan all;
  const std::vector<LocalTarget>& targets = all.targets;
  const std::vector<ReadDest>& dests = all.dests;
  const ReadPlan& plan = all.plan;
  // Reading once per node: the nodes first (a collective every rank takes part in).
  const bool share = SharesReads(options);
  if (share) {
    SDRT_ASSIGN_OR_RETURN(std::vector<int> node_of_rank,
                          NodeOfRank(*comm, options.node_of_rank));
    stats.node = node_of_rank[comm->rank()];
    all.node_reads = NodeReads(std::move(node_of_rank), comm->rank(), rank == comm->rank(),
                               options.device, comm->device());
    SDRT_RETURN_IF_ERROR(all.node_reads.Connect(*comm));
  }
  if (local_error.ok()) local_error = PlanAll(*source, leaves, options, rank, result, all);
  if (local_error.ok()) local_error = all.node_reads.Prepare(all.targets, options.bucket_bytes);
  // The device the locals are on: the CPU, or one CUDA device for the whole call.
  std::optional<int> cuda_device;
  if (local_error.ok()) {
    absl::StatusOr<std::optional<int>> device = LocalsDevice(targets);
    local_error = device.status();
    if (device.ok()) cuda_device = *device;
  }
  const int readers = ResolveReaders(options.readers, cuda_device.has_value(), AffinityCpus());
  std::unique_ptr<DeviceStaging> staging;
  if (local_error.ok() && cuda_device.has_value()) {
    absl::StatusOr<std::unique_ptr<DeviceStaging>> created =
        DeviceStaging::Create(*cuda_device, PoolBuffers(options.staging_buffers, readers));
    local_error = created.status();
    if (created.ok()) staging = *std::move(created);
  }

  if (comm != nullptr) {
    // Reading once per node moves pieces between the node's ranks: their leaves must
    // agree (hashed; their text is written only if the ranks disagree). Reading alone,
    // each rank fills the leaves it lists, as a pipeline stage holds its own tensors.
    const HashedSkeleton skeleton = share ? HashLeaves(leaves) : HashedSkeleton{};
    // Reading once per node needs every rank to share (the meshes' ranks being comm's) and
    // every rank's locals on one device type (the groups are decided from the layouts).
    const std::string agreed =
        !share ? "" : absl::StrCat("share_reads", rank != comm->rank() ? " off" : "",
                                   cuda_device.has_value() ? " cuda" : " cpu");
    AgreementPayload payload;  // the node transfer's exchange counts
    payload.mine = all.node_reads.payload();
    SDRT_RETURN_IF_ERROR(
        AgreeAcrossRanksHashed(*comm, kOp, agreed, skeleton, local_error, nullptr, &payload));
    SDRT_RETURN_IF_ERROR(all.node_reads.Agreed(payload.all));
  } else {
    SDRT_RETURN_IF_ERROR(local_error);
  }

  std::vector<StagedFile> files;
  for (const CheckpointSourceFile& f : source->files()) {
    files.push_back({f.path, FileIdentity{f.device, f.inode, f.size}});
  }
  const auto name_of = [&](size_t segment) {
    return dests[plan.segments[segment].tensor].tensor->name;
  };
  StagedReadStats read_stats;
  int64_t done_bytes = 0;
  StagingPool pool;
  pool.buffers = options.staging_buffers;
  pool.readers = readers;
  pool.buffer_bytes = options.staging_bytes;
  pool.direct_io = options.direct_io;
  if (staging != nullptr) staging->Attach(pool);
  // A read is read straight into its dests when it has no gap and each of its segments
  // is a contiguous range of a CPU dest that sits where the read's bytes would put it
  // (one segment; or pieces the fresh arena laid out as they follow in the file).
  IntVector begin;
  IntVector end;
  const auto direct = [&](const Read& read) -> uint8_t* {
    uint8_t* first = nullptr;
    int64_t next = read.offset;
    for (size_t i = read.first_segment; i < read.first_segment + read.segment_count; ++i) {
      const Segment& s = plan.segments[i];
      if (s.file_offset != next) return nullptr;
      const ReadDest& rd = dests[s.tensor];
      SegmentBox(s, rd.tensor->shape, begin, end);
      const Tensor& dest = rd.target->dests[rd.dest];
      if (!dest.device().is_cpu()) return nullptr;
      const int64_t start = ContiguousDestByte(s, rd.tensor->dtype, dest, *rd.runs, begin, end);
      if (start < 0) return nullptr;
      uint8_t* const at = static_cast<uint8_t*>(dest.data_ptr()) + start;
      if (first == nullptr) {
        first = at;
      } else if (at != first + (s.file_offset - read.offset)) {
        return nullptr;
      }
      next = s.file_offset + s.bytes;
    }
    return next == read.offset + read.bytes ? first : nullptr;
  };
  stats.plan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  absl::Status read_status = RunStagedReads(
      files, plan, name_of, pool,
      [&](const Read& read, const Tensor& buffer, int64_t base, size_t index) {
        if (buffer.defined()) {  // else it was read straight into its dest
          SDRT_RETURN_IF_ERROR(staging != nullptr
                                   ? staging->CopyOut(plan, dests, read, buffer, base, index)
                                   : CopyOut(plan, dests, read, buffer, base));
        }
        done_bytes += read.bytes;
        if (options.progress) options.progress(done_bytes, plan.read_bytes);
        return absl::OkStatus();
      },
      read_stats, direct);
  // The stream has drained: the pinned buffers go back to the process's pool for the next
  // call into this device.
  if (staging != nullptr) staging->ReturnBuffers();
  stats.bytes_read = read_stats.bytes_read;
  stats.bytes_kept = plan.kept_bytes;
  stats.preads = read_stats.preads;
  stats.reads = static_cast<int64_t>(plan.reads.size());
  stats.peak_staging_bytes = read_stats.peak_staging_bytes;
  stats.staging_seconds = read_stats.staging_seconds;
  // Collective over the node: after a failed read too, which the agreement below reports.
  const absl::Status shared = all.node_reads.Run(stats.transfer, stats.bytes_from_node);
  if (read_status.ok()) read_status = shared;
  stats.bytes_kept += stats.bytes_from_node;
  if (all.mapped.has_value()) {
    stats.bytes_mapped = all.mapped->bytes();
    stats.bytes_kept += stats.bytes_mapped;
    if (!all.mapped->not_mapped().empty()) {
      absl::StrAppend(&stats.read_reason, "; map_results: pieces read instead (",
                      all.mapped->not_mapped(), ")");
    }
  } else if (options.map_results) {
    absl::StrAppend(&stats.read_reason, "; map_results unused (new locals on ",
                    options.device.ToString(), ")");
  }
  if (read_status.ok()) {
    FreshDTensors made(targets.size());
    for (LocalTarget& target : all.targets) {
      read_status = CommitLocalTarget(target, rank, made);
      if (!read_status.ok()) break;
    }
  }
  if (comm != nullptr) {
    SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(*comm, kOp, "", {}, read_status));
  } else {
    SDRT_RETURN_IF_ERROR(read_status);
  }
  if (options.strict) {
    std::vector<bool> erase(leaves.size());
    for (size_t i = 0; i < leaves.size(); ++i) erase[i] = !all.matched[i];
    EraseLeaves(leaves, erase);
  }
  return result;
}

}  // namespace sdrt::internal
