// ChatInput: turns, multi-line input (backslash, """ blocks, pastes on a terminal), /commands and
// Ctrl-C, read from a pipe the test writes.
#include "engine/chat/chat_input.h"

#include <signal.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "engine/chat/interrupt.h"
#include "gtest/gtest.h"

namespace specgen::chat {
namespace {

using Kind = InputEvent::Kind;

// A pipe holding `text`, then closed for writing (end of input).
class Pipe {
 public:
  explicit Pipe(const std::string& text, bool close_write = true) {
    EXPECT_EQ(pipe(fds_), 0);
    Write(text);
    if (close_write) CloseWrite();
  }
  ~Pipe() {
    CloseWrite();
    close(fds_[0]);
  }
  void Write(const std::string& text) { EXPECT_EQ(write(fds_[1], text.data(), text.size()), ssize_t(text.size())); }
  void CloseWrite() {
    if (fds_[1] >= 0) close(fds_[1]);
    fds_[1] = -1;
  }
  int read_fd() const { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
};

TEST(ChatInputTest, PipedLinesAreTurnsEach) {
  Pipe p("hello\n\n  \nsecond line\r\nlast without newline");
  ChatInput in(p.read_fd(), /*interactive=*/false);
  for (const char* want : {"hello", "second line", "last without newline"}) {
    const InputEvent e = in.Next();
    EXPECT_EQ(e.kind, Kind::kTurn);
    EXPECT_EQ(e.text, want);
  }
  EXPECT_EQ(in.Next().kind, Kind::kEnd);
  EXPECT_EQ(in.Next().kind, Kind::kEnd);
}

TEST(ChatInputTest, BackslashAndTripleQuotesMakeOneTurn) {
  Pipe p("def f(x):\\\n    return x\nnext\n\"\"\"\nclass A:\n\n    pass\n\"\"\"\nafter\n");
  ChatInput in(p.read_fd(), false);
  EXPECT_EQ(in.Next().text, "def f(x):\n    return x");
  EXPECT_EQ(in.Next().text, "next");
  EXPECT_EQ(in.Next().text, "class A:\n\n    pass");
  EXPECT_EQ(in.Next().text, "after");
  EXPECT_EQ(in.Next().kind, Kind::kEnd);
}

TEST(ChatInputTest, APasteOnATerminalIsOneTurn) {
  // Interactive: lines already waiting belong to the same turn; a later line is the next turn.
  Pipe p("line one\nline two\nline three\n", /*close_write=*/false);
  ChatInput in(p.read_fd(), /*interactive=*/true);
  EXPECT_EQ(in.Next().text, "line one\nline two\nline three");
  std::thread later([&] {
    usleep(100 * 1000);
    p.Write("typed later\n");
    p.CloseWrite();
  });
  EXPECT_EQ(in.Next().text, "typed later");
  later.join();
  EXPECT_EQ(in.Next().kind, Kind::kEnd);
}

// A bracketed paste whose last line has no newline: the terminal holds that line until Enter, 100 ms
// later here (far past the 15 ms a paste's lines are waited for). Paste and Enter are one turn, the
// Enter no empty turn after it; a paste that starts with '/' or """ is text, not a command or block.
TEST(ChatInputTest, ABracketedPasteThenEnterIsOneTurn) {
  Pipe p("\x1b[200~def f(x):\n", /*close_write=*/false);
  ChatInput in(p.read_fd(), /*interactive=*/true);
  std::thread later([&] {
    usleep(100 * 1000);
    p.Write("    return x\x1b[201~\n");
    usleep(100 * 1000);
    p.Write("\x1b[200~/reset is a word\x1b[201~\n");
    usleep(100 * 1000);
    p.Write("next\n");
    p.CloseWrite();
  });
  InputEvent e = in.Next();
  EXPECT_EQ(e.kind, Kind::kTurn);
  EXPECT_EQ(e.text, "def f(x):\n    return x");
  e = in.Next();
  EXPECT_EQ(e.kind, Kind::kTurn);
  EXPECT_EQ(e.text, "/reset is a word");
  EXPECT_EQ(in.Next().text, "next");
  later.join();
  EXPECT_EQ(in.Next().kind, Kind::kEnd);
}

TEST(ChatInputTest, CommandsKnownAndUnknown) {
  Pipe p("/reset\n/stats  now \n/quit\n/exit\n/help\n/frobnicate 3\n//not a command\n/\n");
  ChatInput in(p.read_fd(), false);
  for (const char* name : {"reset", "stats", "quit", "exit", "help"}) {
    const InputEvent e = in.Next();
    EXPECT_EQ(e.kind, Kind::kCommand) << name;
    EXPECT_EQ(e.text, name);
    if (std::string(name) == "stats") {
      EXPECT_EQ(e.arg, "now");
    }
  }
  const InputEvent unknown = in.Next();
  EXPECT_EQ(unknown.kind, Kind::kUnknownCommand);
  EXPECT_EQ(unknown.text, "frobnicate");
  EXPECT_EQ(unknown.arg, "3");
  const InputEvent literal = in.Next();
  EXPECT_EQ(literal.kind, Kind::kTurn);
  EXPECT_EQ(literal.text, "/not a command");
  EXPECT_EQ(in.Next().text, "/");  // a lone slash is text
}

TEST(ChatInputTest, CtrlCWhileReadingDropsThePartialInput) {
  InstallInterruptHandler();
  ClearInterrupt();
  Pipe p("\"\"\"\npartial block\n", /*close_write=*/false);
  ChatInput in(p.read_fd(), false);
  const pthread_t reader = pthread_self();
  std::thread interrupter([&] {
    usleep(100 * 1000);
    pthread_kill(reader, SIGINT);
  });
  EXPECT_EQ(in.Next().kind, Kind::kInterrupted);
  interrupter.join();
  EXPECT_TRUE(InterruptRequested());
  ClearInterrupt();
  p.Write("fresh\n");
  p.CloseWrite();
  EXPECT_EQ(in.Next().text, "fresh");
}

}  // namespace
}  // namespace specgen::chat
