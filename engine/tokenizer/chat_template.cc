#include "engine/tokenizer/chat_template.h"

#include "engine/core/status_macros.h"

namespace specgen {
namespace {

constexpr char kFormatNames[] = "chatml, llama3, mistral (or llama2), gemma, harmony, glm4";

// gpt-oss's system message as its template writes it without a date or tools (reasoning medium).
constexpr char kHarmonySystem[] =
    "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n\n"
    "Reasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
    "every message.";

// The text of `tok`'s special token `id`, or `fallback` when the tokenizer has none.
std::string SpecialText(const Tokenizer& tok, int32_t id, std::string_view fallback) {
  return id >= 0 ? tok.TokenText(id) : std::string(fallback);
}

// [INST] and Gemma have no system role: the system text goes in front of the first user message.
absl::Status Alternate(const std::vector<ChatMessage>& messages, std::string_view format,
                       std::vector<ChatMessage>* turns) {
  std::string system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += m.content;
      continue;
    }
    const bool expect_user = turns->size() % 2 == 0;
    if ((m.role == "user") != expect_user) {
      return InvalidArgument("chat: the ", format,
                             " format needs user and assistant messages to alternate, starting with user");
    }
    turns->push_back(m);
    if (m.role == "user" && !system.empty()) {
      turns->back().content = Cat(system, "\n\n", m.content);
      system.clear();
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatMl: return "chatml";
    case ChatFormat::kLlama2: return "mistral";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kGemma: return "gemma";
    case ChatFormat::kHarmony: return "harmony";
    case ChatFormat::kGlm4: return "glm4";
  }
  return "?";
}

absl::StatusOr<ChatFormat> ParseChatFormat(std::string_view name) {
  if (name == "chatml") return ChatFormat::kChatMl;
  if (name == "llama3") return ChatFormat::kLlama3;
  if (name == "mistral" || name == "llama2") return ChatFormat::kLlama2;
  if (name == "gemma") return ChatFormat::kGemma;
  if (name == "harmony") return ChatFormat::kHarmony;
  if (name == "glm4") return ChatFormat::kGlm4;
  return InvalidArgument("--chat-template must be one of ", kFormatNames, ", got '", name, "'");
}

absl::StatusOr<ChatFormat> DetectChatFormat(const Tokenizer& tok) {
  const std::string& t = tok.chat_template();
  // Llama 3 and Gemma first: their templates can mention the others' markers in comments or tools.
  if (t.find("<|start_header_id|>") != std::string::npos) return ChatFormat::kLlama3;
  if (t.find("<start_of_turn>") != std::string::npos) return ChatFormat::kGemma;
  if (t.find("<|channel|>") != std::string::npos) return ChatFormat::kHarmony;
  if (t.find("[gMASK]") != std::string::npos || t.find("<|assistant|>") != std::string::npos) return ChatFormat::kGlm4;
  if (t.find("<|im_start|>") != std::string::npos) return ChatFormat::kChatMl;
  if (t.find("[INST]") != std::string::npos) return ChatFormat::kLlama2;
  if (t.empty()) {
    if (tok.TokenId("<|im_start|>") >= 0) return ChatFormat::kChatMl;
    if (tok.TokenId("<|start_header_id|>") >= 0) return ChatFormat::kLlama3;
    if (tok.TokenId("<start_of_turn>") >= 0) return ChatFormat::kGemma;
    if (tok.TokenId("<|channel|>") >= 0) return ChatFormat::kHarmony;
    if (tok.TokenId("[gMASK]") >= 0) return ChatFormat::kGlm4;
    if (tok.kind() == TokenizerKind::kSpm) return ChatFormat::kLlama2;
  }
  return Unimplemented("the model's chat template is not one specgen recognises (",
                       t.empty() ? std::string("the model has none") : t.substr(0, 80),
                       "); choose one with --chat-template ", kFormatNames);
}

std::string EndOfTurnText(ChatFormat format, const Tokenizer& tok) {
  std::string text;
  switch (format) {
    case ChatFormat::kChatMl: text = "<|im_end|>"; break;
    case ChatFormat::kLlama3: text = "<|eot_id|>"; break;
    case ChatFormat::kGemma: text = "<end_of_turn>"; break;
    case ChatFormat::kHarmony: text = "<|return|>"; break;  // the final channel's end
    case ChatFormat::kGlm4: text = "<|user|>"; break;       // GLM ends a reply by starting the next turn
    case ChatFormat::kLlama2: return tok.eos_id() >= 0 ? tok.TokenText(tok.eos_id()) : "";
  }
  return tok.TokenId(text) >= 0 ? text : "";
}

bool HasThinkingSwitch(const Tokenizer& tok) {
  return tok.chat_template().find("enable_thinking") != std::string::npos;
}

absl::StatusOr<std::string> FormatChat(ChatFormat format, const Tokenizer& tok,
                                       const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                       bool thinking) {
  if (!thinking && format != ChatFormat::kChatMl) {
    return InvalidArgument("chat: turning reasoning off needs the chatml format (Qwen3's), not ",
                           ChatFormatName(format));
  }
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return InvalidArgument("chat: unknown role '", m.role, "' (system, user or assistant)");
    }
  }
  std::string out;
  switch (format) {
    case ChatFormat::kChatMl:
      for (const ChatMessage& m : messages) out += Cat("<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      if (add_generation_prompt && !thinking) out += "<think>\n\n</think>\n\n";
      return out;
    case ChatFormat::kLlama3:
      out = SpecialText(tok, tok.bos_id(), "<|begin_of_text|>");
      for (const ChatMessage& m : messages) {
        out += Cat("<|start_header_id|>", m.role, "<|end_header_id|>\n\n", m.content, "<|eot_id|>");
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFormat::kHarmony:
      // The system message (identity, reasoning level, channels), the caller's system text as the
      // developer's instructions, then the turns; earlier replies as final-channel messages.
      out = Cat("<|start|>system<|message|>", kHarmonySystem, "<|end|>");
      for (const ChatMessage& m : messages) {
        if (m.role == "system") out += Cat("<|start|>developer<|message|># Instructions\n\n", m.content, "<|end|>");
      }
      for (const ChatMessage& m : messages) {
        if (m.role == "user") out += Cat("<|start|>user<|message|>", m.content, "<|end|>");
        if (m.role == "assistant") out += Cat("<|start|>assistant<|channel|>final<|message|>", m.content, "<|end|>");
      }
      if (add_generation_prompt) out += "<|start|>assistant";
      return out;
    case ChatFormat::kGlm4:
      // Earlier replies with an empty reasoning block, as the template writes them.
      out = "[gMASK]<sop>";
      for (const ChatMessage& m : messages) {
        if (m.role == "assistant") {
          out += Cat("<|assistant|>\n<think></think>\n", m.content);
        } else {
          out += Cat("<|", m.role, "|>\n", m.content);
        }
      }
      if (add_generation_prompt) out += "<|assistant|>";
      return out;
    case ChatFormat::kGemma:
    case ChatFormat::kLlama2:
      break;
  }
  std::vector<ChatMessage> turns;
  const bool gemma = format == ChatFormat::kGemma;
  RETURN_IF_ERROR(Alternate(messages, gemma ? "gemma" : "[INST]", &turns));
  if (add_generation_prompt && turns.size() % 2 == 0) {
    return InvalidArgument("chat: the last message must be the user's to prompt for a reply");
  }
  if (gemma) {
    // <bos><start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n...<end_of_turn>\n
    out = SpecialText(tok, tok.bos_id(), "<bos>");
    for (const ChatMessage& m : turns) {
      out += Cat("<start_of_turn>", m.role == "user" ? "user" : "model", "\n", m.content, "<end_of_turn>\n");
    }
    if (add_generation_prompt) out += "<start_of_turn>model\n";
    return out;
  }
  // Mixtral-Instruct: <s>[INST] user [/INST]answer</s>[INST] user2 [/INST].
  const std::string eos = SpecialText(tok, tok.eos_id(), "");
  out = SpecialText(tok, tok.bos_id(), "");
  for (const ChatMessage& m : turns) out += m.role == "user" ? Cat("[INST] ", m.content, " [/INST]") : Cat(m.content, eos);
  return out;
}

}  // namespace specgen
