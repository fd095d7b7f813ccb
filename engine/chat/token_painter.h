// Colours a reply by where each token came from: accepted draft tokens in one colour, the target's
// own tokens (its correction or bonus token of each pass) in another, so that speculation can be
// seen working. The loop calls OnPass(k, result) right before it hands the pass's tokens to the
// sink: result.tokens holds the n_accepted drafts first, then the target's token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/sampling/acceptance.h"

namespace specgen::chat {

inline constexpr std::string_view kDraftColor = "\x1b[32m";   // green
inline constexpr std::string_view kTargetColor = "\x1b[36m";  // cyan
inline constexpr std::string_view kResetColor = "\x1b[0m";
inline constexpr std::string_view kDim = "\x1b[2m";  // reasoning (<think> spans)

class TokenPainter {
 public:
  explicit TokenPainter(bool enabled) : enabled_(enabled) {}

  void OnPass(const AcceptResult& result) {
    drafts_left_ = result.n_accepted;
    pass_seen_ = true;
  }
  // The text of the pass's next token, coloured (and dim, for reasoning text); tokens of a pass the
  // painter was not told of are the target's.
  std::string Paint(std::string_view piece, bool dim = false) { return Colour(piece, NextIsDraft(), dim); }
  // The same in two steps, for a token whose text comes in several parts (some of them reasoning):
  // counts the pass's next token and says whether the draft proposed it...
  bool NextIsDraft() {
    const bool draft = pass_seen_ && drafts_left_ > 0;
    if (drafts_left_ > 0) --drafts_left_;
    if (draft) ++draft_tokens_;
    else ++target_tokens_;
    return draft;
  }
  // ...and colours one part of its text.
  std::string Colour(std::string_view text, bool draft, bool dim) const {
    if (!enabled_ || text.empty()) return std::string(text);
    return std::string(dim ? kDim : "") + std::string(draft ? kDraftColor : kTargetColor) + std::string(text) +
           std::string(kResetColor);
  }
  int64_t draft_tokens() const { return draft_tokens_; }
  int64_t target_tokens() const { return target_tokens_; }

 private:
  bool enabled_;
  bool pass_seen_ = false;
  int32_t drafts_left_ = 0;
  int64_t draft_tokens_ = 0, target_tokens_ = 0;
};

}  // namespace specgen::chat
