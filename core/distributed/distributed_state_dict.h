// The distributed state-dict operations: gather a sharded state dict into full tensors,
// broadcast a full state dict from one rank into every rank's sharded one, and distribute
// a full state dict that every rank holds. They mirror PyTorch's `_gather_state_dict`,
// `_broadcast_state_dict` (with `_broadcast_tensors`) and `_distribute_state_dict` (with
// `_distribute_tensors`) of torch/distributed/_state_dict_utils.py (docs/SEMANTICS.md
// sections 5 and 7), with these differences, each deliberate:
//
//   * Data moves in buckets, not tensor by tensor: each call describes its move (from
//     which layout into which) to the one transfer engine (core/distributed/internal/
//     engine/), which packs the pieces of consecutive tensors into buckets of at most
//     `bucket_bytes`, so the number of collectives follows the number of buckets, not of
//     tensors. The gather is the same transfer as FullTensor's and GatherShardedTensor's
//     (core/distributed/dtensor_ops.h), so a state dict gathers to the same bits as its
//     tensors one by one. Every call completes on every rank or fails on every rank: the
//     engine closes each call that moved bytes with one small all-reduce.
//   * Before any data collective the ranks agree on what they are about to move
//     (AgreeAcrossRanks, core/distributed/agreement.h): one small exchange compares every
//     rank's own validation result, the options that shape the collectives and a hash of
//     every rank's skeleton (paths, kinds, global shapes, dtypes, placements, meshes). A
//     mismatch is the same InvalidArgument on every rank, naming the first differing path
//     and both ranks' values (case-012, case-015, case-016); mismatched inputs never hang
//     and never give wrong values.
//   * Uneven, empty and _StridedShard pieces are placed by their owned index sets, and
//     Partial placements are honoured when slicing (the rank at coordinate 0 of a Partial
//     mesh dim keeps the value, the others the reduction's identity), where PyTorch gives
//     every rank the full value (docs/SEMANTICS.md 11.1, 11.7).
//   * The root of a broadcast is any rank of the communicator (PyTorch: global rank 0).
//   * The options that shape the collectives (bucket size, root, ranks_only, cpu_offload)
//     are compared across ranks in the agreement: a rank that differs gets the same error
//     as every other rank ("ranks disagree on the options: ..."), not a mismatched
//     collective.
//
// Collectives: every function that takes a communicator is collective over it; every rank
// calls it with structurally matching state dicts. The meshes of the DTensors must span
// exactly the communicator's ranks (mesh rank == communicator rank). Sub-communicators
// are not needed: every data collective runs on the communicator itself. Tensors on the
// CPU are moved by a CPU backend (MPI); CUDA tensors need a communicator whose device is
// CUDA (NCCL); CPU tensors handed to a CUDA communicator are staged through the GPU and
// come back on the CPU (case-013). Every call is blocking: on return all data is in place
// and every CUDA copy has completed (legacy default streams of the tensors' devices).
//
// Paths: nested maps, lists and tuples are walked in order; a leaf is named by its dotted
// path as `_flatten_state_dict` names it ("layers.0.weight", list items by index).
#ifndef SDRT_CORE_DISTRIBUTED_DISTRIBUTED_STATE_DICT_H_
#define SDRT_CORE_DISTRIBUTED_DISTRIBUTED_STATE_DICT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/transfer_stats.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/export.h"
#include "sdrt/tensor/device.h"

namespace sdrt SDRT_API {

// 256 MiB, the default bucket size of every operation here.
inline constexpr int64_t kDefaultBucketBytes = int64_t{256} << 20;

struct GatherOptions {
  // The group to gather over. nullptr: the MPI world (MpiCommunicator::World()); its
  // error (Unavailable in a build without MPI) when it cannot be made.
  Communicator* comm = nullptr;
  // Where the gathered full tensors are made when not offloaded: nullopt keeps each on
  // its source's device (PyTorch's behaviour); a ShardedTensor without local shards on
  // this rank gathers to the CPU, as in PyTorch.
  std::optional<Device> device;
  // Move every result tensor (gathered or plain) to the CPU, as `cpu_offload=True`.
  bool cpu_offload = false;
  // Ranks (of `comm`) that keep the result; empty: every rank. The others get an empty
  // map and, with cpu_offload, never hold more than one bucket of full data at a time
  // (one tensor larger than a bucket is gathered whole).
  std::vector<int> ranks_only;
  // An Opaque leaf other than BytesIO is an error when true, deep-copied when false.
  bool type_check = true;
  // Upper bound of the full bytes gathered by one collective (>= 1).
  int64_t bucket_bytes = kDefaultBucketBytes;
  // Filled when not null (transfer_stats.h).
  TransferStats* stats = nullptr;
  // Called on the calling thread after each exchange with this rank's bytes sent and
  // received so far and in all, e.g. to show progress. May be empty.
  std::function<void(int64_t done_bytes, int64_t total_bytes)> progress;
};

// Mirrors `_gather_state_dict(state_dict, pg, device, cpu_offload, ranks_only,
// type_check)`: a new state dict of the same structure in which every DTensor became its
// full tensor (DTensor.full_tensor(): Partial mesh dims all-reduced first, then every
// shard placed by its owned index set) and every ShardedTensor the full tensor its shards
// cover (placed by metadata offsets; elements no shard covers are zero; any number of
// shards per rank). Plain tensors and non-tensor leaves pass through as in
// OffloadStateDictToCpu (aliases unless moved). Result tensors are contiguous.
// Partial mesh dims are all-reduced in buckets: consecutive DTensors of one mesh, dtype and
// reduction (Partial mesh dims and ops), up to bucket_bytes, in one collective per Partial
// mesh dim, on copies (the inputs are not written; a fully replicated result is a view of
// its bucket's allocation).
// Each DTensor's local tensor must have the local shape its placements give this rank
// (ValidateLocalShape, case-004). Errors (the same on every rank, none after data has
// started moving except backend failures): InvalidArgument for skeleton disagreement,
// invalid local shapes, meshes that do not span the communicator, ShardedTensors whose
// shards do not fit, bucket_bytes < 1; FailedPrecondition for a meta tensor (no data);
// the backends' errors.
absl::StatusOr<Map> GatherStateDict(const Map& state_dict, const GatherOptions& options = {});

struct BroadcastOptions {
  Communicator* comm = nullptr;  // as GatherOptions::comm
  // Device of the tensors created on receiving ranks (plain tensors, and fresh locals for
  // meta DTensors). nullopt: the communicator's device.
  std::optional<Device> device;
  // Remove from `local` every leaf the checkpoint lacks (reported in missing_keys either
  // way). Keys only in the checkpoint are ignored and reported in unexpected_keys.
  bool strict = false;
  // Move every tensor written into `local` to the CPU.
  bool cpu_offload = false;
  int64_t bucket_bytes = kDefaultBucketBytes;  // >= 1
  // The rank of `comm` whose `full` is broadcast.
  int root = 0;
  TransferStats* stats = nullptr;  // filled when not null (transfer_stats.h)
  // Called on the calling thread after each exchange with this rank's bytes sent and
  // received so far and in all, e.g. to show progress. May be empty.
  std::function<void(int64_t done_bytes, int64_t total_bytes)> progress;
};

struct BroadcastResult {
  // Paths of `local` leaves that the checkpoint lacks, in `local`'s order.
  std::vector<std::string> missing_keys;
  // Paths of checkpoint leaves that `local` lacks, in the checkpoint's order.
  std::vector<std::string> unexpected_keys;
};

// Mirrors `_broadcast_state_dict(full_state_dict, local_state_dict, device, pg, strict,
// cpu_offload)`: `full` is read on `root` only (other ranks pass anything, e.g. an empty
// map). The root's skeleton (paths in order; shape and dtype of each tensor; 0-dim
// tensors and non-tensor leaves inline) travels with the call's agreement; then each
// tensor is a transfer from the root alone into every rank's local layout, moved by the
// transfer engine in buckets of `bucket_bytes` (a tensor larger than a bucket in
// bucket-sized pieces): one broadcast where every rank keeps the bytes whole, point to
// point to the ranks that keep pieces of it. Peak extra memory of a rank is its send and
// receive buckets, besides the tensors it receives.
// For each checkpoint leaf whose path is in `local`:
//   * non-tensor or 0-dim tensor: the local leaf is replaced by the value (0-dim tensors
//     on the CPU);
//   * local DTensor with a meta local tensor: replaced by a DTensor with a fresh compact
//     local of this rank's local shape on `device`, same mesh, placements, global shape
//     and global stride;
//   * local DTensor with data: this rank's piece is copied into its local tensor in place
//     (same dtype; it must have this rank's local shape);
//   * local ShardedTensor: every local shard is filled from the box its metadata names;
//   * None: left as it is (PyTorch's _broadcast_tensors skips it too);
//   * anything else (a plain tensor, a scalar): replaced by the full tensor on `device`.
// Tensor leaves must agree with the checkpoint's global shape and dtype. Errors, on every
// rank: InvalidArgument for a skeleton disagreement between ranks (local skeletons are
// compared; case-015, case-016), a local leaf whose global shape or dtype is not the
// checkpoint's, an invalid local shape, a bad root or bucket size; FailedPrecondition
// for a meta tensor in `full`; the backends' errors. On error `local` may have been
// partly written only if the error came from a backend after data started moving.
absl::StatusOr<BroadcastResult> BroadcastStateDict(const Map& full, Map& local,
                                                   const BroadcastOptions& options = {});

struct DistributeOptions {
  // When not null, one small metadata exchange (no data moves: AgreeAcrossRanks,
  // core/distributed/agreement.h) makes every rank return the same error when some rank
  // lacks a checkpoint key its local state dict needs (case-012), and checks that every
  // rank holds the same full state dict: an XXH64 of its skeleton (each leaf's dotted path
  // in walk order, its kind, and for tensors dtype and shape; never values, and nothing of
  // `local`) is compared, and the skeletons themselves are exchanged only when the hashes
  // differ, to name the first differing key. nullptr: no communication at all; errors are
  // this rank's only (case-011), and full state dicts that differ go unnoticed.
  Communicator* comm = nullptr;
  // This process's rank in the DTensors' meshes and the ShardedTensors' placements.
  // -1: comm->rank(); then `comm` is required.
  int rank = -1;
  // Device of plain tensors and fresh DTensor locals written into `local`. nullopt: the
  // device of the local leaf replaced (CPU for a meta one).
  std::optional<Device> device;
};

// Mirrors `_distribute_state_dict(full_state_dict, local_state_dict, device, pg)`: every
// rank holds `full`; for each leaf of `full` in order:
//   * non-tensor or 0-dim tensor: written into `local` (added when absent, as PyTorch);
//   * tensor whose local leaf is missing or None: skipped;
//   * local DTensor: replaced by a DTensor holding this rank's piece (a new compact
//     tensor; Partial placements as in DistributeTensor), same mesh and placements
//     (case-014);
//   * local ShardedTensor: every local shard filled in place from its box;
//   * anything else: replaced by the full tensor on the device (an alias when already
//     there).
// Errors: InvalidArgument when a local DTensor or ShardedTensor path has no tensor in
// `full` (naming the path and this rank, suggesting BroadcastStateDict), or a global
// shape or dtype differs; with `comm`, every rank returns the first rank's error, and when
// no rank failed but the full state dicts' skeletons differ (a key, a scalar or a plain
// tensor on some ranks only, a scalar on one rank where another has a tensor, a dtype or
// shape that differs), InvalidArgument on every rank: "DistributeStateDict: ranks disagree
// at '<path>': rank 0 has <kind dtype[shape]>, rank R has ..." or "... ranks disagree on
// the keys: leaf i is '<path>' (...) on rank 0 but ... on rank R", R the lowest such rank.
absl::Status DistributeStateDict(const Map& full, Map& local,
                                 const DistributeOptions& options = {});

}  // namespace SDRT_API

#endif  // SDRT_CORE_DISTRIBUTED_DISTRIBUTED_STATE_DICT_H_
