// LoadStateDict (core/distributed/load_state_dict.h): checks the options, agrees with the
// other ranks on them and on the read (internal/load/read_policy.h), then runs the read's path
// (internal/load/load_paths.h).
#include "sdrt/core/distributed/load_state_dict.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/load/load_paths.h"
#include "sdrt/core/distributed/internal/load/root_tensors.h"
#include "sdrt/core/distributed/internal/load/read_policy.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/core/distributed/internal/mapping/mapped_load.h"
#include "sdrt/core/distributed/internal/mapping/quantize.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr absl::string_view kOp = "LoadStateDict";

absl::Status CheckOptions(const LoadOptions& o) {
  if (o.comm == nullptr && o.rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " must be >= 0 (or -1 with a communicator)"));
  }
  // Each out of its range, named alone.
  const struct {
    const char* name;
    int64_t value;
    bool ok;
    const char* range;
  } ranged[] = {{"staging_buffers", o.staging_buffers, o.staging_buffers >= 1, ">= 1"},
                {"staging_bytes", o.staging_bytes, o.staging_bytes >= 4096, ">= 4096"},
                {"max_gap_bytes", o.max_gap_bytes, o.max_gap_bytes >= 0, ">= 0"},
                {"readers", o.readers, o.readers >= 0 && o.readers <= 64, "in [0, 64]"}};
  for (const auto& r : ranged) {
    if (!r.ok) {
      return absl::InvalidArgumentError(absl::StrCat(r.name, " ", r.value, " must be ", r.range));
    }
  }
  if (o.comm != nullptr && !o.node_of_rank.empty() &&
      o.node_of_rank.size() != static_cast<size_t>(o.comm->size())) {
    return absl::InvalidArgumentError(absl::StrCat("node_of_rank has ", o.node_of_rank.size(),
                                                   " entries for ", o.comm->size(), " ranks"));
  }
  if (o.bucket_bytes < 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket_bytes ", o.bucket_bytes, " must be >= 64"));
  }
  if (o.map_results && (o.direct_io || o.share_reads)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "map_results goes with neither direct_io nor share_reads (it reads nothing: the page "
        "cache's pages are shared already); got direct_io ", o.direct_io, ", share_reads ",
        o.share_reads));
  }
  if (o.direct_io && o.read == ReadMode::kRoot) {
    return absl::InvalidArgumentError(
        "direct_io goes with read kAll or kAuto (every rank reading), not kRoot");
  }
  return absl::OkStatus();
}

// The read of a call without a communicator: kAll, from this process's own view.
absl::StatusOr<internal::ReadDecision> DecideAlone(const CheckpointSource* source,
                                                   const absl::Status& open_status,
                                                   ReadMode requested) {
  if (requested == ReadMode::kRoot) {
    return absl::FailedPreconditionError(absl::StrCat(
        kOp, ": read kRoot needs a communicator (the root sends every rank its pieces)"));
  }
  if (source == nullptr) return open_status;
  if (source->kind() == CheckpointKind::kShardedFolder) {
    return absl::FailedPreconditionError(absl::StrCat(
        kOp, ": an sdrt sharded folder needs a communicator (its pieces move between ranks)"));
  }
  return internal::ReadDecision{
      ReadMode::kAll, false, requested == ReadMode::kAuto ? "auto: no communicator" : "requested"};
}

// Runs the path of `decision` (internal/load/load_paths.h).
absl::StatusOr<LoadResult> RunPath(const internal::ReadDecision& decision,
                                   const CheckpointSource* source, const absl::Status& precondition,
                                   Map& local, const LoadOptions& options, LoadStats& stats) {
  if (decision.sharded) {
    return internal::LoadShardedFolder(source, precondition, local, options, stats);
  }
  if (decision.read == ReadMode::kRoot) {
    absl::StatusOr<LoadResult> root =
        internal::LoadFromRoot(source, precondition, local, options, stats);
    // Where kAuto chose the root, say why: its rules (one skeleton, meshes of every rank)
    // are not kAll's.
    if (!root.ok() && options.read == ReadMode::kAuto &&
        root.status().code() == absl::StatusCode::kInvalidArgument) {
      return absl::InvalidArgumentError(absl::StrCat(root.status().message(), " (read kRoot, ",
                                                     decision.reason, ")"));
    }
    return root;
  }
  return internal::LoadEveryRank(source, precondition, local, options, stats);
}

// With kRoot the root sends the checkpoint's dtypes (BroadcastStateDict casts nothing):
// InvalidArgument naming the first leaf of `lowered` of another float dtype than its
// float tensor's in `tensors` (a cast, which kAll would make).
absl::Status RefuseRootCasts(absl::Span<const SafetensorsTensorSpec> tensors, const Map& lowered) {
  absl::flat_hash_map<absl::string_view, DType> dtype_of;
  for (const SafetensorsTensorSpec& t : tensors) dtype_of.emplace(t.name, t.dtype);
  SDRT_ASSIGN_OR_RETURN(const internal::Leaves leaves, internal::CollectLeaves(lowered));
  for (const internal::Leaf& leaf : leaves) {
    const Value& v = *leaf.value;
    const auto it = dtype_of.find(leaf.path);
    if (it == dtype_of.end()) continue;
    std::optional<DType> dtype;
    if (v.kind() == ValueKind::kDTensor) dtype = v.as_dtensor().dtype();
    if (v.kind() == ValueKind::kShardedTensor) dtype = v.as_sharded().dtype();
    // A cast between float dtypes; other mismatches are the path's own error.
    if (dtype.has_value() && *dtype != it->second && CastKindOf(*dtype) == CastKind::kFloat &&
        CastKindOf(it->second) == CastKind::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", leaf.path, "' is ", DTypeName(*dtype), " here but ", DTypeName(it->second),
          " in the checkpoint: read kRoot sends the checkpoint's dtypes and casts nothing (read "
          "all casts each rank's pieces)"));
    }
  }
  return absl::OkStatus();
}

// `source` is null where this rank could not open it (`open_status` says why).
absl::StatusOr<LoadResult> Load(const CheckpointSource* source, const absl::Status& open_status,
                                Map& local, const LoadOptions& options) {
  LoadStats local_stats;
  LoadStats& stats = options.stats != nullptr ? *options.stats : local_stats;
  stats = LoadStats{};
  const absl::Status options_error = CheckOptions(options);
  internal::ReadDecision decision;
  if (options.comm == nullptr) {
    SDRT_RETURN_IF_ERROR(options_error);
    SDRT_ASSIGN_OR_RETURN(decision, DecideAlone(source, open_status, options.read));
  } else {
    // One exchange: the options that shape the collectives, every rank's option errors
    // and its view of the source.
    AgreementPayload views;
    views.mine = internal::DescribeSource(source, open_status, options.read == ReadMode::kAuto);
    SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(
        *options.comm, kOp,
        absl::StrCat("read ", ReadModeName(options.read), ", bucket_bytes ", options.bucket_bytes,
                     ", weight map ", internal::WeightMapHash(options.weight_map),
                     ", share_reads ", options.share_reads, " node_of_rank [",
                     absl::StrJoin(options.node_of_rank, ","), "]"),
        {}, options_error, nullptr, &views));
    SDRT_ASSIGN_OR_RETURN(decision, internal::DecideRead(options.read, views.all));
  }
  stats.read = decision.read;
  stats.read_reason = decision.reason;
  if (decision.read == ReadMode::kRoot && options.direct_io) {
    absl::StrAppend(&stats.read_reason, "; direct_io unused (it is for every rank reading)");
  }
  if ((decision.read == ReadMode::kRoot || decision.sharded) && options.map_results) {
    absl::StrAppend(&stats.read_reason, "; map_results unused (it maps the pieces of every ",
                    "rank reading a safetensors file or folder)");
  }
  // This rank's open error matters where its source is read.
  const bool reads = decision.read == ReadMode::kAll || options.comm->rank() == 0;
  absl::Status precondition = source == nullptr && reads ? open_status : absl::OkStatus();
  // A weight map and FP8 (leaves with scales to quantize into, or the checkpoint's codes to
  // dequantize) are lowered against the checkpoint's tensor list: this rank's source's, or
  // with kRoot rank 0's, which it sends when it needs the lowering (only rank 0 is sure to
  // see the checkpoint, and every rank's skeleton is rank 0's).
  const bool mapped_leaves =
      options.weight_map.compiled() != nullptr || internal::HasCodeLeaves(local);
  const auto any_fp8 = [](const auto& tensors) {
    return std::any_of(tensors.begin(), tensors.end(),
                       [](const auto& t) { return internal::IsFp8Codes(t.dtype); });
  };
  std::optional<std::vector<SafetensorsTensorSpec>> root_tensors;
  bool lowered = false;
  if (decision.read == ReadMode::kRoot && !decision.sharded) {
    const bool root_lowers =
        options.comm->rank() == 0 && source != nullptr && precondition.ok() &&
        (mapped_leaves || any_fp8(source->tensors()));
    SDRT_ASSIGN_OR_RETURN(root_tensors, internal::ShareRootTensors(*options.comm, source,
                                                                   root_lowers));
    lowered = root_tensors.has_value();
  } else {
    lowered = mapped_leaves || (source != nullptr && any_fp8(source->tensors()));
  }
  if (!lowered) {
    // Leaves of another dtype than the checkpoint's: rank 0 says so before it sends.
    if (decision.read == ReadMode::kRoot && !decision.sharded && options.comm->rank() == 0 &&
        source != nullptr && precondition.ok()) {
      precondition = RefuseRootCasts(source->TensorSpecs(), local);
    }
    return RunPath(decision, source, precondition, local, options, stats);
  }
  // The path fills this rank's lowered state dict (mapping/mapped_load.h). Without the
  // tensor list (this rank's source could not be opened) the path reports that error.
  internal::MappedLoad mapped;
  Map* target = &local;
  if (root_tensors.has_value() || (source != nullptr && precondition.ok())) {
    const std::vector<SafetensorsTensorSpec> tensors =
        root_tensors.has_value() ? *std::move(root_tensors) : source->TensorSpecs();
    const absl::Status lowering =
        internal::LowerLoad(internal::CompiledOrEmpty(options.weight_map), tensors,
                            options.rank >= 0 ? options.rank : options.comm->rank(),
                            options.device, local, mapped);
    if (lowering.ok()) {
      target = &mapped.lowered;
      if (decision.read == ReadMode::kRoot && precondition.ok()) {
        precondition = RefuseRootCasts(tensors, mapped.lowered);
      }
    } else if (precondition.ok()) {
      precondition = lowering;
    }
  }
  SDRT_ASSIGN_OR_RETURN(LoadResult result,
                        RunPath(decision, source, precondition, *target, options, stats));
  // FP8 leaves: quantized from what the path read into their staging (quantize.h).
  internal::QuantizeWork& quantize = mapped.mapped.quantize;
  if (quantize.per_tensor && options.comm == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": an FP8 scale per tensor takes every rank's amax: give a communicator (a "
             "SelfCommunicator for one process)"));
  }
  if (quantize.any()) SDRT_RETURN_IF_ERROR(internal::FinishQuantized(quantize, options.comm));
  if (mapped.mapped.dequantize.any()) {
    SDRT_RETURN_IF_ERROR(internal::FinishDequantized(mapped.mapped.dequantize));
  }
  SDRT_RETURN_IF_ERROR(internal::TakeBack(mapped, local));
  return result;
}

}  // namespace

absl::StatusOr<LoadResult> LoadStateDict(const CheckpointSource& source, Map& local,
                                         const LoadOptions& options) {
  return Load(&source, absl::OkStatus(), local, options);
}

absl::StatusOr<LoadResult> LoadStateDict(const absl::StatusOr<CheckpointSource>& source, Map& local,
                                         const LoadOptions& options) {
  return Load(source.ok() ? &*source : nullptr, source.status(), local, options);
}

}  // namespace sdrt
