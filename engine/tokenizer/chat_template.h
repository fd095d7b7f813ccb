// Chat prompts for the model families we run, chosen by what the model's chat_template text contains
// (not a Jinja engine), or by name (--chat-template):
//   chatml   Qwen and others: <|im_start|>role\ncontent<|im_end|>\n
//   llama3   <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
//   mistral  Llama-2 / Mistral / Mixtral: <s>[INST] user [/INST]answer</s> (alias: llama2)
//   gemma    <bos><start_of_turn>user\ncontent<end_of_turn>\n<start_of_turn>model\n...
//   harmony  gpt-oss: <|start|>role<|message|>content<|end|>, the reply on the final channel,
//            stopping at <|return|>; a system message becomes the developer's instructions
//   glm4     GLM-4.5: [gMASK]<sop><|system|>\n...<|user|>\n...<|assistant|>, the reply ending where
//            the model writes <|user|>
// Formats without a system role (mistral, gemma) put the system message in front of the first user
// message, as their newer templates do.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace specgen {

enum class ChatFormat { kChatMl, kLlama2, kLlama3, kGemma, kHarmony, kGlm4 };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// The --chat-template names: chatml, llama3, mistral (or llama2), gemma, harmony, glm4.
std::string_view ChatFormatName(ChatFormat format);
absl::StatusOr<ChatFormat> ParseChatFormat(std::string_view name);

// By the markers in the model's template (<|start_header_id|>, <start_of_turn>, <|im_start|>,
// [INST]); without a template, by the vocabulary's special tokens (SentencePiece-style: [INST]).
// Otherwise an error that says to pick one with --chat-template.
absl::StatusOr<ChatFormat> DetectChatFormat(const Tokenizer& tokenizer);

// The token that ends an assistant turn in `format`, as text ("<|im_end|>", "<|eot_id|>",
// "<end_of_turn>", or the tokenizer's EOS for mistral); empty when the vocabulary has none. Chat stops
// a reply there even when the model's own end-of-generation list lacks it (a format chosen by name).
std::string EndOfTurnText(ChatFormat format, const Tokenizer& tokenizer);

// The prompt text, special tokens written as text (BOS included where the format has it): encode it
// with EncodeOptions{.add_special = false, .parse_special = true}. With `add_generation_prompt`, the
// text ends where the assistant's reply begins.
// `thinking` false: the reply starts after an empty <think></think> span, as Qwen3's template writes
// it for enable_thinking=false (chatml only; see HasThinkingSwitch).
absl::StatusOr<std::string> FormatChat(ChatFormat format, const Tokenizer& tokenizer,
                                       const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt = true, bool thinking = true);

// Whether the model's chat template has Qwen3's thinking switch (it reads enable_thinking).
bool HasThinkingSwitch(const Tokenizer& tokenizer);

}  // namespace specgen
