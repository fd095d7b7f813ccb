// Status plumbing used at every boundary (files, configs, planning, CUDA): early-return helpers
// that Abseil 2022 does not ship publicly, and a constructor for errors that name their subject.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/str_cat.h"

#define SPECGEN_CONCAT_INNER(a, b) a##b
#define SPECGEN_CONCAT(a, b) SPECGEN_CONCAT_INNER(a, b)

// RETURN_IF_ERROR(expr): evaluates an absl::Status expression and returns it if not OK.
#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    ::absl::Status _specgen_status = (expr);          \
    if (!_specgen_status.ok()) return _specgen_status; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): lhs = value of a StatusOr expression, or return its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  SPECGEN_ASSIGN_OR_RETURN_IMPL(SPECGEN_CONCAT(_specgen_statusor_, __LINE__), lhs, expr)
#define SPECGEN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

namespace specgen {

// Error helpers: the message always starts with what it is about (a file, a tensor, a flag).
template <typename... Args>
absl::Status InvalidArgument(const Args&... args) {
  return absl::InvalidArgumentError(Cat(args...));
}
template <typename... Args>
absl::Status DataLoss(const Args&... args) {  // corrupt or truncated input files
  return absl::DataLossError(Cat(args...));
}
template <typename... Args>
absl::Status NotFound(const Args&... args) {
  return absl::NotFoundError(Cat(args...));
}
template <typename... Args>
absl::Status Unimplemented(const Args&... args) {
  return absl::UnimplementedError(Cat(args...));
}

}  // namespace specgen
