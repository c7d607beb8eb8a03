#include "sdrt/tools/sdrt/internal/gather_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/output_path.h"

namespace sdrt::cli {
namespace {

// Whether OUT names a Hugging Face folder to write: it ends in '/' or is a folder.
bool OutIsFolder(const std::string& out) {
  struct stat st;
  return (!out.empty() && out.back() == '/') ||
         (stat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
}

// PlanOut's checks of OUT (with `plan`, of the files a folder OUT will hold).
absl::Status CheckOut(const GatherTarget& target, const HfShardPlan* plan) {
  SDRT_RETURN_IF_ERROR(CheckOutputPath(target.out, {target.in_dir}));
  if (plan == nullptr) return CheckReplaceableSafetensors(target.out, target.overwrite);
  std::string dir = target.out;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    std::vector<std::string> names = plan->files;
    names.emplace_back(kHfIndexFileName);
    for (const std::string& name : names) {
      SDRT_RETURN_IF_ERROR(CheckOutputPath(absl::StrCat(dir, "/", name), {target.in_dir}));
    }
  }
  return CheckHfCheckpointTarget(target.out, target.overwrite);
}

}  // namespace

absl::StatusOr<Map> ReadRankShards(const std::string& in_dir, const Session& session,
                                   ShardedCheckpointIndex* index) {
  SDRT_ASSIGN_OR_RETURN(RankShards shards, LoadRankShards(in_dir, session.rank()));
  if (shards.index.world_size != session.size()) {
    return absl::InvalidArgumentError(absl::StrCat(in_dir, " has ", shards.index.world_size,
                                                   " ranks but mpiexec started ", session.size(),
                                                   " (run with -n ", shards.index.world_size, ")"));
  }
  Map state_dict;
  state_dict.Reserve(shards.tensors.size());
  for (auto& [name, dtensor] : shards.tensors) {
    if (session.device.is_cpu()) {
      state_dict.Set(name, Value(dtensor));
      continue;
    }
    SDRT_ASSIGN_OR_RETURN(Tensor local, dtensor.local().To(session.device));
    SDRT_ASSIGN_OR_RETURN(DTensor moved, dtensor.WithLocal(std::move(local)));
    state_dict.Set(name, Value(std::move(moved)));
  }
  *index = std::move(shards.index);
  return state_dict;
}

absl::Status PlanOut(const GatherTarget& target, const ShardedCheckpointIndex& index,
                     std::optional<HfShardPlan>* plan) {
  if (!OutIsFolder(target.out)) {
    if (target.max_shard_size_given) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max-shard-size is for a folder OUT (one ending in / or an existing folder); ",
          target.out, " is a file"));
    }
    return CheckOut(target, nullptr);
  }
  SDRT_ASSIGN_OR_RETURN(*plan, PlanHfShards(TensorBytes(index), target.max_shard_bytes));
  return CheckOut(target, &**plan);
}

absl::Status CheckAndWrite(const GatherTarget& target, const ShardedCheckpointIndex& index,
                           const Map& gathered, const HfShardPlan* plan) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const ShardedCheckpointTensor& t : index.tensors) {
    const Value* v = gathered.Find(t.name);
    if (v == nullptr || v->kind() != ValueKind::kTensor) {
      return absl::InternalError(absl::StrCat("tensor ", t.name, " missing from the gather"));
    }
    // Bad input (exit 2) naming the rank files that hold the tensor's pieces.
    SDRT_RETURN_IF_ERROR(CheckGatheredTensor(index, t, v->as_tensor()));
    tensors.emplace_back(t.name, v->as_tensor());
  }
  SDRT_RETURN_IF_ERROR(CheckOut(target, plan));  // nothing has become a link since PlanOut
  if (plan != nullptr) {
    WriteHfCheckpointOptions options;
    options.max_shard_bytes = target.max_shard_bytes;
    options.overwrite = target.overwrite;
    const auto source = [&tensors](size_t i) -> absl::StatusOr<Tensor> {
      return tensors[i].second;
    };
    return WriteHfCheckpoint(target.out, index.TensorSpecs(), source, index.metadata, options)
        .status();
  }
  // The index lists the tensors in the source's byte order; OUT keeps it.
  WriteSafetensorsOptions write_options;
  write_options.data_in_given_order = true;
  write_options.follow_symlinks = false;              // never into INDIR, even if OUT became a link
  write_options.replace_existing = target.overwrite;  // another run may have written OUT since
  return WriteSafetensors(target.out, tensors, index.metadata, write_options);
}

std::vector<int64_t> TensorBytes(const ShardedCheckpointIndex& index) {
  std::vector<int64_t> nbytes;
  for (const ShardedCheckpointTensor& t : index.tensors) {
    // Validated by the index reader: whole bytes, no overflow.
    nbytes.push_back(BytesForElements(t.dtype, *CheckedNumel(t.shape)).value_or(0));
  }
  return nbytes;
}

std::string DescribeFolder(const HfShardPlan& plan, int64_t max_shard_bytes,
                           const std::vector<int64_t>& nbytes) {
  if (!plan.sharded()) {
    return absl::StrCat(kHfSingleFileName, " alone (everything fits in ",
                        WithThousands(max_shard_bytes), " bytes: no index)");
  }
  std::string line =
      absl::StrCat(plan.files.size(), " files of at most ", WithThousands(max_shard_bytes),
                   " bytes of tensors (", plan.files.front(), " ... ", plan.files.back(), ") and ",
                   kHfIndexFileName);
  const int64_t over =
      std::count_if(nbytes.begin(), nbytes.end(), [&](int64_t n) { return n > max_shard_bytes; });
  if (over > 0) {
    absl::StrAppend(&line, "; ", over, over == 1 ? " tensor" : " tensors",
                    " larger than that alone in a file");
  }
  return line;
}

}  // namespace sdrt::cli
