// Single-process state-dict operations: offload to CPU, copy into a companion state
// dict, create CPU (pinned and/or shared) staging buffers, and structural similarity.
// Each mirrors one function of PyTorch's torch/distributed/_state_dict_utils.py (named
// in its comment) and is built on the iteration engine of core/state_dict/iterate.h
// (`_iterate_state_dict`, docs/SEMANTICS.md sections 5 and 6).
//
// Common rules:
//   * Results are new container trees (maps keep the source's key order, tuples stay
//     tuples, lists stay lists). Non-tensor leaves (None, bool, int, float, str, bytes)
//     are copied by value; an Opaque whose type_name is "BytesIO" stands for io.BytesIO,
//     which PyTorch accepts: it is shared by reference, never cloned. Any other Opaque is
//     an error naming its path when `type_check` is on, and is deep-copied through its
//     `clone` function when off.
//   * Tensors are handles: "alias" below means the result holds a handle to the same
//     storage as the input, so writing one shows in the other.
//   * A structure mismatch between two state dicts is an InvalidArgument whose message
//     starts "companion mismatch at <path>: " (path dotted as `_flatten_state_dict`
//     names it, e.g. "layers.3.weight"; the root is "<root>") and names what differs:
//     keys missing from / only in the second dict, list lengths, kinds (dict vs list vs
//     tensor), shapes and dtypes. IsCompanionMismatch() recognises it. PyTorch raises
//     CompanionMismatch for some of these and crashes (AttributeError, AssertionError,
//     RuntimeError) for others (docs/SEMANTICS.md 11.8, tests/golden/README.md).
//   * A value of None in the second dict means "nothing to match below", as in PyTorch:
//     CopyStateDict copies a tensor whose counterpart is None nowhere (the result holds
//     the source's tensor); only the similarity check counts a plain tensor against None
//     as a difference.
#ifndef SDRT_CORE_STATE_DICT_STATE_DICT_OPS_H_
#define SDRT_CORE_STATE_DICT_STATE_DICT_OPS_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// True for the "companion mismatch" errors of CopyStateDict and CompareStateDicts.
bool IsCompanionMismatch(const absl::Status& status);

struct OffloadOptions {
  int rank = 0;                 // this process's rank
  std::vector<int> ranks_only;  // empty: every rank gets the result
  bool type_check = true;
};

// Mirrors `_offload_state_dict_to_cpu(state_dict, ranks_only, type_check)`: every Tensor
// is moved to the CPU (same shape, dtype and values, as a new contiguous tensor; a tensor
// already on the CPU is returned as is, an alias with its strides); a DTensor keeps its mesh,
// placements and global shape around a CPU local tensor; a ShardedTensor keeps its metadata with
// CPU local shards and "cpu" placements. CUDA copies are blocking (legacy default stream of the
// tensor's device). When `ranks_only` is not empty and does not hold `rank`, the result is an empty
// map (the tensors are not copied). Errors: a meta tensor has no data to move (FailedPrecondition
// naming the path); CUDA errors; type_check errors (above).
absl::StatusOr<Map> OffloadStateDictToCpu(const Map& state_dict,
                                          const OffloadOptions& options = {});

struct CopyOptions {
  // Asynchronous CUDA copies (PyTorch's default for _copy_state_dict is False). CPU to
  // CPU copies always complete before returning.
  bool non_blocking = false;
  bool type_check = true;
  // The one CUDA stream every copy is enqueued on, in the order of the source dict
  // (a cudaStream_t of the device the CUDA tensors live on). nullptr: CUDA's legacy
  // default stream of that device, what PyTorch's current stream is by default.
  StreamHandle stream = nullptr;
};

struct CopyResult {
  // A new container tree shaped like the source whose Tensor/DTensor/ShardedTensor leaves
  // are the destination's objects (aliases of `dst`'s tensors) and whose other leaves are
  // the source's values.
  Map state_dict;
  // Non-null when `non_blocking` and some tensor is on a CUDA device: an event of that
  // device (timing disabled) recorded on the copy stream after the last copy (with a null
  // stream, on that device's legacy default stream, where the copies ran). After
  // done->Synchronize() (or after making another stream wait with done->Block(stream))
  // every byte of every destination tensor equals its source (case-022). Null when every
  // copy had completed on return.
  std::shared_ptr<CudaEvent> done;
};

// Mirrors `_copy_state_dict(state_dict, copy_state_dict, non_blocking, type_check)`:
// copies every tensor of `src` into the matching tensor of `dst` in place (any strides on
// either side; DTensor: local into local; ShardedTensor: local shard i into local shard
// i, equal shard counts). `dst` must have the same structure (same key sets, list
// lengths, tensor kinds), and each destination the source's shape and dtype exactly
// (PyTorch's copy_ would also broadcast and convert dtypes; sdrt reports a companion
// mismatch instead). The copies run on one stream (CopyOptions::stream; a given stream
// must belong to the device of the CUDA tensors); when the CUDA tensors span more than
// one device the copies are made blocking (legacy default streams cannot share one
// event) and `done` is null. With non_blocking, keep both dicts alive until `done` has
// completed; a copy with a strided side that crosses devices is staged and completes
// before returning, and copies to or from pageable host memory are synchronous in
// practice (use CreateCpuStateDict(pin_memory) buffers). Errors: companion mismatches
// (above; on a mismatch found part way the tensors before it have been copied, or
// enqueued: synchronise the stream before freeing anything), CUDA errors, type_check
// errors; each names the path. A meta destination is FailedPrecondition (PyTorch's copy_
// into meta is a silent no-op).
absl::StatusOr<CopyResult> CopyStateDict(const Map& src, const Map& dst,
                                         const CopyOptions& options = {});

struct CreateCpuOptions {
  bool pin_memory = false;    // page-locked for fast, asynchronous GPU copies (needs CUDA)
  bool share_memory = false;  // POSIX shared memory (its name: Storage::shm_name())
};

// Mirrors `_create_cpu_state_dict(state_dict, pin_memory, share_memory)`: a state dict of
// the same structure whose tensors are new, uninitialised, contiguous CPU tensors of the
// source's shapes and dtypes, meant to be filled with CopyStateDict. Unlike PyTorch
// (one allocation or registration per tensor), all tensors holding data are views of ONE
// arena: each tensor gets a slot at a 256-byte aligned offset, and the arena is
//   plain: Storage::AllocateCpu; share: Storage::AllocateShared (one shm segment);
//   pin: PinnedHostAllocator::Allocate (one cudaHostAlloc);
//   share + pin: AllocateShared, then one cudaHostRegister(kHostRegisterPortable) of it.
// Pinning runs in the context of the first CUDA tensor's device (else the calling
// thread's current device), so it opens no context on another GPU.
// Every view holds the arena, so its memory (and the registration, and the shm name) is
// released when the last tensor of the result goes away, not key by key.
// Per tensor:
//   * 0-dim: a new CPU scalar holding 0 (value not copied), never in the arena
//     (docs/SEMANTICS.md 6.1);
//   * numel == 0 or no data (meta): CPU zeros of the same shape and dtype, never pinned,
//     nothing mapped for 0 bytes (case-021); a meta tensor with elements gets its own
//     zero-filled shared segment when share_memory (as PyTorch's share_memory_());
//   * DTensor: same mesh, placements, global shape and stride around a CPU local made by
//     the rules above. A 0-dim DTensor is given a CPU local too (PyTorch returns it as is,
//     still on the GPU: sdrt does better);
//   * ShardedTensor: without local shards returned as is (an alias); otherwise the same
//     metadata with "cpu" placements and every local shard replaced by the rules above.
// Opaque values other than BytesIO are cloned (type_check is off, as in PyTorch).
// Errors: ResourceExhausted/Internal when the arena cannot be allocated (for share_memory
// the pages are reserved up front, so a /dev/shm too small is ResourceExhausted here);
// Unavailable
// naming CUDA's error when pin_memory cannot pin (e.g. built without CUDA, no device);
// FailedPrecondition for an Opaque without a clone function.
absl::StatusOr<Map> CreateCpuStateDict(const Map& state_dict, const CreateCpuOptions& options = {});

// Mirrors `_check_state_dict_similarity(state_dict, compared_state_dict)`: true when `b`
// has `a`'s structure (same key sets, list lengths) and every tensor-like leaf of `a`
// matches its counterpart's metadata: same kind; a plain Tensor the same
// dtype and shape (PyTorch's own check); a DTensor's local tensor the same dtype and
// shape; a ShardedTensor as many local shards, each of the same dtype and shape. A plain
// Tensor whose counterpart is None is a difference. Values and non-tensor leaves are not
// compared. Neither dict is modified. PyTorch returns False only for its own check and
// for CompanionMismatch; in the other cases above it raises (AttributeError,
// AssertionError, or RuntimeError from copying DTensor locals of other shapes into `b` as
// a side effect), and it accepts DTensor locals of another dtype (converting them into
// `b`): tests/golden/README.md lists each case. Metadata only: a pair CopyStateDict would
// still refuse (a meta source or destination, a destination with aliased elements) can
// be similar. Never fails: a difference, or an Opaque without a clone function, gives
// false.
bool CheckStateDictSimilarity(const Map& a, const Map& b);

// The same check, with the reason: OK when similar, else the first difference in `a`'s
// order as a companion mismatch (e.g. case-030: "companion mismatch at my_key: source
// list has 2 items, companion list has 0; missing from companion: [my_key.0.key_1,
// my_key.1.key_2]").
absl::Status CompareStateDicts(const Map& a, const Map& b);

}  // namespace sdrt

#endif  // SDRT_CORE_STATE_DICT_STATE_DICT_OPS_H_
