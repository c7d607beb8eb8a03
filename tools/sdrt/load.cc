// `mpiexec -n N sdrt load SRC --mesh 2x2 --plan P [--read auto|all|root] [--verify INDIR]
// [--device cpu|cuda]`: what an inference engine does at start-up. SRC is a safetensors
// file, a Hugging Face folder or a folder of safetensors files (CheckpointSource). Rank 0
// maps SRC's files (pinned with --device cuda; pageable, with a one-line warning, when the
// mapping cannot be registered) and sends the other ranks its tensor list; every rank makes
// meta DTensors with the plan's placements, which BroadcastStateDict (--read root) or, on
// every rank from its own view of SRC, LoadStateDict (--read all) fills (read_mode.h says
// what auto picks); every rank checks its pieces by
// xxh64 against INDIR's rank file (or against its own slicing of FILE without --verify).
// Rank 0 prints bytes moved, time, GB/s, collectives and peak memory per rank.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/dtensor_ops.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/deadline.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/read_mode.h"
#include "sdrt/tools/sdrt/internal/session.h"

namespace sdrt::cli {
namespace {

struct LoadArgs {
  std::string file;
  std::string mesh;
  std::string plan;
  std::string verify_dir;
  std::string device = "cpu";
  std::string read = "auto";
  int64_t bucket_mib = 256;
  bool json = false;
  bool progress = false;
  double timeout_seconds = kDefaultTimeoutSeconds;
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  IntVector shape;
};

// Rank 0's tensor list, sent to every rank (what the engine's model definition knows).
absl::StatusOr<std::vector<TensorInfo>> ShareTensorList(const Session& session,
                                                        const CheckpointSource* source) {
  std::string bytes;
  if (source != nullptr) {
    nlohmann::json list = nlohmann::json::array();
    for (const CheckpointSourceTensor& e : source->tensors()) {
      list.push_back({e.name, std::string(DTypeName(e.dtype)),
                      std::vector<int64_t>(e.shape.begin(), e.shape.end())});
    }
    const std::vector<uint8_t> cbor = nlohmann::json::to_cbor(list);
    bytes.assign(cbor.begin(), cbor.end());
  }
  absl::Status status = session.world().BroadcastBytes(&bytes, 0);
  if (!status.ok()) return status;
  std::vector<TensorInfo> infos;
  for (const nlohmann::json& e : nlohmann::json::from_cbor(bytes)) {
    TensorInfo info;
    info.name = e[0].get<std::string>();
    absl::StatusOr<DType> dtype = DTypeFromName(e[1].get<std::string>());
    if (!dtype.ok()) return dtype.status();
    info.dtype = *dtype;
    for (int64_t s : e[2].get<std::vector<int64_t>>()) info.shape.push_back(s);
    infos.push_back(std::move(info));
  }
  return infos;
}

// Meta DTensors with the plan's placements: the local state dict before loading.
absl::StatusOr<Map> MetaStateDict(const std::vector<TensorInfo>& infos,
                                  const std::shared_ptr<const DeviceMesh>& mesh,
                                  const ShardingPlan& plan) {
  Map local;
  local.Reserve(infos.size());
  for (const TensorInfo& info : infos) {
    absl::StatusOr<std::vector<Placement>> placements =
        plan.PlacementsFor(info.name, info.shape, *mesh);
    if (!placements.ok()) return placements.status();
    absl::StatusOr<Tensor> meta = Tensor::Meta(IntVector(info.shape.size(), 0), info.dtype);
    if (!meta.ok()) return meta.status();
    absl::StatusOr<DTensor> d = DTensor::Make(*std::move(meta), mesh, *placements, info.shape);
    if (!d.ok()) return d.status();
    local.Set(info.name, Value(*std::move(d)));
  }
  return local;
}

// Checks this rank's loaded pieces; returns the names that differ. InvalidArgument when
// --verify names a checkpoint of another mesh or plan (its pieces cannot match).
absl::StatusOr<std::vector<std::string>> Verify(const LoadArgs& args, const Session& session,
                                                const DeviceMesh& mesh, const Map& local) {
  std::vector<std::string> wrong;
  std::optional<RankShards> expected;
  // INDIR's pieces by name: one lookup per tensor, so verifying n tensors is O(n).
  absl::flat_hash_map<std::string_view, const DTensor*> expected_by_name;
  std::optional<CheckpointSource> file;
  if (!args.verify_dir.empty()) {
    absl::StatusOr<RankShards> shards = LoadRankShards(args.verify_dir, session.rank());
    if (!shards.ok()) return shards.status();
    expected = *std::move(shards);
    if (expected->index.mesh->shape() != mesh.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          args.verify_dir, " is sharded on mesh ",
          absl::StrJoin(expected->index.mesh->shape(), "x"), " but --mesh is ", args.mesh));
    }
    expected_by_name.reserve(expected->tensors.size());
    for (const auto& [name, dtensor] : expected->tensors) expected_by_name.emplace(name, &dtensor);
  } else {
    absl::StatusOr<CheckpointSource> opened = CheckpointSource::Open(args.file);
    if (!opened.ok()) return opened.status();
    file = *std::move(opened);
  }
  for (size_t i = 0; i < local.size(); ++i) {
    // A DTensor, or the full tensor for a 0-dim one (BroadcastStateDict replaces 0-dim
    // leaves by the checkpoint's value, as PyTorch).
    const Value& value = local.value(i);
    const DTensor* got = value.kind() == ValueKind::kDTensor ? &value.as_dtensor() : nullptr;
    if (got == nullptr && value.kind() != ValueKind::kTensor) {
      return absl::InternalError(absl::StrCat(local.key(i), ": the load left no tensor"));
    }
    absl::StatusOr<Tensor> mine =
        (got != nullptr ? got->local() : value.as_tensor()).To(Device::CPU());
    if (!mine.ok()) return mine.status();
    Tensor want;
    if (expected.has_value()) {
      const auto it = expected_by_name.find(local.key(i));
      if (it == expected_by_name.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(args.verify_dir, " has no tensor ", local.key(i)));
      }
      const DTensor& expected_piece = *it->second;
      if (got != nullptr && expected_piece.placements() != got->placements()) {
        return absl::InvalidArgumentError(
            absl::StrCat(local.key(i), ": ", args.verify_dir, " holds it as ",
                         PlacementsToString(expected_piece.placements()), ", the plan gives ",
                         PlacementsToString(got->placements())));
      }
      want = expected_piece.local();
    } else {
      absl::StatusOr<Tensor> full = file->Get(local.key(i));
      if (!full.ok()) return full.status();
      if (got != nullptr) {
        absl::StatusOr<DTensor> piece =
            DistributeTensor(*full, got->mesh(), got->placements(), session.rank());
        if (!piece.ok()) return piece.status();
        want = piece->local();
      } else {
        want = *full;
      }
    }
    absl::StatusOr<uint64_t> a = TensorXxh64(*mine);
    absl::StatusOr<uint64_t> b = TensorXxh64(want);
    if (!a.ok()) return a.status();
    if (!b.ok()) return b.status();
    if (*a != *b || mine->shape() != want.shape()) wrong.push_back(local.key(i));
  }
  return wrong;
}

int RunLoad(const LoadArgs& args) {
  absl::StatusOr<Session> session = StartSession(args.device, TimeoutFrom(args.timeout_seconds));
  if (!session.ok()) {
    EndJobIfTimedOut("load", session.status());
    // Before the session there is no communicator: the launcher's rank says who prints.
    return ReportError("load", session.status(), LauncherRank());
  }
  const auto fail = [&](const absl::Status& status) {
    EndJobIfTimedOut("load", status);  // every live rank prints; the job ends
    return ReportError("load", status, session->rank());
  };
  // Rank 0 maps the file; every rank checks the mesh and the plan.
  absl::Status status =
      args.bucket_mib >= 1 && args.bucket_mib <= kMaxBucketMib
          ? absl::OkStatus()
          : absl::InvalidArgumentError(absl::StrCat("--bucket-mib must be in [1, ", kMaxBucketMib,
                                                    "], got ", args.bucket_mib));
  std::optional<CheckpointSource> file;
  if (status.ok() && session->rank() == 0) {
    CheckpointSource::Options open_options;
    open_options.file_options.pin_mapping = session->device.is_cuda();
    if (session->device.is_cuda()) open_options.file_options.pin_device = session->device.index;
    absl::StatusOr<CheckpointSource> opened = CheckpointSource::Open(args.file, open_options);
    if (opened.ok()) {
      file = *std::move(opened);
      // Unpinned is only slower: the broadcast copies out of the mapping with CopyFrom.
      for (size_t i = 0; i < file->files().size(); ++i) {
        const absl::Status& pinned = file->file(static_cast<int>(i)).pin_status();
        if (!pinned.ok()) {
          WriteStderrLine(absl::StrCat("sdrt load: warning: copying from pageable memory (",
                                       Printable(pinned.message()), ")"));
          break;
        }
      }
    } else {
      status = opened.status();
    }
  }
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::FromString(args.mesh);
  if (status.ok() && !mesh.ok()) status = mesh.status();
  if (status.ok() && mesh->num_ranks() != session->size()) {
    status =
        absl::InvalidArgumentError(absl::StrCat("--mesh ", args.mesh, " has ", mesh->num_ranks(),
                                                " ranks but mpiexec started ", session->size()));
  }
  absl::StatusOr<ShardingPlan> plan = ShardingPlan::FromSpec(args.plan);
  if (status.ok() && !plan.ok()) status = plan.status();
  if (status.ok() && plan.ok()) status = plan->CheckMesh(*mesh);
  status = AgreeUnlessTimedOut(session->world(), status);
  if (!status.ok()) return fail(status);
  // Which ranks read SRC; with `all`, every other rank opens it too.
  absl::StatusOr<ReadChoice> read =
      ChooseRead(session->world(), args.file, args.read, session->device.is_cuda());
  if (read.ok() && read->all && session->rank() != 0) {
    absl::StatusOr<CheckpointSource> opened = CheckpointSource::Open(args.file);
    if (opened.ok()) file = *std::move(opened);
    status = opened.status();
  }
  status = AgreeUnlessTimedOut(session->world(), read.ok() ? status : read.status());
  if (!status.ok()) return fail(status);

  absl::StatusOr<std::vector<TensorInfo>> infos =
      ShareTensorList(*session, file.has_value() ? &*file : nullptr);
  if (!infos.ok()) return fail(infos.status());
  auto shared_mesh = std::make_shared<const DeviceMesh>(*std::move(mesh));
  absl::StatusOr<Map> local = MetaStateDict(*infos, shared_mesh, *plan);
  Map full;
  if (file.has_value() && !read->all && session->rank() == 0) {
    for (const CheckpointSourceTensor& e : file->tensors()) {
      absl::StatusOr<Tensor> t = file->Get(e.name);
      if (!t.ok()) {
        status = t.status();
        break;
      }
      full.Set(e.name, Value(*std::move(t)));
    }
  }
  status = AgreeUnlessTimedOut(session->world(), local.ok() ? status : local.status());
  if (!status.ok()) return fail(status);

  BroadcastOptions options;
  options.comm = &session->data();
  options.device = session->device;
  options.bucket_bytes = args.bucket_mib << 20;
  options.strict = true;
  CollectiveStats stats;
  options.stats = &stats;
  options.progress =
      ProgressLine("load", session->rank() == 0 && (!args.json || args.progress), args.progress);
  status = session->world().Barrier();
  if (!status.ok()) return fail(status);
  LoadStats load_stats;
  const double start = NowSeconds();
  if (read->all) {
    LoadOptions load_options;
    load_options.comm = &session->data();
    load_options.strict = true;
    load_options.stats = &load_stats;
    load_options.progress = options.progress;
    status = LoadStateDict(*file, *local, load_options).status();
  } else {
    status = BroadcastStateDict(full, *local, options).status();
  }
  const double seconds = NowSeconds() - start;
  status = AgreeUnlessTimedOut(session->world(), status);
  if (!status.ok()) return fail(status);
  if (!read->all) {  // rank 0 read everything (its mapping); every rank kept its pieces
    if (session->rank() == 0) load_stats.bytes_read = file->total_bytes();
    for (size_t i = 0; i < local->size(); ++i) {
      const Value& v = local->value(i);
      const Tensor& t = v.kind() == ValueKind::kDTensor ? v.as_dtensor().local() : v.as_tensor();
      load_stats.bytes_kept += t.numel() * t.element_size();
    }
  }
  absl::StatusOr<std::vector<int64_t>> bytes_read =
      AllGatherInt64(session->world(), load_stats.bytes_read);
  if (!bytes_read.ok()) return fail(bytes_read.status());
  absl::StatusOr<std::vector<int64_t>> bytes_kept =
      AllGatherInt64(session->world(), load_stats.bytes_kept);
  if (!bytes_kept.ok()) return fail(bytes_kept.status());

  absl::StatusOr<std::vector<std::string>> wrong = Verify(args, *session, *shared_mesh, *local);
  status = AgreeUnlessTimedOut(session->world(), wrong.status());
  if (!status.ok()) return fail(status);
  std::string wrong_text;
  for (const std::string& name : *wrong)
    absl::StrAppend(&wrong_text, wrong_text.empty() ? "" : ",", name);
  absl::StatusOr<std::vector<std::string>> all_wrong = session->world().AllGatherBytes(wrong_text);
  if (!all_wrong.ok()) return fail(all_wrong.status());
  absl::StatusOr<std::vector<int64_t>> peaks = AllPeakRssBytes(session->world());
  if (!peaks.ok()) return fail(peaks.status());
  // Every rank has every rank's verdict, so every rank ends with the same exit code: 2 when
  // the pieces differ from INDIR (the two checkpoints disagree: bad input, as gather's hash
  // check), 1 when they differ from this sdrt's own slicing of FILE (a runtime failure).
  std::vector<std::string> mismatches;
  for (int q = 0; q < session->size(); ++q) {
    if (!(*all_wrong)[q].empty())
      mismatches.push_back(absl::StrCat("rank ", q, ": ", (*all_wrong)[q]));
  }
  const int verdict = mismatches.empty()        ? kExitOk
                      : args.verify_dir.empty() ? kExitRuntimeError
                                                : kExitBadInput;
  if (session->rank() != 0) return verdict;

  int64_t bytes = 0;
  for (const TensorInfo& info : *infos) {
    int64_t n = ElementSize(info.dtype);
    for (int64_t s : info.shape) n *= s;
    bytes += n;
  }
  const double gbps = seconds > 0 ? bytes / seconds / 1e9 : 0;
  const std::string against = args.verify_dir.empty() ? args.file : args.verify_dir;
  std::vector<double> amplification;
  for (size_t q = 0; q < bytes_read->size(); ++q) {
    const int64_t kept = (*bytes_kept)[q];
    amplification.push_back(kept == 0 ? 1.0 : static_cast<double>((*bytes_read)[q]) / kept);
  }
  if (args.json) {
    nlohmann::ordered_json out = {{"command", "load"},
                                  {"file", args.file},
                                  {"mesh", args.mesh},
                                  {"plan", plan->name()},
                                  {"ranks", session->size()},
                                  {"device", args.device},
                                  {"read", read->all ? "all" : "root"},
                                  {"read_reason", read->reason},
                                  {"tensors", infos->size()},
                                  {"bytes", bytes},
                                  {"seconds", seconds},
                                  {"gbps", gbps},
                                  {"collectives", stats.collectives},
                                  {"data_collectives", stats.data_collectives},
                                  {"buckets", stats.buckets},
                                  {"verified_against", against},
                                  {"mismatches", mismatches},
                                  {"bit_exact", mismatches.empty()},
                                  {"bytes_read", *bytes_read},
                                  {"bytes_kept", *bytes_kept},
                                  {"read_amplification", amplification},
                                  {"peak_rss_bytes", *peaks}};
    std::cout << JsonText(out, 2) << "\n";
  } else {
    std::cout << "loaded " << infos->size() << " tensors (" << HumanBytes(bytes) << ") from "
              << Printable(args.file) << " into " << session->size() << " ranks, mesh "
              << Printable(args.mesh) << ", plan " << Printable(plan->name()) << "\n"
              << "  read: " << (read->all ? "all" : "root") << " (" << Printable(read->reason)
              << ")\n";
    if (read->all) {
      std::cout << "  every rank read its pieces "
                << absl::StrFormat("%.3f s, %.2f GB/s", seconds, gbps) << "; read amplification";
      for (double a : amplification) std::cout << absl::StrFormat(" %.3f", a);
      std::cout << "\n";
    } else {
      std::cout << "  broadcast " << absl::StrFormat("%.3f s, %.2f GB/s", seconds, gbps) << "; "
                << stats.collectives << " collectives (" << stats.data_collectives
                << " moving data, " << stats.buckets << " buckets of at most " << args.bucket_mib
                << " MiB)\n";
    }
    std::cout << "  verified against " << Printable(against) << ": "
              << (mismatches.empty() ? "every piece matches" : "MISMATCH") << "\n";
    for (const std::string& m : mismatches) std::cout << "    " << Printable(m) << "\n";
    std::cout << "  peak memory per rank:";
    for (int64_t p : *peaks) std::cout << " " << HumanBytes(p);
    std::cout << "\n";
  }
  if (verdict != kExitOk) {  // the whole list is on stdout; here the count and the first
    int64_t pieces = 0;
    for (const std::string& names : *all_wrong) {
      if (!names.empty()) pieces += 1 + std::count(names.begin(), names.end(), ',');
    }
    const std::string& first = mismatches.front();
    WriteStderrLine(Printable(absl::StrCat(
        "sdrt load: ", pieces, " piece(s) on ", mismatches.size(), " rank(s) differ from ", against,
        "; the first: ", Utf8Prefix(first.substr(0, first.find(',')), 500))));
  }
  return verdict;
}

}  // namespace

void AddLoadCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<LoadArgs>();
  CLI::App* cmd = app.add_subcommand(
      "load",
      "broadcast a full checkpoint from rank 0 into every rank's shards (run under mpiexec)");
  cmd->add_option("SRC", args->file,
                  "full checkpoint (read by rank 0): a safetensors file, a Hugging Face folder or "
                  "a folder of safetensors files")
      ->required();
  cmd->add_option("--mesh", args->mesh, "device mesh shape, e.g. 4 or 2x2")->required();
  cmd->add_option("--plan", args->plan, "fsdp, hsdp, tp, fsdp-tp or PLAN.json")->required();
  cmd->add_option("--verify", args->verify_dir,
                  "sharded checkpoint to compare every piece with (default: every rank "
                  "slices FILE itself, so FILE must be readable on every rank)");
  cmd->add_option("--read", args->read,
                  "who reads SRC: all (every rank its own bytes), root (rank 0, broadcast) or "
                  "auto (all when every rank sees the same files)")
      ->capture_default_str();
  cmd->add_option("--device", args->device, "where the shards go: cpu or cuda")
      ->capture_default_str();
  cmd->add_option("--bucket-mib", args->bucket_mib, "bytes broadcast per collective, MiB")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print the results as JSON");
  cmd->add_flag("--progress", args->progress,
                "progress lines on rank 0's stderr even when it is not a terminal (under "
                "mpiexec it never is)");
  AddTimeoutOption(cmd, &args->timeout_seconds);
  cmd->callback([args, exit_code] { *exit_code = RunLoad(*args); });
}

}  // namespace sdrt::cli
