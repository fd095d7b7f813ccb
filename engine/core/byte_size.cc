#include "engine/core/byte_size.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "engine/core/str_cat.h"

namespace specgen {

absl::StatusOr<size_t> ParseByteSize(std::string_view text) {
  std::string_view s = AsStd(absl::StripAsciiWhitespace(AsAbsl(text)));
  size_t i = 0;
  while (i < s.size() && (absl::ascii_isdigit(s[i]) || s[i] == '.')) ++i;
  std::string_view number = s.substr(0, i);
  std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(AsAbsl(s.substr(i))));
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(AsAbsl(number), &value)) {
    return absl::InvalidArgumentError(
        Cat("invalid size '", text, "': expected a number with an optional unit, e.g. 8GiB"));
  }
  double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "kib" || unit == "k") mult = 1024.0;
  else if (unit == "mib" || unit == "m") mult = 1024.0 * 1024;
  else if (unit == "gib" || unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (unit == "tib" || unit == "t") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "tb") mult = 1e12;
  else {
    return absl::InvalidArgumentError(Cat("invalid size '", text, "': unknown unit '", unit,
                                                   "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)"));
  }
  const double bytes = std::floor(value * mult);
  if (!(bytes < static_cast<double>(std::numeric_limits<size_t>::max()))) {
    return absl::InvalidArgumentError(Cat("invalid size '", text, "': too large"));
  }
  return static_cast<size_t>(bytes);
}

std::string FormatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 5) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else std::snprintf(buf, sizeof buf, bytes < 10 ? "%.2f %s" : bytes < 100 ? "%.1f %s" : "%.0f %s", bytes, kUnits[u]);
  return buf;
}

}  // namespace specgen
