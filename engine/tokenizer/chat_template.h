// Chat prompts for the model families we run, chosen by what the model's chat_template text contains
// (not a Jinja engine): ChatML (Qwen: <|im_start|>role\ncontent<|im_end|>\n) and the Llama-2 /
// Mistral / Mixtral "[INST] ... [/INST]" instruction format.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace specgen {

enum class ChatFormat { kChatMl, kLlama2 };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// "<|im_start|>" in the template -> ChatML; "[INST]" -> Llama-2/Mixtral. Empty template: ChatML if the
// vocabulary has <|im_start|>, else Llama-2 if it is SentencePiece-style. Otherwise an error.
absl::StatusOr<ChatFormat> DetectChatFormat(const Tokenizer& tokenizer);

// The prompt text, special tokens written as text (BOS included where the format has it): encode it
// with EncodeOptions{.add_special = false, .parse_special = true}. With `add_generation_prompt`, the
// text ends where the assistant's reply begins.
absl::StatusOr<std::string> FormatChat(ChatFormat format, const Tokenizer& tokenizer,
                                       const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt = true);

}  // namespace specgen
