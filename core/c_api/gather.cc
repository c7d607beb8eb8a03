// sdrt/c_api.h: sdrt_gather and sdrt_gather_write (GatherStateDict + WriteSafetensors).
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/status_macros.h"

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

namespace {

// The communicator of `options` (required), copied into `o`.
absl::StatusOr<sdrt::Communicator*> OptionsComm(const sdrt_gather_options_t* options,
                                                sdrt_gather_options_t* o) {
  SDRT_RETURN_IF_ERROR(c_api::NotNull(options, "options (comm is required)"));
  SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
  *o = *options;
  return c_api::CommOf(o->comm, true, "options.comm");
}

// Checks the rest of `o` and fills `go` (comm, ranks_only, cpu_offload, bucket_bytes).
absl::Status Prepare(const c_api::StateDictObject& state_dict, const sdrt_gather_options_t& o,
                     sdrt::Communicator* comm, sdrt::GatherOptions* go) {
  SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(o.timeout_seconds));
  go->comm = comm;
  if (o.num_ranks_only < 0 || (o.num_ranks_only > 0 && o.ranks_only == nullptr)) {
    return absl::InvalidArgumentError("options.ranks_only is NULL or num_ranks_only < 0");
  }
  go->ranks_only.assign(o.ranks_only, o.ranks_only + o.num_ranks_only);
  go->cpu_offload = o.cpu_offload != 0;
  go->bucket_bytes = o.bucket_bytes;
  return c_api::WaitForStream(o.stream, state_dict.map);
}

}  // namespace

extern "C" {

sdrt_status_t sdrt_gather(sdrt_state_dict_t state_dict, const sdrt_gather_options_t* options,
                          sdrt_state_dict_t* out) {
  return Guard("sdrt_gather", [&]() -> absl::Status {
    c_api::StatsScope scope;
    sdrt_gather_options_t o;
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm, OptionsComm(options, &o));
    // The communicator found, what this rank refuses every rank returns.
    c_api::StateDictObject* sd = nullptr;
    sdrt::GatherOptions go;
    SDRT_RETURN_IF_ERROR(c_api::RefusedOnEveryRank(
        comm, o.timeout_seconds, "GatherStateDict", [&]() -> absl::Status {
          SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
          SDRT_ASSIGN_OR_RETURN(sd, c_api::Resolve(state_dict, "state_dict"));
          return Prepare(*sd, o, comm, &go);
        }()));
    sdrt::TransferStats stats;
    go.stats = &stats;
    absl::StatusOr<sdrt::Map> gathered;
    {
      c_api::ScopedTimeout timeout(go.comm, o.timeout_seconds);
      gathered = sdrt::GatherStateDict(sd->map, go);
    }
    scope.stats().bytes_sent = stats.sent_bytes;
    scope.stats().bytes_received = stats.received_bytes;
    scope.stats().collectives = stats.collectives;
    scope.stats().data_collectives = stats.exchanges;
    if (!gathered.ok()) return gathered.status();
    // A tensor that needed no gather (one rank) may come back as the caller's strided buffer;
    // the C API promises contiguous full tensors sdrt owns.
    for (size_t i = 0; i < gathered->size(); ++i) {
      sdrt::Value& v = gathered->value(i);
      if (v.kind() == sdrt::ValueKind::kTensor && !v.as_tensor().is_contiguous()) {
        SDRT_ASSIGN_OR_RETURN(sdrt::Tensor dense, v.as_tensor().Contiguous());
        v = sdrt::Value(std::move(dense));
      }
    }
    auto object = std::make_unique<c_api::StateDictObject>();
    object->map = *std::move(gathered);
    *out = c_api::NewHandle<sdrt_state_dict_t>(std::move(object));
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_gather_write(sdrt_state_dict_t state_dict, const char* path,
                                const sdrt_gather_options_t* options) {
  return Guard("sdrt_gather_write", [&]() -> absl::Status {
    c_api::StatsScope scope;
    sdrt_gather_options_t o;
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm, OptionsComm(options, &o));
    // The communicator found, what this rank refuses every rank returns.
    c_api::StateDictObject* sd = nullptr;
    sdrt::GatherOptions go;
    int writer = 0;
    SDRT_RETURN_IF_ERROR(c_api::RefusedOnEveryRank(
        comm, o.timeout_seconds, "GatherStateDict", [&]() -> absl::Status {
          SDRT_ASSIGN_OR_RETURN(sd, c_api::Resolve(state_dict, "state_dict"));
          SDRT_RETURN_IF_ERROR(Prepare(*sd, o, comm, &go));
          if (go.ranks_only.size() > 1) {
            return absl::InvalidArgumentError("options.ranks_only names more than one writer");
          }
          writer = go.ranks_only.empty() ? 0 : go.ranks_only[0];
          if (writer < 0 || writer >= comm->size()) {  // no rank would write, every rank OK
            return absl::InvalidArgumentError(
                absl::StrCat("options.ranks_only names rank ", writer,
                             " as the writer, which is not one of the communicator's ",
                             comm->size(), " ranks"));
          }
          return absl::OkStatus();
        }()));
    go.ranks_only = {writer};
    go.cpu_offload = true;
    sdrt::TransferStats stats;
    go.stats = &stats;
    c_api::ScopedTimeout timeout(go.comm, o.timeout_seconds);
    absl::StatusOr<sdrt::Map> gathered = sdrt::GatherStateDict(sd->map, go);
    scope.stats().bytes_sent = stats.sent_bytes;
    scope.stats().bytes_received = stats.received_bytes;
    scope.stats().data_collectives = stats.exchanges;
    if (!gathered.ok()) {
      scope.stats().collectives = stats.collectives;
      return gathered.status();
    }
    absl::Status written = absl::OkStatus();
    if (go.comm->rank() == writer) {
      if (path == nullptr) {
        written = absl::InvalidArgumentError("path is NULL on the writing rank");
      } else {
        std::vector<std::pair<std::string, sdrt::Tensor>> tensors;
        for (size_t i = 0; i < gathered->size() && written.ok(); ++i) {
          const sdrt::Value& v = gathered->value(i);
          if (v.kind() != sdrt::ValueKind::kTensor) {
            written = absl::InvalidArgumentError("entry '" + gathered->key(i) +
                                                 "' is not a tensor after the gather");
          } else {
            tensors.emplace_back(gathered->key(i), v.as_tensor());
          }
        }
        // A link at `path` is replaced by the file, never written through.
        sdrt::WriteSafetensorsOptions write;
        write.follow_symlinks = false;
        if (written.ok()) written = sdrt::WriteSafetensors(path, tensors, {}, write);
        std::error_code ec;
        if (written.ok()) {
          scope.stats().bytes_written =
              static_cast<int64_t>(std::filesystem::file_size(path, ec));
        }
      }
    }
    // Every rank returns the writer's status.
    const absl::Status agreed = sdrt::AgreeAcrossRanks(*go.comm, "sdrt_gather_write", "", {},
                                                       written, &stats);
    scope.stats().collectives = stats.collectives;
    return agreed;
  });
}

}  // extern "C"
