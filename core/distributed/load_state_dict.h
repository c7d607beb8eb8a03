// LoadStateDict: every rank reads its own bytes of a full checkpoint (docs/ARCHITECTURE.md,
// "Parallel load"). Where BroadcastStateDict (distributed_state_dict.h) has one rank read
// everything and send it, here each rank computes from the checkpoint's header alone the
// byte runs of the pieces its local state dict keeps, coalesces them into a few large reads
// per file and reads them with pread into a bounded pool of staging buffers, from which it
// copies into its local tensors. It mirrors no single PyTorch function: the result is that
// of `_broadcast_state_dict(full, local, strict=...)` (torch/distributed/_state_dict_utils.py)
// for the DTensor, ShardedTensor and plain-tensor leaves a safetensors checkpoint can fill,
// the reading that of safetensors' `get_slice` per rank.
//
// What is read: a Shard(0) piece is one byte run; a Shard(1) piece of [R, C] is R runs; a
// _StridedShard piece is one run per owned index run (owned index sets, tensor/sharding/
// sharding.h). Runs of one file are joined into one read when the gap between them is at
// most LoadOptions::max_gap_bytes (1 MiB) and at most 1/32 of the run before the gap
// (internal::kGapDivisor), so the gaps add at most 1/32 to the bytes kept (read
// amplification <= 1.032); no read is longer than one staging buffer (a longer run is cut).
// Nothing else is read. Replicated tensors (and Replicate or Partial mesh dims) are read by
// every rank that holds them: there is no exchange between ranks.
//
// Local tensors on a CUDA device (one device per call): the staging buffers are allocated
// pinned (cudaHostAlloc) once per call and every piece moves from them to the device with
// cudaMemcpyAsync on one stream of the call's own (cudaMemcpy2DAsync for the rows of a
// Shard(1) piece); the reading thread waits for a buffer's copies (an event) before it
// reads into it again, so reading the next buffer overlaps the copy of the last (double
// buffering with the default two). The file is never mapped; the call returns after the
// stream has run every copy.
//
// No communicator is needed: without one (LoadOptions::comm == nullptr) every rank works
// alone and its errors are its own. With one, the ranks agree (AgreeAcrossRanks,
// core/distributed/agreement.h) before reading, on their local skeletons and planning
// errors, and after reading, on the read errors, so that one rank's error is the same error
// on every rank.
#ifndef SDRT_CORE_DISTRIBUTED_LOAD_STATE_DICT_H_
#define SDRT_CORE_DISTRIBUTED_LOAD_STATE_DICT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/device.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// What one rank's LoadStateDict read and kept.
struct LoadStats {
  int64_t bytes_read = 0;  // the bytes pread returned (kept bytes plus gaps read through)
  int64_t bytes_kept = 0;  // the bytes of this rank's pieces
  int64_t preads = 0;      // pread calls (a read interrupted or cut short takes several)
  int64_t reads = 0;       // planned reads
  // The most staging bytes allocated at once: at most staging_buffers x staging_bytes,
  // less when the largest read is smaller than a buffer.
  int64_t peak_staging_bytes = 0;
  // bytes_read / bytes_kept; 1 when nothing is kept.
  double read_amplification() const {
    return bytes_kept == 0 ? 1.0 : static_cast<double>(bytes_read) / bytes_kept;
  }
};

struct LoadOptions {
  // When not null, collective over `comm`: the ranks agree before and after reading (see
  // above), and the DTensors' meshes must span exactly its ranks. nullptr: no
  // communication; `rank` is required.
  Communicator* comm = nullptr;
  // This process's rank in the DTensors' meshes and the ShardedTensors' placements.
  // -1: comm->rank().
  int rank = -1;
  // Remove from `local` every leaf the checkpoint lacks (reported in missing_keys either way).
  bool strict = false;
  // Where new tensors go: fresh locals of meta DTensors and full tensors that replace
  // plain leaves (CPU or one CUDA device; preallocated locals stay where they are).
  Device device = Device::CPU();
  // The staging pool: this many buffers (>= 1) of this many bytes (>= 4096; the longest
  // read). With two or more, one thread reads into one buffer while the calling thread
  // copies out of another (pinned buffers when the locals are on a CUDA device).
  int staging_buffers = 2;
  int64_t staging_bytes = int64_t{256} << 20;
  // Read with O_DIRECT (the page cache bypassed: for checkpoints on cold storage that would
  // only evict what the page cache holds); reads are widened to whole 4096-byte blocks and
  // LoadStats::bytes_read counts the widening. Default: through the page cache.
  bool direct_io = false;
  // The largest gap read through (>= 0; see above).
  int64_t max_gap_bytes = int64_t{1} << 20;
  LoadStats* stats = nullptr;  // filled when not null
  // Called on the calling thread after each read is copied out, with this rank's bytes
  // read so far and in all (LoadStats::bytes_read units), e.g. to show progress. May be
  // empty.
  std::function<void(int64_t done_bytes, int64_t total_bytes)> progress;
};

struct LoadResult {
  // Paths of `local` leaves that the checkpoint lacks, in `local`'s order.
  std::vector<std::string> missing_keys;
  // Checkpoint tensors that `local` lacks, in the source's order (CheckpointSource::tensors()).
  std::vector<std::string> unexpected_keys;
};

// Fills `local` from `source` (BroadcastStateDict's rules for each leaf whose path names a
// checkpoint tensor):
//   * a 0-dim checkpoint tensor: the leaf, whatever it is, is replaced by the value (a
//     0-dim CPU tensor), as in BroadcastStateDict;
//   * DTensor with a meta local: replaced by a DTensor with a fresh compact local on
//     options.device of this rank's local shape, same mesh, placements, global shape and
//     stride;
//   * DTensor with data: this rank's piece is written into its local in place (any
//     strides; it must have this rank's local shape, ValidateLocalShape);
//   * ShardedTensor: every local shard is filled from the box its metadata names;
//   * None: left as it is;
//   * anything else (a plain tensor, a scalar): replaced by the full tensor, contiguous, on
//     options.device.
// The new tensors of one call (fresh locals and replacing full tensors) are views of one
// allocation on options.device, laid out in checkpoint order so that pieces that follow
// one another in a file are read straight into place; that memory is released when the
// last of them is destroyed (keeping one small tensor keeps the call's whole arena).
// A rank off coordinate 0 of a Partial mesh dim holds the reduction's identity afterwards
// (FillPartialIdentity), as in BroadcastStateDict; it reads the values first.
// Tensor leaves must have the checkpoint's global shape and dtype. `source` must stay open
// and its files unchanged during the call; each file is opened again by path and read with
// pread (no mapping is touched).
// Errors (with a communicator, the same on every rank): InvalidArgument naming the key for
// a local leaf whose global shape or dtype is not the checkpoint's, an invalid local shape,
// a mesh that does not span the communicator or lacks `rank`, options out of range, a
// skeleton that differs between ranks; FailedPrecondition for local tensors on two CUDA
// devices (or a device that is neither CPU nor CUDA), a meta ShardedTensor shard, or a
// file whose size is no longer the source's ("<path>: size changed from A to B bytes");
// InvalidArgument with direct_io for a file whose file system refuses O_DIRECT;
// Unavailable for CUDA locals in a build without CUDA; CUDA's error for a failed copy,
// stream or event; DataLoss for
// a pread that returns fewer bytes than the file has ("<path>: short read at offset O
// (tensor 'T')"); the errno's code for a failed open or pread ("<path>: pread at offset
// O (tensor 'T'): <strerror>"); ResourceExhausted when a buffer or local cannot be
// allocated, ResourceExhausted naming the size, device and CUDA's error when a pinned
// staging buffer cannot be (never a silent fall back to pageable memory). On error `local`
// may have been partly written.
absl::StatusOr<LoadResult> LoadStateDict(const CheckpointSource& source, Map& local,
                                         const LoadOptions& options = {});

struct LoadShardedOptions {
  // Required: the ranks that load. The folder's rank files are read by these ranks (rank
  // file f by rank f mod comm->size(): each its own when there are at least as many ranks as
  // files), and the meshes and ShardedTensor placements of `local` name ranks of comm.
  // CPU tensors with MPI; the rank files are CPU memory.
  Communicator* comm = nullptr;
  // As LoadOptions::strict.
  bool strict = false;
  // The most bytes a rank sends, or receives, in one exchange (ReshardOptions::bucket_bytes):
  // the peak extra memory per rank is two such buckets. >= 64.
  int64_t bucket_bytes = int64_t{256} << 20;
  // This rank's figures: bytes_read = the bytes of the pieces in the rank files it read,
  // bytes_kept = the bytes of its destination pieces, reads = the rank files it opened.
  LoadStats* stats = nullptr;
  TransferStats* reshard_stats = nullptr;  // the reshard's figures (transfer_stats.h)
};

// Fills `local` from the sdrt sharded folder `dir` (sharded_checkpoint.h: index.json plus
// one safetensors file per rank of the layout it was written in), whatever the layout of
// `local`: the folder's pieces are resharded peer to peer into it (ReshardStateDict), so
// each rank reads only its rank files (mapped, no staging) and receives over the
// communicator only the bytes of its pieces it did not read. Any number of ranks loads any
// folder: with fewer ranks than rank files a rank reads several and their pieces travel as
// ShardedTensor boxes (then every piece of the folder must be a box: a _StridedShard piece
// cut into several runs needs at least the folder's ranks). It mirrors no PyTorch function:
// PyTorch's distributed checkpoint (DCP) loads a checkpoint saved in another layout; the
// result is that of LoadStateDict on the folder's consolidated file.
// Leaves are matched by dotted path to the folder's tensor names, with LoadStateDict's
// rules: a DTensor gets its piece (a meta local: a fresh compact CPU local; an allocated
// one: written in place, any strides); a ShardedTensor's local shards are written from
// their boxes; a None leaf is left as it is; any other leaf is replaced by the full tensor.
// Collective over options.comm; every rank passes a `local` of the same skeleton (an empty
// map on a rank that receives nothing; ranks of the communicator outside the meshes of
// `local` still read and send their rank files). Leaves the folder lacks are reported (and
// with strict removed); tensors of the folder no leaf names are reported and not moved.
// Errors, the same on every rank: FailedPrecondition without options.comm;
// InvalidArgument for the errors of ReadShardedCheckpointIndex and LoadRankShards (a
// missing, damaged or foreign rank file or index, naming the file), a leaf whose dtype or
// global shape is not the folder's, a layout the reshard planner refuses, a folder whose
// pieces are not boxes loaded by fewer ranks than it has, bucket_bytes < 64; the
// communicator's errors (DeadlineExceeded past its timeout). On error `local` is unchanged
// unless the reshard itself failed midway.
absl::StatusOr<LoadResult> LoadShardedCheckpoint(const std::string& dir, Map& local,
                                                 const LoadShardedOptions& options);

}  // namespace sdrt

#endif  // SDRT_CORE_DISTRIBUTED_LOAD_STATE_DICT_H_
