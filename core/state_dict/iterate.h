// The state-dict iteration engine, mirroring PyTorch's `_iterate_state_dict`
// (torch/distributed/_state_dict_utils.py; docs/SEMANTICS.md section 5). Not public API: offload,
// copy, create_cpu, similarity (core/state_dict/state_dict_ops.h) and gather are built on it.
// It walks with TreeWalker (core/state_dict/internal/tree_walker.h).
//
// IterateStateDict(obj, visitors, companion, options) walks `obj` depth first, in map
// insertion order, and builds a new tree:
//   * ShardedTensor -> visitors.sharded, DTensor -> visitors.dtensor, Tensor ->
//     visitors.tensor (each given the matching companion value, or nullptr);
//   * None, bool, int, float, str, bytes and an Opaque named "BytesIO" (PyTorch accepts
//     io.BytesIO) -> the same value (aliased, not copied);
//   * map -> a new map in source key order; list -> a new list; tuple -> a new tuple;
//   * any other Opaque -> with type_check: InvalidArgument naming the path and the type;
//     without: a deep copy through its `clone` function (FailedPrecondition without one).
// After each value (Step B, at every level), when this rank takes part (`ranks_only`
// empty or holding `rank`) and the result is a Tensor, DTensor or ShardedTensor:
//   * without a companion and with cpu_offload: the result moved to the CPU (an alias
//     when already there; a DTensor keeps its metadata around a CPU local; a
//     ShardedTensor moves its local shards and its placements say "cpu");
//   * with a companion: it must be of the same kind, with the same shapes and dtypes
//     (the tensor, the DTensor's local tensor, or each local shard with equal shard
//     counts); with copy_into_companion the result is then copied into it in place
//     (DTensor: local into local; ShardedTensor: shard i into shard i) with
//     `non_blocking` on `stream`, and the result becomes the companion value (aliasing
//     the companion's tensors).
// A rank outside `ranks_only` runs every visitor (collectives inside them stay matched)
// and gets an empty map for a map and None for anything else, so an empty map at the top.
//
// Companion rules. A companion of None (or a missing one) means "no companion" below that
// point, as in PyTorch. Otherwise a map needs a map companion with the same key set, a
// list or tuple a list or tuple companion of the same length (a list may match a tuple),
// and a tensor-like result a companion of the same kind, shapes and dtypes (no
// broadcasting or dtype conversion). Non-tensor leaves ignore their companion.
// Every violation is an InvalidArgument whose message starts "companion mismatch at
// <path>: " and names what differs (kinds; keys missing from / only in the companion as
// flattened dotted names; list lengths with the flattened names of the extra items;
// shapes and dtypes). PyTorch raises CompanionMismatch for some of these and crashes with
// AttributeError/AssertionError/IndexError/RuntimeError for others (docs/SEMANTICS.md 11.8,
// tests/golden/README.md); sdrt always returns the clean error. IsCompanionMismatch() recognises
// it.
//
// Paths are dotted: map keys and list indices joined with '.', as `_flatten_state_dict`
// names them ("layers.3.weight"); the root is "<root>".
#ifndef SDRT_CORE_STATE_DICT_ITERATE_H_
#define SDRT_CORE_STATE_DICT_ITERATE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::internal {

// The type name of the Opaque that stands for Python's io.BytesIO.
inline constexpr absl::string_view kBytesIOTypeName = "BytesIO";

// Per-kind visitors. `companion` is the matching companion value (never a None value) or
// nullptr. A visitor's error is returned with the path added: a CompanionMismatch(what)
// becomes "companion mismatch at <path>: <what>", any other error gets " (at <path>)".
using ShardedVisitor =
    std::function<absl::StatusOr<Value>(const ShardedTensor&, const Value* companion)>;
using DTensorVisitor = std::function<absl::StatusOr<Value>(const DTensor&, const Value* companion)>;
using TensorVisitor = std::function<absl::StatusOr<Value>(const Tensor&, const Value* companion)>;

struct IterateVisitors {
  ShardedVisitor sharded;
  DTensorVisitor dtensor;
  TensorVisitor tensor;
};

// Visitors that return their argument unchanged (PyTorch's `_identity_func`).
IterateVisitors IdentityVisitors();

struct IterateOptions {
  int rank = 0;                 // this process's rank (group rank in PyTorch)
  std::vector<int> ranks_only;  // empty: every rank keeps its results
  bool cpu_offload = false;     // ignored where a companion is given
  bool type_check = true;
  bool non_blocking = true;       // for copies into the companion (PyTorch's default)
  StreamHandle stream = nullptr;  // CUDA stream of the companion copies (nullptr: legacy
                                  // default stream); CPU copies complete before returning
  // False: everything is checked as if copying (structure, kinds, shapes, dtypes, shard
  // counts) but nothing is copied and results stay the source's (what a similarity check
  // needs; PyTorch always copies).
  bool copy_into_companion = true;
};

// Runs the engine described at the top of this file on a state dict (a map, so the
// result is a map: the empty map on an excluded rank). `companion` may be nullptr.
absl::StatusOr<Map> IterateStateDict(const Map& obj, const IterateVisitors& visitors,
                                     const Map* companion, const IterateOptions& options);

// The error a visitor returns for a companion that does not match; the engine adds the
// path. InvalidArgument, recognised by IsCompanionMismatch.
absl::Status CompanionMismatch(absl::string_view what);
// True for every companion mismatch the engine or a visitor reports.
bool IsCompanionMismatch(const absl::Status& status);

// How mismatch messages describe differing kinds: "source is a dict, companion is a list".
std::string KindsDiffer(const Value& source, const Value& companion);

// A Tensor, DTensor or ShardedTensor value moved to the CPU as PyTorch's .to("cpu") does:
// the value itself (an alias) when already there; a DTensor keeps its metadata around a
// CPU local; a ShardedTensor gets CPU shards and "cpu" placements (ShardedOnCpu). CUDA
// copies are blocking. FailedPrecondition for meta tensors (no data).
absl::StatusOr<Value> MoveToCpu(const Value& value);

// Calls `fn` on every tensor holding data in `state_dict`, in the order the engine visits
// them: plain tensors, DTensor local tensors, ShardedTensor local shard tensors.
// TreeWalker's error for a tree nested too deep (after calling `fn` on the tensors before).
absl::Status ForEachTensor(const Map& state_dict, const std::function<void(const Tensor&)>& fn);

// `st` with its local shard tensors replaced by `tensors` (one per local shard, same
// shapes and dtype) that are all on the CPU, every placement rewritten to the CPU, as
// PyTorch's ShardedTensor.to("cpu") does.
absl::StatusOr<ShardedTensor> ShardedOnCpu(const ShardedTensor& st, std::vector<Tensor> tensors);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_STATE_DICT_ITERATE_H_
