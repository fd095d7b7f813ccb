// OpenAI's `logprobs` for one reply, as the loop reports them (SpeculativeOptions::on_logprobs: each
// token's log-probability and the most probable tokens at its position, the target's own) and as its
// text goes out. A token is released with the text that holds it: once the text the stop strings let
// out covers all of its bytes, and at the end those that start before the reply's end (a stop string
// cuts the rest, as it cuts their text). The chat form is {"content": [{token, logprob, bytes,
// top_logprobs}]}; the completions form {tokens, token_logprobs, top_logprobs, text_offset}, its
// offsets in bytes from the start of the completion's text.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <span>
#include <string>

#include "engine/sampling/top_logprobs.h"
#include "nlohmann/json.hpp"

namespace specgen::serve {

class LogprobsTracker {
 public:
  // `token_text`: a token's own bytes (Tokenizer::TokenBytes).
  LogprobsTracker(std::function<std::string(int32_t)> token_text, bool chat)
      : token_text_(std::move(token_text)), chat_(chat) {}

  // The loop's figures for a step's committed tokens (on_logprobs; before their text).
  void AddLogprobs(std::span<const TokenLogprobs> step);
  // The next token's text: the bytes its detokenizing added to the reply (before stop strings).
  void AddText(size_t bytes);
  // The entries whose text lies within the first `released` bytes of the reply and not yet taken.
  nlohmann::json Take(size_t released);
  // At the end: every entry left whose text starts before `final_bytes` (with `cut` false, every one:
  // the reply ended at its own end, an end token's empty text included).
  nlohmann::json TakeRest(size_t final_bytes, bool cut);
  // An empty list of this form.
  nlohmann::json Empty() const;

 private:
  struct Entry {
    TokenLogprobs logprobs;
    size_t start = 0, end = 0;
    bool placed = false;  // AddText has given its bytes
  };
  void Append(nlohmann::json* out, const Entry& e) const;

  std::function<std::string(int32_t)> token_text_;
  bool chat_;
  std::deque<Entry> entries_;
  size_t placed_ = 0;  // entries_ given their text (from the front)
  size_t text_bytes_ = 0;
};

}  // namespace specgen::serve
