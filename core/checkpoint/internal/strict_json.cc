#include "sdrt/core/checkpoint/internal/strict_json.h"

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace sdrt::internal {
namespace {

using Json = nlohmann::ordered_json;

// Thrown from the parser callback to stop the parse; never leaves ParseStrictJson.
struct Refused {
  std::string why;
};

}  // namespace

absl::StatusOr<Json> ParseStrictJson(absl::string_view text) {
  std::vector<std::set<std::string>> keys;  // the keys seen so far, one set per open object
  const Json::parser_callback_t check = [&keys](int depth, Json::parse_event_t event,
                                                Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) {
          throw Refused{absl::StrCat("nested deeper than ", kMaxJsonDepth, " levels")};
        }
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second) {
          throw Refused{absl::StrCat(
              "duplicate key \"", absl::CHexEscape(parsed.get<std::string>()), "\" in one object")};
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), check);
  } catch (const Refused& refused) {
    return absl::InvalidArgumentError(refused.why);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  }
}

}  // namespace sdrt::internal
