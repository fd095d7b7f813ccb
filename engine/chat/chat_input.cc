#include "engine/chat/chat_input.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "engine/chat/interrupt.h"

namespace specgen::chat {
namespace {

// A paste's lines reach a terminal together; a person's next line comes far later than this.
constexpr int kPasteWaitMs = 15;

// Bracketed paste (xterm and every terminal since): with the mode on, the terminal wraps a paste in
// these markers. A paste whose last line has no newline waits in the terminal's line buffer until the
// user presses Enter, so without the markers its lines would become two turns.
constexpr std::string_view kPasteStart = "\x1b[200~";
constexpr std::string_view kPasteEnd = "\x1b[201~";

// Removes `marker` from `line`; true if it was there.
bool Strip(std::string* line, std::string_view marker) {
  const size_t at = line->find(marker);
  if (at == std::string::npos) return false;
  line->erase(at, marker.size());
  return true;
}

std::string Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

const std::vector<ChatCommand>& ChatCommands() {
  static const auto* commands = new std::vector<ChatCommand>{
      {"help", "list the commands and how to type several lines"},
      {"reset", "forget the conversation (the system prompt stays)"},
      {"stats", "counters of the last reply and of the conversation"},
      {"quit", "leave (so do /exit and Ctrl-D)"},
      {"exit", "leave"},
  };
  return *commands;
}

ChatInput::ChatInput(int fd, bool interactive) : fd_(fd), interactive_(interactive) {
  if (interactive_) {
    // The terminal is told through whichever output is on it (stderr may be piped).
    paste_mode_fd_ = isatty(STDERR_FILENO) ? STDERR_FILENO : isatty(STDOUT_FILENO) ? STDOUT_FILENO : -1;
    if (paste_mode_fd_ >= 0) (void)!write(paste_mode_fd_, "\x1b[?2004h", 8);
  }
}

ChatInput::~ChatInput() {
  if (paste_mode_fd_ >= 0) (void)!write(paste_mode_fd_, "\x1b[?2004l", 8);
}

ChatInput::LineResult ChatInput::ReadTurnLine(std::string* line, bool* pasted) {
  const LineResult r = ReadLine(line);
  if (r != LineResult::kLine || !interactive_) return r;
  if (Strip(line, kPasteStart)) {
    pasting_ = true;
    *pasted = true;
  }
  if (Strip(line, kPasteEnd)) pasting_ = false;
  return r;
}

ChatInput::LineResult ChatInput::ReadLine(std::string* line) {
  while (true) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos || (eof_ && !buffer_.empty())) {
      const size_t end = nl == std::string::npos ? buffer_.size() : nl;
      *line = buffer_.substr(0, end);
      buffer_.erase(0, nl == std::string::npos ? end : end + 1);
      if (!line->empty() && line->back() == '\r') line->pop_back();
      return LineResult::kLine;
    }
    if (eof_) return LineResult::kEof;
    char chunk[4096];
    const ssize_t n = read(fd_, chunk, sizeof(chunk));
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
    } else if (n == 0) {
      eof_ = true;
    } else if (errno == EINTR) {
      if (InterruptRequested()) {
        buffer_.clear();
        return LineResult::kInterrupted;
      }
    } else {
      eof_ = true;  // a read error ends the input like EOF
    }
  }
}

bool ChatInput::InputWaiting() {
  if (!buffer_.empty()) return true;
  if (eof_) return false;
  pollfd p{fd_, POLLIN, 0};
  return poll(&p, 1, kPasteWaitMs) > 0 && (p.revents & POLLIN);
}

InputEvent ChatInput::Next() {
  auto prompt = [&](const char* text) {
    if (interactive_) {
      std::fputs(text, stderr);
      std::fflush(stderr);
    }
  };
  auto interrupted = [] { return InputEvent{InputEvent::Kind::kInterrupted, "", ""}; };
  while (true) {
    prompt("> ");
    std::string line;
    bool pasted = false;  // a pasted text is a turn even when it starts with '/'
    pasting_ = false;
    LineResult r = ReadTurnLine(&line, &pasted);
    if (r == LineResult::kEof) return InputEvent{};
    if (r == LineResult::kInterrupted) return interrupted();

    if (!pasted && line.size() > 1 && line[0] == '/' && line[1] != '/') {
      const size_t space = line.find_first_of(" \t");
      InputEvent e;
      e.text = line.substr(1, space == std::string::npos ? std::string::npos : space - 1);
      e.arg = space == std::string::npos ? "" : Trim(line.substr(space));
      e.kind = InputEvent::Kind::kUnknownCommand;
      for (const ChatCommand& c : ChatCommands()) {
        if (c.name == e.text) e.kind = InputEvent::Kind::kCommand;
      }
      return e;
    }

    std::string text;
    if (!pasted && Trim(line) == "\"\"\"") {  // a block, to the closing """ (or the end of input)
      bool first = true;
      while (true) {
        prompt(".. ");
        r = ReadLine(&line);
        if (r == LineResult::kInterrupted) return interrupted();
        if (r == LineResult::kEof || Trim(line) == "\"\"\"") break;
        text += (first ? "" : "\n") + line;
        first = false;
      }
    } else {
      text = line;
      // Continuation lines, and on a terminal the rest of a paste.
      while (true) {
        const bool continued = !text.empty() && text.back() == '\\';
        if (continued) {
          text.back() = '\n';
          prompt(".. ");
        } else if (!pasting_ && !(interactive_ && InputWaiting())) {
          break;
        } else {
          text += '\n';
        }
        r = ReadTurnLine(&line, &pasted);
        if (r == LineResult::kInterrupted) return interrupted();
        if (r == LineResult::kEof) break;
        text += line;
      }
      if (text.rfind("//", 0) == 0) text.erase(0, 1);
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (Trim(text).empty()) continue;
    return InputEvent{InputEvent::Kind::kTurn, std::move(text), ""};
  }
}

}  // namespace specgen::chat
