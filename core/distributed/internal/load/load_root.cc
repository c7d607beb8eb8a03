// LoadFromRoot (load_paths.h), LoadStateDict's kRoot: the root's source as a full state
// dict of views of its mapping (registered with CUDA first for CUDA locals), sent to every
// rank's pieces by BroadcastStateDict.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/load/load_paths.h"
#include "sdrt/core/io/internal/open_regular_file.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

constexpr absl::string_view kOp = "LoadStateDict";
constexpr int kRoot = 0;

// Every tensor of `source` (CheckpointSource::Get: a view of the mapping where aligned).
// For CUDA locals the mapping is registered with `device` first, so the copies to the
// device need no staging; `note` says why it could not be (the copies are then only
// slower).
absl::StatusOr<Map> FullOnRoot(const CheckpointSource& source, const Device& device,
                               std::string& note) {
  if (device.is_cuda()) {
    HostRegistrationOptions registration;
    registration.device = device.index;
    for (size_t i = 0; i < source.files().size() && note.empty(); ++i) {
      const SafetensorsFile& file = source.file(static_cast<int>(i));
      // No registration boundary inside a tensor: each is copied to the device in one piece.
      registration.unbroken_ranges = file.TensorByteRanges();
      // The mapping is PROT_READ: only a read-only registration can pin it.
      const absl::Status pinned = PinStorage(
          *file.storage(), kHostRegisterReadOnly | kHostRegisterPortable, registration);
      if (!pinned.ok()) {
        note = absl::StrCat("; the root copies from pageable memory (", source.files()[i].path,
                            ": ", pinned.message(), ")");
      }
    }
  }
  // A file cut short since it was opened would fault (SIGBUS) where the broadcast reads its
  // mapping past the new end: refused first, as kAll refuses it (one cut during the call
  // still faults; a mapping cannot be read safely while its file shrinks).
  for (const CheckpointSourceFile& f : source.files()) {
    struct stat st;
    if (stat(f.path.c_str(), &st) != 0) {
      const int err = errno;
      return absl::Status(absl::ErrnoToStatusCode(err),
                          absl::StrCat(f.path, ": stat: ", std::strerror(err)));
    }
    // Another file renamed over the path leaves the mapping reading the file opened (it
    // holds it): only that file cut short matters.
    const FileIdentity opened{f.device, f.inode, f.size};
    const FileIdentity now = IdentityOf(st);
    if (!IsOtherFile(opened, now)) SDRT_RETURN_IF_ERROR(CheckSameFile(f.path, opened, now));
  }
  Map full;
  full.Reserve(source.tensors().size());
  for (const CheckpointSourceTensor& t : source.tensors()) {
    SDRT_ASSIGN_OR_RETURN(Tensor tensor, source.Get(t.name));
    full.Set(t.name, Value(std::move(tensor)));
  }
  return full;
}

}  // namespace

absl::StatusOr<LoadResult> LoadFromRoot(const CheckpointSource* source,
                                        const absl::Status& precondition, Map& local,
                                        const LoadOptions& options, LoadStats& stats) {
  Communicator& comm = *options.comm;
  const bool root = comm.rank() == kRoot;
  absl::Status local_error = precondition;
  if (local_error.ok() && options.rank >= 0 && options.rank != comm.rank()) {
    local_error = absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is not the communicator's rank ", comm.rank(),
                     " (read kRoot loads the communicator's ranks)"));
  }
  Map full;
  AgreementPayload note;  // the root's, for every rank's read_reason
  if (local_error.ok() && root) {
    absl::StatusOr<Map> made = FullOnRoot(*source, options.device, note.mine);
    local_error = made.status();
    if (made.ok()) full = *std::move(made);
  }
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(comm, kOp, "", {}, local_error, nullptr, &note));
  absl::StrAppend(&stats.read_reason, note.all[kRoot]);

  BroadcastOptions broadcast;
  broadcast.comm = &comm;
  broadcast.device = options.device;
  broadcast.strict = options.strict;
  broadcast.bucket_bytes = options.bucket_bytes;
  broadcast.root = kRoot;
  broadcast.stats = &stats.transfer;
  broadcast.progress = options.progress;
  absl::StatusOr<BroadcastResult> broadcasted = BroadcastStateDict(full, local, broadcast);
  if (!broadcasted.ok()) {  // the caller called LoadStateDict: said first, the code kept
    return absl::Status(broadcasted.status().code(),
                        absl::StrCat("LoadStateDict: ", broadcasted.status().message()));
  }
  BroadcastResult& result = *broadcasted;
  if (root) stats.bytes_read = source->total_bytes();  // its mapping, read whole
  const absl::flat_hash_set<std::string> missing(result.missing_keys.begin(),
                                                 result.missing_keys.end());
  SDRT_ASSIGN_OR_RETURN(const Leaves leaves, CollectLeaves(local));
  for (const Leaf& leaf : leaves) {
    if (!missing.contains(leaf.path)) stats.bytes_kept += LocalBytes(*leaf.value);
  }
  return LoadResult{std::move(result.missing_keys), std::move(result.unexpected_keys)};
}

}  // namespace sdrt::internal
