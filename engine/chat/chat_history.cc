#include "engine/chat/chat_history.h"

#include "engine/core/status_macros.h"

namespace specgen::chat {

ChatHistory::ChatHistory(std::string system) : system_(std::move(system)) { Reset(); }

void ChatHistory::Reset() {
  messages_.clear();
  if (!system_.empty()) messages_.push_back({"system", system_});
}

void ChatHistory::Add(std::string role, std::string content) {
  messages_.push_back({std::move(role), std::move(content)});
}

void ChatHistory::PopLast() {
  if (!messages_.empty() && messages_.back().role != "system") messages_.pop_back();
}

int64_t ChatHistory::exchanges() const {
  int64_t n = 0;
  for (const ChatMessage& m : messages_) n += m.role == "user";
  return n;
}

absl::StatusOr<int> ChatHistory::DropOldestUntil(
    const std::function<absl::StatusOr<bool>(const std::vector<ChatMessage>&)>& fits) {
  const size_t first = system_.empty() ? 0 : 1;
  std::vector<ChatMessage> kept = messages_;
  int dropped = 0;
  while (true) {
    ASSIGN_OR_RETURN(const bool ok, fits(kept));
    if (ok) break;
    if (kept.size() <= first + 1) {
      return absl::ResourceExhaustedError(
          "the message does not fit the context even alone (with the system prompt and room for a "
          "reply): shorten it, or run with a larger -c");
    }
    // One exchange: the oldest user message and everything up to the next user message.
    size_t end = first + 1;
    while (end < kept.size() - 1 && kept[end].role != "user") ++end;
    kept.erase(kept.begin() + first, kept.begin() + end);
    ++dropped;
  }
  messages_ = std::move(kept);
  return dropped;
}

}  // namespace specgen::chat
