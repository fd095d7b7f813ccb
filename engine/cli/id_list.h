// "1, 2,3" → token ids, for the flags that take ids on the command line (--prompt-ids, --decode).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace specgen::cli {

// Comma-separated integers, whitespace allowed; an error names `flag` and the bad piece, and an
// empty list is an error. Range against a vocabulary is checked where the vocabulary is known.
absl::StatusOr<std::vector<int32_t>> ParseIdList(std::string_view flag, const std::string& text);

}  // namespace specgen::cli
