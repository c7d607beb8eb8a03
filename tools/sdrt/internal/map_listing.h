// `sdrt inspect SRC --map MAP --mesh M --plan P`: what each tensor of the engine's layout
// is made of on each rank (the weight map's lowering, internal/mapping/lowering.h): for
// every destination tensor a rule makes, per rank and local, which rows of which source
// tensor land where. The tensors no rule touches are not listed.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_MAP_LISTING_H_
#define SDRT_TOOLS_SDRT_INTERNAL_MAP_LISTING_H_

#include <string>

#include "absl/status/status.h"
#include "sdrt/tools/sdrt/internal/weight_map_option.h"

namespace sdrt::cli {

// Prints the listing (text, or JSON with `json`) to stdout. InvalidArgument for a missing
// --mesh or --plan, a source that does not open, the map's and the plan's errors.
absl::Status InspectMap(const std::string& path, const WeightMapOptions& engine,
                        const std::string& mesh, const std::string& plan, bool json);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_MAP_LISTING_H_
