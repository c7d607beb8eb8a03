// The parts of `sdrt load` (tools/sdrt/load.cc) around LoadStateDict: rank 0's outline of
// SRC, which every rank builds its layout from (ShardingPlan::MetaStateDict), and the check
// of every rank's pieces afterwards.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_LOAD_SETUP_H_
#define SDRT_TOOLS_SDRT_INTERNAL_LOAD_SETUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/device_mesh.h"

namespace sdrt::cli {

// What every rank needs to know of rank 0's SRC: its tensor list (what an engine's model
// definition knows) and, for an sdrt sharded folder, the layout it was written in.
struct SourceOutline {
  std::vector<SafetensorsTensorSpec> tensors;
  bool sharded = false;
  int64_t sharded_ranks = 0;  // a sharded folder's world size, mesh ("2x2") and plan
  std::string sharded_mesh;
  std::string sharded_plan;
  std::string engine_layout;  // RecordedEngineLayout of its metadata (engine_index.h)
};

// `source`'s outline as bytes to send (CBOR), and back. DecodeOutline: InvalidArgument for
// bytes that do not decode or a dtype name it cannot parse.
std::string EncodeOutline(const CheckpointSource& source);
absl::StatusOr<SourceOutline> DecodeOutline(const std::string& bytes);

// How the loaded pieces are checked, on every rank.
struct LoadCheck {
  std::string verify_dir;  // --verify INDIR, or empty
  std::string src;         // SRC
  std::string mesh_text;   // --mesh, for messages
  // --mesh's mesh, which verify_dir's must be (null with a parallel layout description).
  const DeviceMesh* mesh = nullptr;
  int rank = 0;
  // Without --verify, for a sharded SRC or where only rank 0 was sure to see SRC (the load
  // read it with kRoot): every tensor is gathered to rank 0 over `comm` in buckets of
  // `bucket_bytes` and compared there with `source` (SRC as rank 0 opened it): a sharded
  // folder's index hashes, else its full tensors.
  bool gathered = false;
  // For a sharded SRC under a parallel layout description, whose tensors live on their
  // stage's ranks only (which a gather to rank 0 does not take): each rank loads the
  // tensors it holds whole again from `source` (LoadStateDict into plain tensors over
  // `comm`, a reshard from the rank files), checks each against the folder's index hash,
  // and its piece against DistributeTensor of it.
  bool whole_on_each_rank = false;
  // SRC as this rank opened it; null where it did not (off rank 0 with kRoot).
  const CheckpointSource* source = nullptr;
  Communicator* comm = nullptr;
  int64_t bucket_bytes = 0;
};

// The names of this rank's pieces in `local` that differ, by xxh64: from `verify_dir`'s rank
// file (a sharded checkpoint); without it and `gathered`, the full tensors gathered to rank
// 0 against rank 0's SRC (collective; names on rank 0 only); with `whole_on_each_rank`, as
// that says (collective); else from DistributeTensor of SRC's full tensors (SRC must be
// readable on every rank).
// InvalidArgument when `verify_dir` is of another mesh or plan (its pieces cannot match)
// or lacks a tensor; the errors of opening either; GatherStateDict's and LoadStateDict's.
absl::StatusOr<std::vector<std::string>> CheckLoaded(const LoadCheck& check, const Map& local);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_LOAD_SETUP_H_
