// The conversation a chat keeps: the system prompt, then user and assistant messages. When the next
// prompt would not fit the context, the oldest exchanges are dropped (never the system prompt, never
// the message being answered), as llama.cpp does when its context fills.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/chat_template.h"

namespace specgen::chat {

class ChatHistory {
 public:
  explicit ChatHistory(std::string system = "");

  void Reset();  // keeps the system prompt
  void Add(std::string role, std::string content);
  void PopLast();
  const std::vector<ChatMessage>& messages() const { return messages_; }
  int64_t exchanges() const;  // user messages held

  // Drops the oldest messages, an exchange (a user message and the reply to it) at a time, until
  // `fits(messages())` holds; returns how many exchanges went. When only the system prompt and the
  // last message are left and they still do not fit, an error says how to go on (the history is
  // then as it was).
  absl::StatusOr<int> DropOldestUntil(const std::function<absl::StatusOr<bool>(const std::vector<ChatMessage>&)>& fits);

 private:
  std::string system_;
  std::vector<ChatMessage> messages_;
};

}  // namespace specgen::chat
