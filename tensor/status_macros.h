// Status plumbing: public, for every sdrt layer (tensor/, cuda/, comm/, core/, tools/) and
// for code built on sdrt. They live in tensor/, the bottom layer, so that every layer may
// include them.
//
// SDRT_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr`, an absl::StatusOr<T>; if it holds an
// error, returns that status (unchanged) from the enclosing function; else moves the value
// into `lhs`. `lhs` either declares a variable or names an existing one:
//   SDRT_ASSIGN_OR_RETURN(auto t, Tensor::Empty(shape, dtype));         // declares t
//   SDRT_ASSIGN_OR_RETURN(const Tensor t, Tensor::Empty(shape, dtype)); // declares const t
//   SDRT_ASSIGN_OR_RETURN(t, Tensor::Empty(shape, dtype));              // assigns to t
// It expands to several statements, so it cannot be the body of an unbraced `if`/`for`;
// its temporary is named after __LINE__, so never write two on one line. `lhs` must not
// contain a top-level comma (a type such as std::pair<A, B> needs an alias or `auto`).
//
// SDRT_RETURN_IF_ERROR(expr): evaluates `expr`, an absl::Status; if it is not OK, returns
// it (unchanged) from the enclosing function.
//
// The enclosing function (or lambda) must return absl::Status or an absl::StatusOr<U>.
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
