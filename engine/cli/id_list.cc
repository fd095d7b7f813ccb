#include "engine/cli/id_list.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"

namespace specgen::cli {

absl::StatusOr<std::vector<int32_t>> ParseIdList(std::string_view flag, const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(piece, &id)) return InvalidArgument(flag, ": '", AsStd(piece), "' is not a token id");
    ids.push_back(id);
  }
  if (ids.empty()) return InvalidArgument(flag, ": no token ids");
  return ids;
}

}  // namespace specgen::cli
