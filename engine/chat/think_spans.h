// Qwen3-style reasoning in a reply: the text between <think> and </think>. The chat shows it dimmed
// on a colour terminal so the answer stands out, hides it where there is no colour to set it apart
// (a pipe, --color never) or where reasoning was turned off, and keeps it out of the history, as the
// models' own templates drop earlier turns' reasoning.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace specgen::chat {

inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

// Which reasoning text a reply shows on screen: dimmed (a colour terminal), hidden (no colour to set it
// apart, or --reasoning off) or printed as it comes (--think show).
enum class ThinkDisplay { kDim, kHide, kShow };

// A stretch of a reply's text, and whether it is reasoning (a <think> span, its markers included).
struct ThinkSegment {
  std::string text;
  bool reasoning = false;
};

// Finds the reasoning spans in text that streams in pieces of any size: a marker split over pieces
// ("<th", "ink>") is still found, because text that may begin one is held back until the next piece
// tells (at most the marker's length less one). Qwen3 writes each marker as one token; a model that
// spells one out is caught as well. With `drop` the spans are left out of the segments, and so is
// what follows a span's end up to the first other character (the blank line after </think>), as
// WithoutThinking drops it.
class ThinkSplitter {
 public:
  explicit ThinkSplitter(bool drop) : drop_(drop) {}

  // The segments of text now decided (possibly none).
  std::vector<ThinkSegment> Add(std::string_view piece) {
    pending_ += piece;
    std::vector<ThinkSegment> out;
    while (true) {
      if (skip_blank_) {
        const size_t keep = pending_.find_first_not_of("\n ");
        pending_.erase(0, keep == std::string::npos ? pending_.size() : keep);
        if (pending_.empty()) break;
        skip_blank_ = false;
      }
      const std::string_view marker = inside_ ? kThinkClose : kThinkOpen;
      const size_t at = pending_.find(marker);
      if (at == std::string::npos) {
        const size_t held = HeldBack(marker);
        Emit(&out, pending_.substr(0, pending_.size() - held), inside_);
        pending_.erase(0, pending_.size() - held);
        break;
      }
      Emit(&out, pending_.substr(0, at), inside_);
      Emit(&out, std::string(marker), true);
      seen_ = true;
      pending_.erase(0, at + marker.size());
      skip_blank_ = drop_ && inside_;  // a span just closed
      inside_ = !inside_;
    }
    return out;
  }
  // What was held back, once the reply is complete (a span never closed stays reasoning).
  std::vector<ThinkSegment> Finish() {
    std::vector<ThinkSegment> out;
    Emit(&out, pending_, inside_);
    pending_.clear();
    return out;
  }
  bool inside() const { return inside_; }
  // Whether a reasoning span was met so far.
  bool seen() const { return seen_; }

 private:
  void Emit(std::vector<ThinkSegment>* out, std::string text, bool reasoning) const {
    if (text.empty() || (drop_ && reasoning)) return;
    if (!out->empty() && out->back().reasoning == reasoning) {
      out->back().text += text;
    } else {
      out->push_back({std::move(text), reasoning});
    }
  }
  // The length of the longest end of pending_ that is the start of `marker` (and not all of it).
  size_t HeldBack(std::string_view marker) const {
    for (size_t n = std::min(pending_.size(), marker.size() - 1); n > 0; --n) {
      if (std::string_view(pending_).substr(pending_.size() - n) == marker.substr(0, n)) return n;
    }
    return 0;
  }

  bool drop_;
  std::string pending_;
  bool inside_ = false, skip_blank_ = false, seen_ = false;
};

// The text of `segments` that is not reasoning.
inline std::string Visible(const std::vector<ThinkSegment>& segments) {
  std::string out;
  for (const ThinkSegment& s : segments) {
    if (!s.reasoning) out += s.text;
  }
  return out;
}

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
