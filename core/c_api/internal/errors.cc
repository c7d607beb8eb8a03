#include "sdrt/core/c_api/internal/errors.h"

namespace sdrt::c_api {

std::string& LastError() { return ThreadStorage<std::string>(); }

sdrt_stats_t& LastStats() {
  thread_local sdrt_stats_t stats = SDRT_STATS_INIT;
  return stats;
}

sdrt_status_t Fail(const absl::Status& status) {
  try {
    LastError() = std::string(status.message());
  } catch (...) {
    LastError().clear();
  }
  const int code = static_cast<int>(status.code());
  if (code < 0 || code > SDRT_UNAUTHENTICATED) return SDRT_UNKNOWN;
  return static_cast<sdrt_status_t>(code);
}

}  // namespace sdrt::c_api
