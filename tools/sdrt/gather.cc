// `mpiexec -n N sdrt gather INDIR OUT [--max-shard-size 5GB] [--device cpu|cuda]
// [--bucket-mib 256]`: every rank loads its file of a sharded checkpoint as DTensors,
// GatherStateDict gathers them with ranks_only {0} and cpu_offload, and rank 0 checks each
// full tensor against the index's xxh64 and writes OUT atomically: one safetensors file, or
// when OUT ends in '/' or is a folder, a Hugging Face folder (WriteHfCheckpoint) of files
// of at most --max-shard-size bytes; the source's tensors in its order, with its
// __metadata__.
#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/hf_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/deadline.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/output_path.h"
#include "sdrt/tools/sdrt/internal/session.h"

namespace sdrt::cli {
namespace {

struct GatherArgs {
  std::string in_dir;
  std::string out;
  std::string device = "cpu";
  int64_t bucket_mib = 256;
  std::string max_shard_size = "5GB";
  bool max_shard_size_given = false;
  bool json = false;
  bool overwrite = false;
  bool progress = false;
  double timeout_seconds = kDefaultTimeoutSeconds;
};

// This rank's shards as a state dict of DTensors on the session's device.
absl::StatusOr<Map> LoadShards(const GatherArgs& args, const Session& session,
                               ShardedCheckpointIndex* index) {
  absl::StatusOr<RankShards> shards = LoadRankShards(args.in_dir, session.rank());
  if (!shards.ok()) return shards.status();
  if (shards->index.world_size != session.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.in_dir, " has ", shards->index.world_size, " ranks but mpiexec started ",
                     session.size(), " (run with -n ", shards->index.world_size, ")"));
  }
  Map state_dict;
  state_dict.Reserve(shards->tensors.size());
  for (auto& [name, dtensor] : shards->tensors) {
    if (session.device.is_cpu()) {
      state_dict.Set(name, Value(dtensor));
      continue;
    }
    absl::StatusOr<Tensor> local = dtensor.local().To(session.device);
    if (!local.ok()) return local.status();
    absl::StatusOr<DTensor> moved = dtensor.WithLocal(*std::move(local));
    if (!moved.ok()) return moved.status();
    state_dict.Set(name, Value(*std::move(moved)));
  }
  *index = std::move(shards->index);
  return state_dict;
}

// Whether OUT names a Hugging Face folder to write: it ends in '/' or is a folder.
bool OutIsFolder(const std::string& out) {
  struct stat st;
  return (!out.empty() && out.back() == '/') ||
         (stat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
}

// Each tensor's bytes (numel x element size; the index reader checked the shapes).
std::vector<int64_t> TensorBytes(const ShardedCheckpointIndex& index) {
  std::vector<int64_t> nbytes;
  for (const ShardedCheckpointTensor& t : index.tensors) {
    // Validated by the index reader: whole bytes, no overflow.
    nbytes.push_back(BytesForElements(t.dtype, *CheckedNumel(t.shape)).value_or(0));
  }
  return nbytes;
}

// Rank 0, before any data moves and again just before writing: OUT must not be a symbolic
// link, inside INDIR or contain it once links are resolved, or be a file of it by identity
// (writing there would replace a file of the checkpoint being read). A file OUT must be
// absent or a safetensors file; a folder OUT (with `plan`, the files it will hold) absent,
// empty or a Hugging Face folder sdrt could have written, and none of the files it will
// hold an input either.
absl::Status CheckOut(const GatherArgs& args, const HfShardPlan* plan) {
  SDRT_RETURN_IF_ERROR(CheckOutputPath(args.out, {args.in_dir}));
  if (plan == nullptr) return CheckReplaceableSafetensors(args.out, args.overwrite);
  std::string dir = args.out;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    std::vector<std::string> names = plan->files;
    names.emplace_back(kHfIndexFileName);
    for (const std::string& name : names) {
      SDRT_RETURN_IF_ERROR(CheckOutputPath(absl::StrCat(dir, "/", name), {args.in_dir}));
    }
  }
  return CheckHfCheckpointTarget(args.out, args.overwrite);
}

// Rank 0 (it alone writes, so it alone decides what OUT is), before any data moves: for a
// folder OUT the plan of its files, then CheckOut. --max-shard-size with a file OUT is an
// error rather than ignored.
absl::Status PlanOut(const GatherArgs& args, const ShardedCheckpointIndex& index,
                     int64_t max_shard_bytes, std::optional<HfShardPlan>* plan) {
  if (!OutIsFolder(args.out)) {
    if (args.max_shard_size_given) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max-shard-size is for a folder OUT (one ending in / or an existing folder); ",
          args.out, " is a file"));
    }
    return CheckOut(args, nullptr);
  }
  SDRT_ASSIGN_OR_RETURN(*plan, PlanHfShards(TensorBytes(index), max_shard_bytes));
  return CheckOut(args, &**plan);
}

// Rank 0: checks every gathered tensor against the index and writes OUT (a Hugging Face
// folder by `plan` when it is given).
absl::Status CheckAndWrite(const GatherArgs& args, const ShardedCheckpointIndex& index,
                           const Map& gathered, const HfShardPlan* plan, int64_t max_shard_bytes) {
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
  SDRT_RETURN_IF_ERROR(CheckOut(args, plan));  // nothing has become a link since the first check
  if (plan != nullptr) {
    WriteHfCheckpointOptions options;
    options.max_shard_bytes = max_shard_bytes;
    options.overwrite = args.overwrite;
    const auto source = [&tensors](size_t i) -> absl::StatusOr<Tensor> {
      return tensors[i].second;
    };
    return WriteHfCheckpoint(args.out, index.TensorSpecs(), source, index.metadata, options)
        .status();
  }
  // The index lists the tensors in the source's byte order; OUT keeps it.
  WriteSafetensorsOptions write_options;
  write_options.data_in_given_order = true;
  write_options.follow_symlinks = false;  // never into INDIR, even if OUT became a link
  return WriteSafetensors(args.out, tensors, index.metadata, write_options);
}

// The line saying what the folder holds: "3 files of at most 1,000 bytes of tensors
// (model-00001-of-00003.safetensors ... model-00003-of-00003.safetensors) and
// model.safetensors.index.json", then how many tensors over the limit are alone in a file.
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

int RunGather(const GatherArgs& args) {
  absl::StatusOr<Session> session = StartSession(args.device, TimeoutFrom(args.timeout_seconds));
  if (!session.ok()) {
    EndJobIfTimedOut("gather", session.status());
    // Before the session there is no communicator: the launcher's rank says who prints.
    return ReportError("gather", session.status(), LauncherRank());
  }
  const auto fail = [&](const absl::Status& status) {
    EndJobIfTimedOut("gather", status);  // every live rank prints; the job ends
    return ReportError("gather", status, session->rank());
  };
  if (args.bucket_mib < 1 || args.bucket_mib > kMaxBucketMib) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--bucket-mib must be in [1, ", kMaxBucketMib, "], got ", args.bucket_mib)));
  }
  const absl::StatusOr<int64_t> max_shard_bytes = ParseMaxShardSize(args.max_shard_size);
  if (!max_shard_bytes.ok()) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--max-shard-size: ", max_shard_bytes.status().message())));
  }
  ShardedCheckpointIndex index;
  absl::StatusOr<Map> shards = LoadShards(args, *session, &index);
  absl::Status status = shards.status();
  std::optional<HfShardPlan> plan;  // rank 0's, for a folder OUT
  if (status.ok() && session->rank() == 0) status = PlanOut(args, index, *max_shard_bytes, &plan);
  status = AgreeUnlessTimedOut(session->world(), status);
  if (!status.ok()) return fail(status);

  GatherOptions options;
  options.comm = &session->data();
  options.cpu_offload = true;
  options.ranks_only = {0};
  options.bucket_bytes = args.bucket_mib << 20;
  TransferStats stats;
  options.stats = &stats;
  options.progress = ProgressLine("gather", session->rank() == 0 && (!args.json || args.progress),
                                  args.progress);
  status = session->world().Barrier();
  if (!status.ok()) return fail(status);
  const double start = NowSeconds();
  absl::StatusOr<Map> gathered = GatherStateDict(*shards, options);
  const double gather_seconds = NowSeconds() - start;
  status = AgreeUnlessTimedOut(session->world(), gathered.status());
  if (!status.ok()) return fail(status);
  shards->EraseIf([](const std::string&, const Value&) { return true; });  // unmap early

  absl::Status written = absl::OkStatus();
  const double write_start = NowSeconds();
  if (session->rank() == 0) {
    written = CheckAndWrite(args, index, *gathered, plan ? &*plan : nullptr, *max_shard_bytes);
  }
  const double write_seconds = NowSeconds() - write_start;
  status = AgreeUnlessTimedOut(session->world(), written);
  if (!status.ok()) return fail(status);
  absl::StatusOr<std::vector<int64_t>> peaks = AllPeakRssBytes(session->world());
  if (!peaks.ok()) return fail(peaks.status());
  if (session->rank() != 0) return kExitOk;

  const std::vector<int64_t> nbytes = TensorBytes(index);
  const int64_t bytes = std::accumulate(nbytes.begin(), nbytes.end(), int64_t{0});
  const double gbps = gather_seconds > 0 ? bytes / gather_seconds / 1e9 : 0;
  if (args.json) {
    nlohmann::ordered_json out = {{"command", "gather"},
                                  {"in_dir", args.in_dir},
                                  {"out", args.out},
                                  {"ranks", session->size()},
                                  {"device", args.device},
                                  {"tensors", index.tensors.size()},
                                  {"bytes", bytes},
                                  {"gather_seconds", gather_seconds},
                                  {"gather_gbps", gbps},
                                  {"write_seconds", write_seconds},
                                  {"collectives", stats.collectives},
                                  {"exchanges", stats.exchanges},
                                  {"buffer_bytes", stats.buffer_bytes},
                                  {"verified", true},
                                  {"peak_rss_bytes", *peaks}};
    out["layout"] = plan ? "huggingface" : "safetensors";
    if (plan) {
      out["max_shard_bytes"] = *max_shard_bytes;
      out["files"] = plan->files;
    }
    std::cout << JsonText(out, 2) << "\n";
    return kExitOk;
  }
  std::cout << "gathered " << index.tensors.size() << " tensors (" << HumanBytes(bytes) << ") from "
            << session->size() << " ranks into " << Printable(args.out) << "\n"
            << "  gather " << absl::StrFormat("%.3f s, %.2f GB/s", gather_seconds, gbps) << "; "
            << stats.collectives << " collectives (" << stats.exchanges
            << (stats.exchanges == 1 ? " exchange" : " exchanges") << " moving data, buffers "
            << HumanBytes(stats.buffer_bytes) << "); write " << absl::StrFormat("%.3f s", write_seconds) << "\n"
            << "  every tensor matches the index's xxh64\n";
  if (plan) {
    std::cout << "  Hugging Face folder: " << DescribeFolder(*plan, *max_shard_bytes, nbytes)
              << "\n";
  }
  std::cout << "  peak memory per rank:";
  for (int64_t p : *peaks) std::cout << " " << HumanBytes(p);
  std::cout << "\n";
  return kExitOk;
}

}  // namespace

void AddGatherCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GatherArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gather",
      "gather a sharded checkpoint into one safetensors file or a Hugging Face folder (run under "
      "mpiexec -n WORLD_SIZE)");
  cmd->add_option("INDIR", args->in_dir, "sharded checkpoint folder (sdrt shard)")->required();
  cmd->add_option("OUT", args->out,
                  "safetensors file to write, or a Hugging Face folder when OUT ends in / or is "
                  "a folder (rank 0; atomic)")
      ->required();
  CLI::Option* max_shard_size =
      cmd->add_option("--max-shard-size", args->max_shard_size,
                      "most tensor bytes per file of a folder OUT: 500MB, 2GiB, 5GB or bytes "
                      "(a larger tensor is alone in its file)")
          ->capture_default_str();
  cmd->add_option("--device", args->device, "where the shards are gathered: cpu or cuda")
      ->capture_default_str();
  cmd->add_option("--bucket-mib", args->bucket_mib, "bytes gathered per collective, MiB")
      ->capture_default_str();
  cmd->add_flag("--overwrite", args->overwrite,
                "replace OUT when it is a safetensors file, or a Hugging Face folder sdrt "
                "could have written");
  cmd->add_flag("--json", args->json, "print the results as JSON");
  cmd->add_flag("--progress", args->progress,
                "progress lines on rank 0's stderr even when it is not a terminal (under "
                "mpiexec it never is)");
  AddTimeoutOption(cmd, &args->timeout_seconds);
  cmd->callback([args, exit_code, max_shard_size] {
    args->max_shard_size_given = max_shard_size->count() > 0;
    *exit_code = RunGather(*args);
  });
}

}  // namespace sdrt::cli
