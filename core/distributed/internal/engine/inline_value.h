// The inline values of a leaf description (descriptors.h): what a broadcast root sends of
// the leaves that are not tensors to move (None, bool, int, float, str, bytes, and 0-dim
// tensors), as CBOR (nlohmann::json; such leaves are few). Bytes from another rank are not
// trusted: they are checked to be one bounded CBOR item before the parser sees them, and
// decoding never throws. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_INLINE_VALUE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_INLINE_VALUE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::internal {

// The CBOR of `value` (the leaf at `path`): a 0-dim tensor is copied to the CPU first.
// InvalidArgument naming the path for what cannot travel inline (a tensor of dimension >= 1,
// a DTensor or ShardedTensor, an Opaque, a container); a 0-dim tensor's copy errors.
absl::StatusOr<std::string> EncodeInlineValue(absl::string_view path, const Value& value);

// The value EncodeInlineValue made of `cbor` (a 0-dim tensor on the CPU); InvalidArgument
// ("inline value: ...") for bytes that are not one.
absl::StatusOr<Value> DecodeInlineValue(absl::string_view cbor);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_INLINE_VALUE_H_
