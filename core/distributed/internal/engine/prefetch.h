// Software prefetch of the caller's tree while a loop walks its leaves (ExecuteReshard's
// walk over the plan's tensors; the one-shot calls make several passes over the tree and
// gained little from it in their first pass, so they do not use it). A state dict of
// thousands of tensors is thousands of Values and of DTensor / ShardedTensor objects spread
// over the heap; once they no longer fit in cache each first read of one stalls on memory
// (measured: half of ExecuteReshard's time at 10,000 tensors, bench/RESULTS.md). A loop over
// the leaves asks for a leaf's Value some iterations ahead and, once that Value is in cache,
// for the object it holds, so that the reads it makes itself find them there. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PREFETCH_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PREFETCH_H_

#include <cstddef>

#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"

namespace sdrt::internal {

// How far ahead a loop asks: the held objects kLeavesAhead leaves ahead, the Values twice
// as far (they must be in cache when their held object's address is read).
inline constexpr size_t kLeavesAhead = 8;

// Asks for the cache lines of [p, p + bytes).
inline void PrefetchBytes(const void* p, size_t bytes) {
  const char* const c = static_cast<const char*>(p);
  for (size_t at = 0; at < bytes; at += 64) __builtin_prefetch(c + at);
  if (bytes > 0) __builtin_prefetch(c + bytes - 1);
}

// Asks for a Value, or for the DTensor or ShardedTensor it holds (which reads the Value).
inline void PrefetchValue(const Value* v) {
  if (v != nullptr) PrefetchBytes(v, sizeof(Value));
}
inline void PrefetchHeld(const Value* v) {
  if (v == nullptr) return;
  if (v->kind() == ValueKind::kDTensor) PrefetchBytes(&v->as_dtensor(), sizeof(DTensor));
  if (v->kind() == ValueKind::kShardedTensor) {
    PrefetchBytes(&v->as_sharded(), sizeof(ShardedTensor));
  }
}

// Calls body(i) for i in [0, n) in order, having asked for value_at(j)'s Value 2 *
// kLeavesAhead and its held object kLeavesAhead iterations before j. value_at(j) returns a
// const Value* (null: nothing to ask for). Stops early when body returns false.
template <typename ValueAt, typename Body>
void ForEachPrefetched(size_t n, ValueAt value_at, Body body) {
  for (size_t j = 0; j < n && j < 2 * kLeavesAhead; ++j) PrefetchValue(value_at(j));
  for (size_t j = 0; j < n && j < kLeavesAhead; ++j) PrefetchHeld(value_at(j));
  for (size_t i = 0; i < n; ++i) {
    if (i + 2 * kLeavesAhead < n) PrefetchValue(value_at(i + 2 * kLeavesAhead));
    if (i + kLeavesAhead < n) PrefetchHeld(value_at(i + kLeavesAhead));
    if (!body(i)) return;
  }
}

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PREFETCH_H_
