// The body of POST /v1/completions and /v1/chat/completions (OpenAI's API), parsed and checked
// field by field. Everything that needs no model is checked here; the error names the field and what
// is wrong with it (absl InvalidArgument: HTTP 400). What needs the model (the prompt's length
// against the context, the model's name) is the server's to check.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling/sampling_params.h"
#include "engine/tokenizer/chat_template.h"

namespace specgen::serve {

// OpenAI allows at most 4 stop strings.
inline constexpr size_t kMaxStopStrings = 4;
// And at most 20 top_logprobs (the chat's; 5 for the legacy completions, which specgen widens to 20).
inline constexpr int kMaxTopLogprobs = 20;

struct CompletionRequest {
  bool chat = false;
  std::string model;                  // empty: not given (the served model is meant)
  std::string prompt;                 // /v1/completions
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  std::optional<int64_t> max_tokens;  // not given: the server's -n
  SamplingParams sampling;            // fields not given keep the server's defaults
  bool seed_given = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  // Per token log-probabilities: the chat's "logprobs": true with "top_logprobs": N, or the
  // completions' "logprobs": N (the chosen token's and the N most probable).
  bool logprobs = false;
  int top_logprobs = 0;
};

// Parses `body` for the completions (`chat` false) or chat endpoint; fields absent keep `defaults`
absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body, bool chat,
                                                         const SamplingParams& defaults);

}  // namespace specgen::serve
