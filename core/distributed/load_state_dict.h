// LoadStateDict: the one verb that fills a local state dict from a checkpoint, whatever
// its kind (CheckpointSource: a safetensors file, a Hugging Face folder, a folder of
// safetensors files, an sdrt sharded folder) and whoever can read it (docs/ARCHITECTURE.md,
// "Parallel load" and "Loading a sharded folder"). LoadOptions::read says who reads a full
// checkpoint:
//
//   kAll: every rank reads its own bytes. Where BroadcastStateDict (distributed_state_dict.h)
//     has one rank read everything and send it, here each rank computes from the
//     checkpoint's header alone the byte runs of the pieces its local state dict keeps,
//     coalesces them into a few large reads per file and reads them with pread into a
//     bounded pool of staging buffers, from which it copies into its local tensors.
//   kRoot: rank 0 of the communicator (the root) reads the whole checkpoint from its mapping
//     of the source and BroadcastStateDict sends every rank its pieces (for ranks that do
//     not see the files; the other ranks' sources are not read).
//   kAuto: kAll when every rank sees the same files, else kRoot (internal/load/read_policy.h):
//     each rank describes its source (its kind and, per file, the size, the modification
//     time and an xxh64 of the header bytes its reader parsed) or why it could not open it,
//     and the ranks compare; without a communicator, kAll (one process reads what it sees).
//
// It mirrors no single PyTorch function: the result is that of
// `_broadcast_state_dict(full, local, strict=...)` (torch/distributed/_state_dict_utils.py)
// for the DTensor, ShardedTensor and plain-tensor leaves a safetensors checkpoint can fill,
// the reading (kAll) that of safetensors' `get_slice` per rank.
//
// What kAll reads: a Shard(0) piece is one byte run; a Shard(1) piece of [R, C] is R runs; a
// _StridedShard piece is one run per owned index run (owned index sets, tensor/sharding/
// sharding.h). Runs of one file are joined into one read when the gap between them is at
// most LoadOptions::max_gap_bytes (1 MiB) and at most 1/32 of the run before the gap
// (internal::kGapDivisor), so the gaps add at most 1/32 to the bytes kept (read
// amplification <= 1.032); no read is longer than one staging buffer (a longer run is cut).
// Nothing else is read. Replicated tensors (and Replicate or Partial mesh dims) are read by
// every rank that holds them: there is no exchange between ranks, unless
// LoadOptions::share_reads: then what every rank of a node fills alike (fresh locals) is
// read by one rank of the node and moved to the others by the transfer engine (the node
// reads those bytes once; a node_of_rank of the wrong length is InvalidArgument on every
// rank, and every rank must pass the same share_reads and node_of_rank).
//
// kAll into local tensors on a CUDA device (one device per call): the staging buffers are
// pinned (cudaHostAlloc) and kept afterwards in a process-wide pool (keyed by device, at
// most 1 GiB in all), so the next call into the device reuses them. The pieces move from
// them to the device on one stream of the call's own, in a few large copies per staging
// buffer: pieces that follow one another in the buffer and in device memory as one
// cudaMemcpyAsync (whole tensors back to back, the rows of a Shard(1) piece into a
// contiguous local), rows at constant pitches as one cudaMemcpy2DAsync, from any file
// offset (a cast, or a piece whose rows are not dense in its local: per block, as
// Tensor::CopyFrom copies). The reading thread waits for a buffer's copies (an event)
// before it reads into it again, so reading the next buffer overlaps the copy of the last
// (double buffering with the default two). Ordering with the caller's work: the stream
// first waits for an event recorded at the call's start on the device's legacy default
// stream (cudaStreamWaitEvent), so work the caller enqueued before the call on the legacy
// default stream (PyTorch's default stream), on a per-thread default stream or on a
// blocking stream runs before the load writes the locals; work on the caller's non-blocking
// streams is not waited for (synchronize them first). The file is never mapped; the call
// returns after the stream has run every copy. kRoot into CUDA tensors: the root registers
// its mapping with CUDA first (PinStorage, read-only; a mapping already pinned is used as
// it is, one that cannot be registered is copied from pageable memory, said in
// LoadStats::read_reason); the registration lasts as long as the source's mapping.
//
// An sdrt sharded folder (sharded_checkpoint.h: index.json plus one safetensors file per
// rank of the layout it was written in) is read by every rank from its rank files,
// whatever `read` says but kRoot (refused): the folder's pieces are resharded peer to peer
// into `local` (ReshardStateDict), so each rank reads only the rank files f with f mod
// comm->size() == its rank (mapped, no staging) and receives over the communicator only
// the bytes of its pieces it did not read. Any number of ranks loads any folder: with fewer
// ranks than rank files a rank reads several and their pieces travel as ShardedTensor boxes
// (then every piece of the folder must be a box: a _StridedShard piece cut into several
// runs needs at least the folder's ranks). PyTorch's distributed checkpoint (DCP) loads a
// checkpoint saved in another layout; the result is that of kAll on the folder's
// consolidated file.
//
// With a communicator the ranks agree (AgreeAcrossRanks, core/distributed/agreement.h) on
// the read and the options (one exchange, which also carries kAuto's descriptions), then
// each path agrees on its local skeletons and planning errors before moving data and, for
// kAll, on the read errors after, so that one rank's error is the same error on every
// rank. Without one (kAll only) every rank works alone and its errors are its own.
#ifndef SDRT_CORE_DISTRIBUTED_LOAD_STATE_DICT_H_
#define SDRT_CORE_DISTRIBUTED_LOAD_STATE_DICT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/load_options.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/transfer_stats.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/export.h"
#include "sdrt/tensor/device.h"

namespace sdrt SDRT_API {

// Fills `local` from `source` (BroadcastStateDict's rules for each leaf whose path names a
// checkpoint tensor, whatever the read):
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
//     options.device (a sharded folder writes a plain tensor of the full shape in place).
// kAll lays out the new tensors of one call (fresh locals and replacing full tensors) as
// views of one allocation on options.device, in checkpoint order so that pieces that
// follow one another in a file are read straight into place; that memory is released when
// the last of them is destroyed (keeping one small tensor keeps the call's whole arena).
// kAll's new DTensors share one allocation the same way: their metadata (~300 bytes each)
// and with it their locals, so keeping one keeps the arena and, with map_results, every
// file's mapping (pages written since are private memory) until the last is destroyed.
// A rank off coordinate 0 of a Partial mesh dim holds the reduction's identity afterwards
// (FillPartialIdentity), as in BroadcastStateDict.
// Tensor leaves must have the checkpoint's global shape and dtype, but that a DTensor or
// ShardedTensor leaf of another float dtype (CastKind kFloat, tensor/dtype.h) is a cast with
// kAll and a sharded folder: each element converted as Tensor.to() does, on the CPU after
// the read (kRoot refuses it, as BroadcastStateDict does). With LoadOptions::weight_map the
// leaves a rule makes are filled from the checkpoint tensors the rule names (weight_map.h):
// each rank reads only the rows of its own pieces, straight into views of its locals (no
// full tensor is built), a pad's rest zeroed; with kRoot rank 0 first sends its source's
// tensor list (one BroadcastBytes), which every rank lowers against, and a cast between
// float dtypes is refused (FP8 codes are quantized and dequantized as with kAll).
// With a communicator and kRoot or share_reads, every rank passes a `local` of the same
// skeleton and each DTensor's mesh spans the communicator's ranks; with kAll and no share_reads
// each rank fills the leaves it lists, and a DTensor's mesh need only hold the rank among the
// communicator's ranks (a pipeline stage's or an expert's tensors on their own ranks, as
// ParallelLayout::MetaStateDict makes them; a tensor no rank lists is loaded by none); a
// sharded folder takes ReshardStateDict's rule (an empty map on a rank that receives
// nothing). `source` must stay open and its files unchanged during
// the call; kAll opens each file again by path and reads it with pread (no mapping is
// touched), or with LoadOptions::map_results maps it again, privately, for the pieces that
// become views of it (their tensors then keep that mapping, not `source`).
// Errors (with a communicator, the same on every rank): InvalidArgument naming the key for
// a local leaf whose global shape or dtype is not the checkpoint's (nor a cast), a weight
// map's rule that cannot hold (internal/mapping/lowering.h: naming the rule and tensor);
// with kRoot, a leaf (lowered or not) whose dtype is not its checkpoint tensor's (a cast,
// naming the leaf) or a malformed tensor list from rank 0; an invalid local shape,
// a mesh that lacks `rank`, has a rank beyond the communicator's or (kRoot, share_reads)
// does not span it, options
// out of range or that differ between ranks, a skeleton that differs between ranks (kRoot,
// share_reads), kRoot or direct_io for a
// sharded folder (or rank 0's source being one while another rank's is not), direct_io
// with kRoot, map_results with direct_io or share_reads, a rank other than comm->rank()
// with kRoot or a sharded folder; a sharded folder recording an engine's layout
// (kEngineLayoutMetadataKey, sharded_checkpoint.h) into a leaf that is not a DTensor of the
// folder tensor's placements on a mesh of its shape (naming the tensor and both layouts);
// FailedPrecondition without a communicator for kRoot or a sharded folder, for local
// tensors on two CUDA devices (or a device that is neither CPU nor CUDA), a meta
// ShardedTensor shard; DataLoss for a file that changed since the source opened it, read
// again by its path (kAll, map_results): another file renamed over it ("<path>: replaced
// since it was opened: another file now has its name"), its size changed ("<path>: size
// changed from A to B bytes since it was opened"), or, with map_results, cut short while it
// was being mapped ("<path>: mapping bytes [A, B): the file was cut short since it was
// opened"); for a sharded folder, its index.json read again with a rank file not the one
// opened ("<dir>: index.json changed since the checkpoint was opened"); with kRoot, which
// reads the source's own mappings, only the file opened cut short; Unimplemented for a
// sharded folder into CUDA tensors;
// InvalidArgument with direct_io for a file whose file system refuses O_DIRECT;
// Unavailable for CUDA locals in a build without CUDA; CUDA's error for a failed copy,
// stream or event; DataLoss for a pread that returns fewer bytes than the file has
// ("<path>: short read at offset O (tensor 'T')"); the errno's code for a failed open or
// pread ("<path>: pread at offset O (tensor 'T'): <strerror>"); ResourceExhausted when a
// buffer or local cannot be allocated, ResourceExhausted naming the size, device and
// CUDA's error when a pinned staging buffer cannot be (never a silent fall back to
// pageable memory); a sharded folder: the errors of LoadRankShards (a missing, damaged or
// foreign rank file, naming it), a layout the reshard planner refuses, a folder whose
// pieces are not boxes loaded by fewer ranks than it has; BroadcastStateDict's errors with
// kRoot; the communicator's (DeadlineExceeded past its timeout). On error `local` may have
// been partly written.
absl::StatusOr<LoadResult> LoadStateDict(const CheckpointSource& source, Map& local,
                                         const LoadOptions& options = {});

// The same where a rank may not have been able to open the checkpoint: `source` is this
// rank's CheckpointSource::Open result (e.g. LoadStateDict(CheckpointSource::Open(path),
// local, options)). A rank's open error is every rank's error where that rank's source is
// read (kAll, a sharded folder, the root for kRoot), is ignored off the root with kRoot,
// and makes kAuto pick kRoot ("auto: rank 2 cannot open it (<why>)"). Without a
// communicator, the open error is returned.
absl::StatusOr<LoadResult> LoadStateDict(const absl::StatusOr<CheckpointSource>& source, Map& local,
                                         const LoadOptions& options = {});

}  // namespace SDRT_API

#endif  // SDRT_CORE_DISTRIBUTED_LOAD_STATE_DICT_H_
