// Qwen3-style reasoning in a reply: the text between <think> and </think>. The chat shows it dimmed
// (on a colour terminal) so the answer stands out, and keeps it out of the history, as the models'
// own templates drop earlier turns' reasoning.
#pragma once

#include <string>
#include <string_view>

namespace specgen::chat {

inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

// Follows a streamed reply piece by piece (a piece is one token's text).
class ThinkTracker {
 public:
  // Whether `piece` belongs to a reasoning span, markers included.
  bool Inside(std::string_view piece) {
    if (piece.find(kThinkOpen) != std::string_view::npos) inside_ = true;
    const bool inside = inside_;
    if (piece.find(kThinkClose) != std::string_view::npos) inside_ = false;
    return inside;
  }

 private:
  bool inside_ = false;
};

// `text` without its reasoning spans (an unclosed span runs to the end) and the blank lines that
// followed them.
inline std::string WithoutThinking(std::string_view text) {
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kThinkOpen, at);
    if (open == std::string_view::npos) {
      out += text.substr(at);
      break;
    }
    out += text.substr(at, open - at);
    const size_t close = text.find(kThinkClose, open);
    if (close == std::string_view::npos) break;
    at = close + kThinkClose.size();
    while (at < text.size() && (text[at] == '\n' || text[at] == ' ')) ++at;
  }
  return out;
}

}  // namespace specgen::chat
