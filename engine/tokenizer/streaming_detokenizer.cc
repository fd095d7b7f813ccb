#include "engine/tokenizer/streaming_detokenizer.h"

#include "engine/core/status_macros.h"
#include "engine/tokenizer/unicode.h"

namespace specgen {
namespace {

// Could s[pos..] still become a valid sequence if more bytes arrived?
bool IsIncompletePrefix(const std::string& s, size_t pos) {
  const uint8_t c0 = static_cast<uint8_t>(s[pos]);
  int len;
  if (c0 >= 0xC2 && c0 <= 0xDF) len = 2;
  else if (c0 >= 0xE0 && c0 <= 0xEF) len = 3;
  else if (c0 >= 0xF0 && c0 <= 0xF4) len = 4;
  else return false;
  const size_t have = s.size() - pos;
  if (have >= static_cast<size_t>(len)) return false;
  for (size_t i = 1; i < have; ++i) {
    const uint8_t c = static_cast<uint8_t>(s[pos + i]);
    if ((c & 0xC0) != 0x80) return false;
    // Second-byte limits that rule out overlongs, surrogates and > U+10FFFF.
    if (i == 1 && ((c0 == 0xE0 && c < 0xA0) || (c0 == 0xED && c > 0x9F) || (c0 == 0xF0 && c < 0x90) ||
                   (c0 == 0xF4 && c > 0x8F))) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> StreamingDetokenizer::Add(int32_t id) {
  if (!tok_.IsValid(id)) {
    return InvalidArgument("detokenize: token id ", id, " is outside the vocabulary of ", tok_.vocab_size());
  }
  std::string piece = tok_.TokenBytes(id, render_special_);
  if (piece.empty()) return std::string();
  if (at_start_) {
    if (tok_.StripsLeadingSpace() && piece[0] == ' ') piece.erase(0, 1);
    at_start_ = false;
  }
  pending_ += piece;
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    uint32_t cp;
    const int len = unicode::ValidSequenceLength(pending_, i, &cp);
    if (len > 0) {
      out.append(pending_, i, len);
      i += len;
    } else if (IsIncompletePrefix(pending_, i)) {
      break;  // wait for the rest of the character
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamingDetokenizer::Finish() {
  std::string out;
  for (size_t i = 0; i < pending_.size(); ++i) out += "\xEF\xBF\xBD";
  pending_.clear();
  return out;
}

}  // namespace specgen
