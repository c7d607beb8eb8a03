#include "sdrt/core/distributed/load_options.h"

namespace sdrt {

absl::string_view ReadModeName(ReadMode mode) {
  switch (mode) {
    case ReadMode::kAuto:
      return "auto";
    case ReadMode::kAll:
      return "all";
    case ReadMode::kRoot:
      return "root";
  }
  return "unknown";
}

}  // namespace sdrt
