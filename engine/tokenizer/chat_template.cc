#include "engine/tokenizer/chat_template.h"

#include "engine/core/status_macros.h"

namespace specgen {

absl::StatusOr<ChatFormat> DetectChatFormat(const Tokenizer& tok) {
  const std::string& t = tok.chat_template();
  if (t.find("<|im_start|>") != std::string::npos) return ChatFormat::kChatMl;
  if (t.find("[INST]") != std::string::npos) return ChatFormat::kLlama2;
  if (t.empty()) {
    if (tok.TokenId("<|im_start|>") >= 0) return ChatFormat::kChatMl;
    if (tok.kind() == TokenizerKind::kSpm) return ChatFormat::kLlama2;
  }
  return Unimplemented("chat template: not ChatML (<|im_start|>) nor [INST]: ",
                       t.empty() ? std::string("(the model has none)") : t.substr(0, 80));
}

absl::StatusOr<std::string> FormatChat(ChatFormat format, const Tokenizer& tok,
                                       const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return InvalidArgument("chat: unknown role '", m.role, "' (system, user or assistant)");
    }
  }
  std::string out;
  if (format == ChatFormat::kChatMl) {
    for (const ChatMessage& m : messages) out += Cat("<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
  // Mixtral-Instruct: <s>[INST] user [/INST]answer</s>[INST] user2 [/INST]. There is no system role;
  // a system message is put in front of the first user message, as Mistral's newer templates do.
  const std::string bos = tok.bos_id() >= 0 ? tok.TokenText(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.TokenText(tok.eos_id()) : "";
  out += bos;
  std::string system;
  bool expect_user = true;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += m.content;
      continue;
    }
    if ((m.role == "user") != expect_user) {
      return InvalidArgument("chat: the [INST] format needs user and assistant messages to alternate, starting with user");
    }
    if (m.role == "user") {
      out += "[INST] ";
      if (!system.empty()) {
        out += Cat(system, "\n\n");
        system.clear();
      }
      out += Cat(m.content, " [/INST]");
    } else {
      out += Cat(m.content, eos);
    }
    expect_user = !expect_user;
  }
  if (add_generation_prompt && expect_user) {
    return InvalidArgument("chat: the last message must be the user's to prompt for a reply");
  }
  return out;
}

}  // namespace specgen
