// Byte sizes on the command line and in output: "512MiB", "8GiB", "1.5GB", "4096" ⇄ size_t.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace specgen {

// Accepts an integer or decimal number followed by an optional unit: B, KiB, MiB, GiB, TiB (powers of
// 1024) or KB, MB, GB, TB (powers of 1000); case-insensitive, optional space. Rejects negatives and
// values that overflow size_t.
absl::StatusOr<size_t> ParseByteSize(std::string_view text);

// "1.50 GiB", "512.0 MiB", "17 B": binary units, three significant digits.
std::string FormatBytes(double bytes);

}  // namespace specgen
