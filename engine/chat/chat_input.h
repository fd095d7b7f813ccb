// The chat's input: turns and /commands read from a file descriptor (a terminal or a pipe).
//  - A line ending in a backslash continues on the next line (the backslash becomes a newline).
//  - A line that is exactly """ opens a block that runs to the next such line: several lines, one
//    turn.
//  - On a terminal, lines that arrive together (a paste) are one turn: after a line, input already
//    waiting is read into the same turn; and with the terminal's bracketed-paste mode (turned on here)
//    everything between its paste markers is, up to the Enter that follows, so a paste whose last line
//    waited for Enter is still one turn. From a pipe, each line is a turn.
//  - Built with libedit (Debian's libedit-dev), a terminal gets line editing and history: arrow
//    keys, Ctrl-A/E, Ctrl-R searching earlier turns.
//  - A line starting with one '/' is a command (/help, /reset, /stats, /quit, /exit); "//" starts a
//    turn with a literal '/'. Unknown commands come back as such, for the caller to refuse.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace specgen::chat {

struct ChatCommand {
  std::string_view name, help;
};
// The commands specgen handles itself, in /help's order.
const std::vector<ChatCommand>& ChatCommands();

struct InputEvent {
  enum class Kind { kTurn, kCommand, kUnknownCommand, kInterrupted, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // kTurn: the user's text; kCommand / kUnknownCommand: the name, without '/'
  std::string arg;   // what followed the command's name, trimmed
};

class ChatInput {
 public:
  // `fd` is read, not owned. `interactive`: a terminal (paste detection and prompts on stderr).
  ChatInput(int fd, bool interactive);
  ~ChatInput();  // turns the terminal's bracketed-paste mode off again
  ChatInput(const ChatInput&) = delete;
  ChatInput& operator=(const ChatInput&) = delete;

  // The next turn or command; kInterrupted when Ctrl-C (InterruptRequested) arrived while reading
  // (the partial input is dropped; the caller clears the flag); kEnd at end of input.
  InputEvent Next();

  // For the line editor (libedit, when built with it and stdin is a terminal): the next character
  // of input (1), end of input (0) or Ctrl-C (-1); and the prompt it draws.
  int NextChar(wchar_t* out);
  const char* prompt() const { return prompt_.c_str(); }

 private:
  enum class LineResult { kLine, kEof, kInterrupted };
  LineResult ReadLine(std::string* line);
  LineResult Fill();  // reads what is there into buffer_, removing bracketed-paste markers
  void Remember(const std::string& entry);  // the line editor's history
  // ReadLine, with bracketed-paste markers removed (setting pasting_ and *pasted).
  LineResult ReadTurnLine(std::string* line, bool* pasted);
  bool InputWaiting();  // buffered, or readable within a few milliseconds

  int fd_;
  bool interactive_;
  std::string buffer_;
  bool eof_ = false;
  bool pasting_ = false;     // inside a bracketed paste: its lines belong to the current turn
  bool paste_seen_ = false;  // a paste began since the last line was taken
  int paste_mode_fd_ = -1;   // the terminal told to bracket pastes, or -1
  std::string prompt_;
  void* editor_ = nullptr;   // EditLine*, with libedit on a terminal
  void* history_ = nullptr;  // History*
  bool interrupted_ = false;  // Ctrl-C while the line editor read
};

}  // namespace specgen::chat
