// Small helpers around absl::Status that the packaged abseil (20220623) lacks.
// RETURN_IF_ERROR(expr) returns the status of `expr` when it is not OK.
// ASSIGN_OR_RETURN(lhs, expr) evaluates a StatusOr, returns its status on error,
// and otherwise moves the value into `lhs` (which may be a declaration).
#ifndef XMOD_COMMON_STATUS_MACROS_H_
#define XMOD_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define XMOD_CONCAT_INNER_(a, b) a##b
#define XMOD_CONCAT_(a, b) XMOD_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    const ::absl::Status xmod_status_ = (expr);  \
    if (!xmod_status_.ok()) return xmod_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(XMOD_CONCAT_(xmod_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // XMOD_COMMON_STATUS_MACROS_H_
