// sdrt/c_api.h: status strings, the last error, versions and the last call's stats.
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/version.h"

using sdrt::c_api::Guard;

extern "C" {

const char* sdrt_status_string(sdrt_status_t status) {
  switch (status) {
    case SDRT_OK: return "OK";
    case SDRT_CANCELLED: return "CANCELLED";
    case SDRT_UNKNOWN: return "UNKNOWN";
    case SDRT_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case SDRT_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case SDRT_NOT_FOUND: return "NOT_FOUND";
    case SDRT_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case SDRT_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case SDRT_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case SDRT_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case SDRT_ABORTED: return "ABORTED";
    case SDRT_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case SDRT_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case SDRT_INTERNAL: return "INTERNAL";
    case SDRT_UNAVAILABLE: return "UNAVAILABLE";
    case SDRT_DATA_LOSS: return "DATA_LOSS";
    case SDRT_UNAUTHENTICATED: return "UNAUTHENTICATED";
  }
  return "UNKNOWN_STATUS";
}

const char* sdrt_last_error(void) { return sdrt::c_api::LastError().c_str(); }

const char* sdrt_get_version(void) { return SDRT_VERSION_STRING; }

int sdrt_get_version_number(void) {
  return SDRT_VERSION_MAJOR * 10000 + SDRT_VERSION_MINOR * 100 + SDRT_VERSION_PATCH;
}

int sdrt_get_abi_version(void) { return SDRT_C_ABI_VERSION; }

int sdrt_get_api_version(void) { return SDRT_C_API_VERSION; }

sdrt_status_t sdrt_get_last_stats(sdrt_stats_t* stats) {
  // Not through Guard: reading the stats must not reset the last error.
  if (stats == nullptr) {
    return sdrt::c_api::Fail(absl::InvalidArgumentError("sdrt_get_last_stats: stats is NULL"));
  }
  if (stats->struct_size != sizeof(sdrt_stats_t)) {
    return sdrt::c_api::Fail(sdrt::c_api::CheckStructSize(stats, "sdrt_get_last_stats: stats"));
  }
  *stats = sdrt::c_api::LastStats();
  return SDRT_OK;
}

}  // extern "C"
