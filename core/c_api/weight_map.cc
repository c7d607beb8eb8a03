// sdrt/c_api.h: weight maps (WeightMap, core/distributed/weight_map.h) from their JSON form
// or built in, for sdrt_load_options_t.weight_map and sdrt_reshard_options_t.weight_map.
#include <cstddef>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/status_macros.h"

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

namespace {

// A new live handle owning `map`.
sdrt_weight_map_t NewMap(sdrt::WeightMap map) {
  auto object = std::make_unique<c_api::WeightMapObject>();
  object->map = std::move(map);
  return c_api::NewHandle<sdrt_weight_map_t>(std::move(object));
}

}  // namespace

extern "C" {

sdrt_status_t sdrt_weight_map_from_json(const char* json, size_t length, sdrt_weight_map_t* out) {
  return Guard("sdrt_weight_map_from_json", [&]() -> absl::Status {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(json, "json"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
    // A string_view holds at most PTRDIFF_MAX bytes (a longer one aborts); FromJson refuses
    // anything over 1 MiB with its own message.
    if (length > static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight map: ", length, " bytes of JSON; at most 1 MiB"));
    }
    SDRT_ASSIGN_OR_RETURN(sdrt::WeightMap map,
                          sdrt::WeightMap::FromJson(absl::string_view(json, length)));
    *out = NewMap(std::move(map));
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_weight_map_builtin(const char* name, int64_t head_size,
                                      sdrt_weight_map_t* out) {
  return Guard("sdrt_weight_map_builtin", [&]() -> absl::Status {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(name, "name"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
    SDRT_ASSIGN_OR_RETURN(sdrt::WeightMap map, sdrt::WeightMap::Builtin(name, head_size));
    *out = NewMap(std::move(map));
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_weight_map_destroy(sdrt_weight_map_t map) {
  return Guard("sdrt_weight_map_destroy", [&] { return c_api::DestroyHandle(map, "map"); });
}

}  // extern "C"
