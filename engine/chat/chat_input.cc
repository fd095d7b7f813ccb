#include "engine/chat/chat_input.h"

#include <poll.h>
#include <unistd.h>
#ifdef SPECGEN_WITH_LIBEDIT
#include <histedit.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdint>
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

#ifdef SPECGEN_WITH_LIBEDIT
namespace {

// libedit asks for one character at a time; they come from the ChatInput's buffer, so input already
// waiting (a paste) is still seen by InputWaiting. Returns 1, 0 at end of input, -1 on Ctrl-C.
int EditorGetChar(EditLine* el, wchar_t* out) {
  void* data = nullptr;
  el_get(el, EL_CLIENTDATA, &data);
  return static_cast<ChatInput*>(data)->NextChar(out);
}

char* EditorPrompt(EditLine* el) {
  void* data = nullptr;
  el_get(el, EL_CLIENTDATA, &data);
  return const_cast<char*>(static_cast<ChatInput*>(data)->prompt());
}

}  // namespace
#endif

ChatInput::ChatInput(int fd, bool interactive) : fd_(fd), interactive_(interactive) {
  if (interactive_) {
    // The terminal is told through whichever output is on it (stderr may be piped).
    paste_mode_fd_ = isatty(STDERR_FILENO) ? STDERR_FILENO : isatty(STDOUT_FILENO) ? STDOUT_FILENO : -1;
    if (paste_mode_fd_ >= 0) (void)!write(paste_mode_fd_, "\x1b[?2004h", 8);
  }
#ifdef SPECGEN_WITH_LIBEDIT
  // Line editing and history (arrow keys, Ctrl-R) where a person types at a terminal.
  if (interactive_ && fd_ == STDIN_FILENO && isatty(fd_) && paste_mode_fd_ >= 0) {
    FILE* out = paste_mode_fd_ == STDERR_FILENO ? stderr : stdout;
    EditLine* el = el_init("specgen", stdin, out, stderr);
    if (el != nullptr) {
      History* h = history_init();
      HistEvent ev;
      history(h, &ev, H_SETSIZE, 1000);
      history(h, &ev, H_SETUNIQUE, 1);
      el_set(el, EL_CLIENTDATA, this);
      el_set(el, EL_EDITOR, "emacs");
      el_set(el, EL_PROMPT, &EditorPrompt);
      el_set(el, EL_GETCFN, &EditorGetChar);
      el_set(el, EL_HIST, history, h);
      editor_ = el;
      history_ = h;
    }
  }
#endif
}

ChatInput::~ChatInput() {
#ifdef SPECGEN_WITH_LIBEDIT
  if (editor_ != nullptr) el_end(static_cast<EditLine*>(editor_));
  if (history_ != nullptr) history_end(static_cast<History*>(history_));
#endif
  if (paste_mode_fd_ >= 0) (void)!write(paste_mode_fd_, "\x1b[?2004l", 8);
}

void ChatInput::Remember(const std::string& entry) {
#ifdef SPECGEN_WITH_LIBEDIT
  if (history_ != nullptr && !entry.empty()) {
    HistEvent ev;
    history(static_cast<History*>(history_), &ev, H_ENTER, entry.c_str());
  }
#else
  (void)entry;
#endif
}

ChatInput::LineResult ChatInput::Fill() {
  char chunk[4096];
  const ssize_t n = read(fd_, chunk, sizeof(chunk));
  if (n > 0) {
    const size_t from = buffer_.size();
    buffer_.append(chunk, static_cast<size_t>(n));
    if (interactive_) {
      // Bracketed-paste markers never reach a line (nor the line editor): they set pasting_.
      while (true) {
        const size_t start = buffer_.find(kPasteStart, from > 5 ? from - 5 : 0);
        const size_t end = buffer_.find(kPasteEnd, from > 5 ? from - 5 : 0);
        if (start == std::string::npos && end == std::string::npos) break;
        if (start < end) {
          buffer_.erase(start, kPasteStart.size());
          pasting_ = true;
          paste_seen_ = true;
        } else {
          buffer_.erase(end, kPasteEnd.size());
          pasting_ = false;
        }
      }
    }
    return LineResult::kLine;
  }
  if (n == 0) {
    eof_ = true;
    return LineResult::kEof;
  }
  if (errno == EINTR) {
    if (InterruptRequested()) {
      buffer_.clear();
      return LineResult::kInterrupted;
    }
    return LineResult::kLine;  // another signal: read again
  }
  eof_ = true;  // a read error ends the input like EOF
  return LineResult::kEof;
}

int ChatInput::NextChar(wchar_t* out) {
  // One UTF-8 sequence from the buffer, decoded (libedit works in wide characters).
  auto byte_at = [&](size_t i) -> int {
    while (buffer_.size() <= i) {
      if (eof_) return -2;
      const LineResult r = Fill();
      if (r == LineResult::kInterrupted) return -1;
    }
    return static_cast<unsigned char>(buffer_[i]);
  };
  const int lead = byte_at(0);
  if (lead == -1) {
    interrupted_ = true;
    return -1;
  }
  if (lead == -2) return 0;
  const int extra = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  uint32_t cp = extra == 0 ? static_cast<uint32_t>(lead) : static_cast<uint32_t>(lead & (0x3F >> extra));
  for (int i = 1; i <= extra; ++i) {
    const int b = byte_at(static_cast<size_t>(i));
    if (b == -1) {
      interrupted_ = true;
      return -1;
    }
    if (b == -2) break;
    cp = (cp << 6) | static_cast<uint32_t>(b & 0x3F);
  }
  buffer_.erase(0, std::min(buffer_.size(), static_cast<size_t>(extra + 1)));
  *out = static_cast<wchar_t>(cp);
  return 1;
}

ChatInput::LineResult ChatInput::ReadTurnLine(std::string* line, bool* pasted) {
  const LineResult r = ReadLine(line);
  if (paste_seen_) {
    *pasted = true;
    paste_seen_ = false;
  }
  return r;
}

ChatInput::LineResult ChatInput::ReadLine(std::string* line) {
#ifdef SPECGEN_WITH_LIBEDIT
  if (editor_ != nullptr) {
    interrupted_ = false;
    int count = 0;
    const char* got = el_gets(static_cast<EditLine*>(editor_), &count);
    if (got == nullptr || count <= 0) {
      if (interrupted_) {
        buffer_.clear();
        return LineResult::kInterrupted;
      }
      return LineResult::kEof;
    }
    *line = std::string(got, static_cast<size_t>(count));
    while (!line->empty() && (line->back() == '\n' || line->back() == '\r')) line->pop_back();
    return LineResult::kLine;
  }
#endif
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
    const LineResult r = Fill();
    if (r == LineResult::kInterrupted) return r;
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
    prompt_ = text;
    if (interactive_ && editor_ == nullptr) {  // the line editor draws its own prompt
      std::fputs(text, stderr);
      std::fflush(stderr);
    }
  };
  auto interrupted = [] { return InputEvent{InputEvent::Kind::kInterrupted, "", ""}; };
  while (true) {
    prompt("> ");
    std::string line;
    bool pasted = false;  // a pasted text is a turn even when it starts with '/'
    LineResult r = ReadTurnLine(&line, &pasted);
    if (r == LineResult::kEof) return InputEvent{};
    if (r == LineResult::kInterrupted) return interrupted();

    if (!pasted && line.size() > 1 && line[0] == '/' && line[1] != '/') {
      const size_t space = line.find_first_of(" \t");
      InputEvent e;
      e.text = line.substr(1, space == std::string::npos ? std::string::npos : space - 1);
      e.arg = space == std::string::npos ? "" : Trim(line.substr(space));
      e.kind = InputEvent::Kind::kUnknownCommand;
      Remember(line);
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
    Remember(text);
    return InputEvent{InputEvent::Kind::kTurn, std::move(text), ""};
  }
}

}  // namespace specgen::chat
