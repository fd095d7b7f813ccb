#include "engine/serve/logprobs.h"

#include <cmath>

namespace specgen::serve {

using nlohmann::json;

void LogprobsTracker::AddLogprobs(std::span<const TokenLogprobs> step) {
  for (const TokenLogprobs& t : step) entries_.push_back(Entry{t});
}

void LogprobsTracker::AddText(size_t bytes) {
  if (placed_ >= entries_.size()) return;  // text of a token without figures: not ours to report
  Entry& e = entries_[placed_++];
  e.start = text_bytes_;
  text_bytes_ += bytes;
  e.end = text_bytes_;
  e.placed = true;
}

json LogprobsTracker::Empty() const {
  if (chat_) return json{{"content", json::array()}};
  return json{{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
}

void LogprobsTracker::Append(json* out, const Entry& e) const {
  // JSON has no -inf: a probability that underflows to 0 is written as the lowest float.
  auto figure = [](float lp) { return std::isfinite(lp) ? lp : -3.4028235e38f; };
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (const unsigned char c : s) b.push_back(c);
    return b;
  };
  const std::string text = token_text_(e.logprobs.chosen.token);
  if (chat_) {
    json top = json::array();
    for (const TokenLogprob& t : e.logprobs.top) {
      const std::string tt = token_text_(t.token);
      top.push_back(json{{"token", tt}, {"logprob", figure(t.logprob)}, {"bytes", bytes(tt)}});
    }
    (*out)["content"].push_back(json{{"token", text},
                                     {"logprob", figure(e.logprobs.chosen.logprob)},
                                     {"bytes", bytes(text)},
                                     {"top_logprobs", std::move(top)}});
    return;
  }
  json top = json::object();
  for (const TokenLogprob& t : e.logprobs.top) top[token_text_(t.token)] = figure(t.logprob);
  (*out)["tokens"].push_back(text);
  (*out)["token_logprobs"].push_back(figure(e.logprobs.chosen.logprob));
  (*out)["top_logprobs"].push_back(std::move(top));
  (*out)["text_offset"].push_back(e.start);
}

json LogprobsTracker::Take(size_t released) {
  json out = Empty();
  while (placed_ > 0 && entries_.front().placed && entries_.front().end <= released) {
    Append(&out, entries_.front());
    entries_.pop_front();
    --placed_;
  }
  return out;
}

json LogprobsTracker::TakeRest(size_t final_bytes, bool cut) {
  json out = Take(cut ? final_bytes : static_cast<size_t>(-1));
  while (!entries_.empty()) {
    const Entry& e = entries_.front();
    if (!cut || (e.placed && e.start < final_bytes)) Append(&out, e);
    entries_.pop_front();
  }
  placed_ = 0;
  return out;
}

}  // namespace specgen::serve
