// Debian 12's Abseil (20220623) is built with its own absl::string_view, which is NOT std::string_view:
// absl::StrCat and friends reject a std::string_view. specgen::Cat is absl::StrCat that accepts both;
// use it (and AsAbsl / AsStd at the few other boundaries) instead of sprinkling std::string copies.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace specgen {

inline absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view AsStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

namespace internal {
template <typename T>
const T& CatArg(const T& v) {
  return v;
}
inline absl::string_view CatArg(std::string_view v) { return AsAbsl(v); }
inline absl::string_view CatArg(const std::string& v) { return absl::string_view(v); }
}  // namespace internal

template <typename... Args>
std::string Cat(const Args&... args) {
  return absl::StrCat(internal::CatArg(args)...);
}

}  // namespace specgen
