// Status plumbing for core/ sources: declare-and-assign from a StatusOr or return its
// error, and return a non-OK Status. Not public API.
#ifndef SDRT_TENSOR_STATUS_MACROS_H_
#define SDRT_TENSOR_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"

#define SDRT_STATUS_CONCAT_INNER_(a, b) a##b
#define SDRT_STATUS_CONCAT_(a, b) SDRT_STATUS_CONCAT_INNER_(a, b)
#define SDRT_ASSIGN_OR_RETURN_IMPL_(var, tmp, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  var = *std::move(tmp)
#define SDRT_ASSIGN_OR_RETURN(var, expr) \
  SDRT_ASSIGN_OR_RETURN_IMPL_(var, SDRT_STATUS_CONCAT_(status_or_, __LINE__), expr)
#define SDRT_RETURN_IF_ERROR(expr)               \
  do {                                           \
    const absl::Status sdrt_status_ = (expr);    \
    if (!sdrt_status_.ok()) return sdrt_status_; \
  } while (false)

#endif  // SDRT_TENSOR_STATUS_MACROS_H_
