#include "engine/cli/token_probs.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace specgen::cli {
namespace {

using nlohmann::ordered_json;

// A token's own bytes (a piece of a UTF-8 character stays a piece: `bytes` says what it was).
ordered_json Entry(const TokenLogprob& e, const Tokenizer* tok) {
  ordered_json j;
  j["id"] = e.token;
  if (tok != nullptr && tok->IsValid(e.token)) {
    const std::string bytes = tok->TokenBytes(e.token, true);
    j["token"] = bytes;
    ordered_json b = ordered_json::array();
    for (const unsigned char c : bytes) b.push_back(c);
    j["bytes"] = std::move(b);
  } else {
    j["token"] = nullptr;
    j["bytes"] = nullptr;
  }
  // JSON has no -inf: a probability that underflows to 0 is null, as a figure that does not apply.
  if (std::isfinite(e.logprob)) {
    j["logprob"] = e.logprob;
  } else {
    j["logprob"] = nullptr;
  }
  return j;
}

// The token as a quoted, escaped string for a terminal (control bytes and newlines visible).
std::string Quoted(const TokenLogprob& e, const Tokenizer* tok) {
  if (tok == nullptr || !tok->IsValid(e.token)) return absl::StrFormat("#%d", e.token);
  std::string out = "'";
  for (const unsigned char c : tok->TokenBytes(e.token, true)) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\'' || c == '\\') (out += '\\') += static_cast<char>(c);
    else if (c < 0x20 || c == 0x7f) out += absl::StrFormat("\\x%02x", c);
    else out += static_cast<char>(c);
  }
  return out + "'";
}

}  // namespace

ordered_json ProbsJson(std::span<const TokenLogprobs> probs, const Tokenizer* tok) {
  ordered_json out = ordered_json::array();
  for (const TokenLogprobs& p : probs) {
    ordered_json j = Entry(p.chosen, tok);
    ordered_json top = ordered_json::array();
    for (const TokenLogprob& e : p.top) top.push_back(Entry(e, tok));
    j["top_logprobs"] = std::move(top);
    out.push_back(std::move(j));
  }
  return out;
}

std::string WithProbs(const std::string& stats_json, std::span<const TokenLogprobs> probs, const Tokenizer* tok) {
  const size_t close = stats_json.rfind('}');
  if (close == std::string::npos) return stats_json;
  // Token bytes may be half a UTF-8 character: replaced in the dump, never a thrown exception.
  const std::string array = ProbsJson(probs, tok).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  const bool empty_object = stats_json.find_first_not_of(" \t\n{", 0) == close;
  return stats_json.substr(0, close) + (empty_object ? "" : ",") + "\"completion_probabilities\":" + array +
         stats_json.substr(close);
}

std::string ProbsText(std::span<const TokenLogprobs> probs, const Tokenizer* tok) {
  std::string out;
  for (size_t i = 0; i < probs.size(); ++i) {
    const TokenLogprobs& p = probs[i];
    out += absl::StrFormat("%4d %s %.4f |", i, Quoted(p.chosen, tok), p.chosen.logprob);
    for (const TokenLogprob& e : p.top) out += absl::StrFormat(" %s %.4f", Quoted(e, tok), e.logprob);
    out += "\n";
  }
  return out;
}

}  // namespace specgen::cli
