// Parsing a JSON input file (index.json, PLAN.json) strictly: the same document
// nlohmann::ordered_json::parse gives, except that an object naming a key twice and nesting
// deeper than kMaxJsonDepth are refused (the safetensors header reader refuses duplicate
// keys too; a last-wins parse would silently drop the first value).
#ifndef SDRT_CORE_CHECKPOINT_INTERNAL_STRICT_JSON_H_
#define SDRT_CORE_CHECKPOINT_INTERNAL_STRICT_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace sdrt::internal {

// The deepest nesting of objects and arrays accepted; sdrt's files nest 4 deep.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`. InvalidArgument, the message being the reason alone (callers prefix the
// file): "not valid JSON: <nlohmann's error>", "duplicate key \"<key>\" in one object", or
// "nested deeper than 64 levels".
absl::StatusOr<nlohmann::ordered_json> ParseStrictJson(absl::string_view text);

// Appends member `key` to the JSON object `object` without looking it up (nlohmann's
// operator[] and emplace search an ordered object's members: quadratic over many members).
// The caller knows `key` is not in `object` yet (else the document names it twice).
void AppendNewMember(nlohmann::ordered_json& object, std::string key,
                     nlohmann::ordered_json value);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_CHECKPOINT_INTERNAL_STRICT_JSON_H_
