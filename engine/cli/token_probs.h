// generate's --n-probs output: each emitted token's log-probability and the N most probable tokens at
// its position, as llama.cpp's /completion reports n_probs (completion_probabilities: id, token,
// bytes, logprob, top_logprobs), in --stats json, and as lines on stderr with --stats text.
#pragma once

#include <span>
#include <string>

#include "engine/sampling/top_logprobs.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace specgen::cli {

// The completion_probabilities array; `tok` may be null (no tokenizer: token and bytes are null).
nlohmann::ordered_json ProbsJson(std::span<const TokenLogprobs> probs, const Tokenizer* tok);

// `stats_json` (one object) with "completion_probabilities" added as its last key.
std::string WithProbs(const std::string& stats_json, std::span<const TokenLogprobs> probs, const Tokenizer* tok);

// One line per token: position, the token and its log-probability, then the top N.
std::string ProbsText(std::span<const TokenLogprobs> probs, const Tokenizer* tok);

}  // namespace specgen::cli
