// `specgen chat`: a conversation through the model's chat template, plain or speculative, on the GPU
// or the CPU (--device), with generate's model, draft and sampling flags. Input (engine/chat/
// chat_input.h): a turn per line from a pipe; on a terminal a paste is one turn, a trailing backslash
// continues a line and """ opens a block. /help, /reset, /stats, /quit and /exit are specgen's; other
// /commands are refused, not sent to the model. Replies stream to stdout as they are accepted
// (coloured by where each token came from, --color), each followed by a blank line when piped;
// everything else (prompts, the per-reply summary, /stats, notices) goes to stderr. The target's KV
// cache is kept across turns for the conversation's common prefix. Ctrl-C stops the current answer
// and keeps the session; a conversation that outgrows the context drops its oldest exchanges and
// keeps the system prompt.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/chat/chat_history.h"
#include "engine/chat/chat_input.h"
#include "engine/chat/interrupt.h"
#include "engine/chat/think_spans.h"
#include "engine/chat/token_painter.h"
#include "engine/cli/command.h"
#include "engine/cli/generation_flags.h"
#include "engine/core/status_macros.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/streaming_detokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace specgen::cli {
namespace {

struct ChatFlags {
  GenerationFlags common;
  std::string system;
  std::string chat_template = "auto";
  std::string color = "auto";
  std::string reasoning = "on";  // off: Qwen3's enable_thinking=false
  std::string think = "auto";    // --think: how reasoning spans show (ThinkDisplayFor)
};

// --think auto dims reasoning where colour can set it apart and hides it elsewhere (a pipe, --color
// never), where it would read as part of the answer; with --reasoning off any span the model still
// writes is hidden, as it was asked for none.
chat::ThinkDisplay ThinkDisplayFor(const ChatFlags& flags, bool color) {
  if (flags.reasoning == "off" || flags.think == "hide") return chat::ThinkDisplay::kHide;
  if (flags.think == "show") return chat::ThinkDisplay::kShow;
  if (flags.think == "dim") return chat::ThinkDisplay::kDim;
  return color ? chat::ThinkDisplay::kDim : chat::ThinkDisplay::kHide;
}

// Counters summed over the replies since the start or the last /reset.
struct ChatTotals {
  int64_t turns = 0, prompt_tokens_fed = 0;
  SpeculativeStats sum;  // the replies' stats (SpeculativeStats::operator+=)

  void Add(const SpeculativeStats& s, int64_t fed) {
    ++turns;
    prompt_tokens_fed += fed;
    sum += s;
  }
  std::string ToText() const {
    const int64_t tokens = sum.tokens, passes = sum.passes, drafted = sum.drafted, accepted = sum.accepted;
    const double seconds = sum.total_seconds, prefill_seconds = sum.prefill_seconds;
    return absl::StrFormat(
        "%d repl%s, %d tokens in %d target passes (%.2f tokens per pass), %d of %d drafted tokens "
        "accepted (%.1f%%), %.1f tokens/s; %d prompt tokens prefilled in %.3f s\n",
        turns, turns == 1 ? "y" : "ies", tokens, passes, passes ? static_cast<double>(tokens) / passes : 0.0, accepted, drafted,
        drafted ? 100.0 * static_cast<double>(accepted) / drafted : 0.0,
        seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0, prompt_tokens_fed, prefill_seconds);
  }
};

void PrintHelp() {
  std::string text = "commands:\n";
  for (const chat::ChatCommand& c : chat::ChatCommands()) {
    text += absl::StrFormat("  /%-6s %s\n", std::string(c.name), std::string(c.help));
  }
  text +=
      "several lines: end a line with \\ to continue it, or put \"\"\" on a line before and after; "
      "a paste is one turn.\n"
      "Ctrl-C stops an answer (the session goes on); Ctrl-D leaves. Start a turn with // to send a "
      "text that begins with /.\n";
  std::fputs(text.c_str(), stderr);
}

class ChatSession {
 public:
  ChatSession(const ChatFlags& flags, LoadedPair* pair, ChatFormat format, bool color)
      : flags_(flags), pair_(pair), tok_(*pair->target_tok), format_(format), color_(color),
        history_(flags.system) {}

  absl::Status Start() {
    SpeculativeOptions options = pair_->options;
    options.keep_cache = true;
    options.on_pass = [this](int, const AcceptResult& result) {
      if (painter_) painter_->OnPass(result);
    };
    options.stop = [] { return chat::InterruptRequested(); };  // Ctrl-C ends the answer, not the chat
    ASSIGN_OR_RETURN(loop_, MakeLoop(*pair_, options));
    return absl::OkStatus();
  }

  void Reset() {
    history_.Reset();
    totals_ = ChatTotals();
    last_stats_.reset();
  }

  void PrintStats() const {
    std::string text = Cat("conversation: ", totals_.ToText());
    if (last_stats_) text = Cat("last reply:\n", last_stats_->ToText(), text);
    std::fputs(text.c_str(), stderr);
  }

  // Answers one user turn. A turn that cannot run (the message alone does not fit the context) is
  // an error for the caller to report; the conversation stays as it was.
  absl::Status Turn(const std::string& user) {
    // Text the tokenizer cannot read is named as such here, not mistaken below for a message too
    // long for the context (every fit test would fail to encode it).
    if (absl::Status utf8 = unicode::ValidateUtf8(user); !utf8.ok()) {
      return InvalidArgument("this message is not valid UTF-8 (", utf8.message(),
                             "); the terminal or the piped input may not be UTF-8");
    }
    history_.Add("user", user);
    absl::Status status = Reply();
    if (!status.ok()) history_.PopLast();
    return status;
  }

 private:
  absl::StatusOr<std::vector<int32_t>> Encode(const std::vector<ChatMessage>& messages) const {
    ASSIGN_OR_RETURN(std::string text, FormatChat(format_, tok_, messages, true, flags_.reasoning == "on"));
    return tok_.Encode(text, EncodeOptions{.add_special = false, .parse_special = true});
  }

  absl::Status Reply() {
    // Room for a reply: -n tokens, but at most a quarter of the context, so that a long -n does not
    // push every earlier exchange out.
    const int64_t context = pair_->target->max_context();
    const int64_t reserve = std::max<int64_t>(1, std::min(flags_.common.n_predict, context / 4));
    auto fits = [&](const std::vector<ChatMessage>& m) -> absl::StatusOr<bool> {
      ASSIGN_OR_RETURN(std::vector<int32_t> ids, Encode(m));
      return static_cast<int64_t>(ids.size()) + reserve <= context;
    };
    auto dropped = history_.DropOldestUntil(fits);
    // Only a message that cannot fit is reported as one; an encoding failure says what it is.
    if (!dropped.ok() && dropped.status().code() != absl::StatusCode::kResourceExhausted) {
      return dropped.status();
    }
    if (!dropped.ok()) {
      return InvalidArgument("this message fills the context of ", context,
                             " tokens (-c) even alone with the system prompt and room for a reply: "
                             "shorten it, or run with a larger -c");
    }
    if (*dropped > 0) {
      std::fprintf(stderr, "(context full: dropped the oldest %d exchange%s; the system prompt stays)\n",
                   *dropped, *dropped == 1 ? "" : "s");
    }
    ASSIGN_OR_RETURN(std::vector<int32_t> prompt, Encode(history_.messages()));

    StreamingDetokenizer detok(tok_);
    chat::TokenPainter painter(color_);
    const chat::ThinkDisplay display = ThinkDisplayFor(flags_, color_);
    // kDim: reasoning spans are painted dim; kHide: they are not printed.
    chat::ThinkSplitter think(display == chat::ThinkDisplay::kHide);
    painter_ = &painter;
    absl::Status sink_status = absl::OkStatus();
    bool noted = false;
    auto sink = [&](std::span<const int32_t> tokens) {
      for (int32_t t : tokens) {
        auto piece = detok.Add(t);
        if (!piece.ok()) {
          sink_status.Update(piece.status());
          continue;
        }
        if (display == chat::ThinkDisplay::kShow) {
          std::fputs(painter.Paint(*piece).c_str(), stdout);
          continue;
        }
        const bool draft = painter.NextIsDraft();
        for (const chat::ThinkSegment& part : think.Add(*piece)) {
          std::fputs(painter.Colour(part.text, draft, part.reasoning).c_str(), stdout);
        }
        if (display == chat::ThinkDisplay::kHide && think.inside() && !noted && isatty(STDERR_FILENO)) {
          std::fputs("(reasoning...)\n", stderr);  // on a terminal, the wait has a reason
          noted = true;
        }
      }
      std::fflush(stdout);
    };
    auto generated = loop_->Generate(prompt, sink);
    painter_ = nullptr;
    RETURN_IF_ERROR(generated.status());
    std::vector<int32_t> reply = *std::move(generated);
    std::string tail = detok.Finish();
    if (display != chat::ThinkDisplay::kShow) {
      std::vector<chat::ThinkSegment> parts = think.Add(tail);
      for (chat::ThinkSegment& part : think.Finish()) parts.push_back(std::move(part));
      tail.clear();
      // The held-back end is the last token's text.
      for (const chat::ThinkSegment& part : parts) tail += painter.Colour(part.text, false, part.reasoning);
    }
    std::fputs(tail.c_str(), stdout);
    std::fputs(isatty(STDOUT_FILENO) ? "\n" : "\n\n", stdout);  // piped: a blank line between replies
    std::fflush(stdout);
    const StopReason stop_reason = loop_->stats().stop_reason;
    if (stop_reason == StopReason::kStopped) {
      chat::ClearInterrupt();
      std::fputs("(stopped)\n", stderr);
    } else if (stop_reason == StopReason::kContextFull) {
      std::fputs("(the context is full: the answer was cut here; the next turn drops the oldest "
                 "exchanges)\n", stderr);
    }
    RETURN_IF_ERROR(sink_status);

    const auto& end_ids = pair_->options.end_ids;
    if (!reply.empty() && std::find(end_ids.begin(), end_ids.end(), reply.back()) != end_ids.end()) {
      reply.pop_back();  // the template writes the end-of-turn token itself
    }
    ASSIGN_OR_RETURN(std::string content, tok_.Decode(reply, DecodeOptions{.render_special = false}));
    history_.Add("assistant", chat::WithoutThinking(content));  // as Qwen3's template keeps earlier turns

    const SpeculativeStats& stats = loop_->stats();
    // Prompt tokens the loop had to prefill: those past what the cache already held (the last prompt
    // token goes with the first step).
    const int64_t fed = stats.prompt_tokens_prefilled;
    totals_.Add(stats, fed);
    last_stats_ = std::make_unique<SpeculativeStats>(stats);
    if (flags_.common.stats == "json") {
      std::printf("%s\n", StatsJson(flags_.common, *pair_, stats).c_str());
      std::fflush(stdout);
    } else if (flags_.common.stats == "text") {
      PrintSummary(stats, fed, painter);
    }
    return absl::OkStatus();
  }

  // One line after each answer: speed, acceptance, tokens per pass, what streamed (when anything did),
  // and what the prompt cost.
  void PrintSummary(const SpeculativeStats& s, int64_t fed, const chat::TokenPainter& painter) const {
    std::string line = absl::StrFormat("[%d tokens, %.1f tokens/s", s.tokens, s.tokens_per_second());
    if (s.drafted > 0) {
      line += absl::StrFormat(", %.0f%% of drafted tokens accepted, %.2f tokens per pass (%d from the draft, "
                              "%d from the target)",
                              100 * s.acceptance_rate(), s.mean_accepted_length(), painter.draft_tokens(),
                              painter.target_tokens());
    }
    if (s.offload.streamed()) {
      line += absl::StrFormat(", %.1f MiB/token streamed, %.0f%% expert cache hits",
                              s.h2d_bytes_per_token() / 1048576.0, 100 * s.offload.hit_rate());
    }
    line += absl::StrFormat(", %d prompt tokens prefilled]", fed);
    if (color_) line = "\x1b[2m" + line + "\x1b[0m";
    std::fprintf(stderr, "%s\n", line.c_str());
  }

  const ChatFlags& flags_;
  LoadedPair* pair_;
  const Tokenizer& tok_;
  ChatFormat format_;
  bool color_;
  chat::ChatHistory history_;
  std::unique_ptr<SpeculativeLoop> loop_;
  chat::TokenPainter* painter_ = nullptr;  // the current reply's, while it is generated
  ChatTotals totals_;
  std::unique_ptr<SpeculativeStats> last_stats_;
};

absl::StatusOr<bool> UseColor(const std::string& color) {
  if (color == "always" || color == "on") return true;
  if (color == "never" || color == "off") return false;
  if (color != "auto") {
    return InvalidArgument("--color must be auto, always or never (on and off say the same), got '", color, "'");
  }
  const char* term = std::getenv("TERM");
  return isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr &&
         !(term != nullptr && std::string(term) == "dumb");
}

absl::Status RunChat(const ChatFlags& flags) {
  ASSIGN_OR_RETURN(const bool color, UseColor(flags.color));
  std::optional<ChatFormat> named;
  if (flags.chat_template != "auto") {
    ASSIGN_OR_RETURN(named, ParseChatFormat(flags.chat_template));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedPair> pair, LoadPair(flags.common));
  if (pair->target_tok == nullptr) {
    return InvalidArgument("-m ", flags.common.model, ": no tokenizer found; chat needs text");
  }
  ChatFormat format;
  if (named) {
    format = *named;
  } else {
    ASSIGN_OR_RETURN(format, DetectChatFormat(*pair->target_tok));
  }
  if (flags.reasoning == "off" && (format != ChatFormat::kChatMl || !HasThinkingSwitch(*pair->target_tok))) {
    return InvalidArgument("--reasoning off: the chat template of ", flags.common.model,
                           " has no thinking switch (Qwen3's enable_thinking); drop the flag");
  }
  // The format's end-of-turn token ends a reply even where the model's own list lacks it.
  const std::string end_of_turn = EndOfTurnText(format, *pair->target_tok);
  if (!flags.common.ignore_eos && !end_of_turn.empty()) {
    const int32_t id = pair->target_tok->TokenId(end_of_turn);
    auto& end_ids = pair->options.end_ids;
    if (std::find(end_ids.begin(), end_ids.end(), id) == end_ids.end()) end_ids.push_back(id);
  }

  const bool interactive = isatty(STDIN_FILENO);
  ChatSession session(flags, pair.get(), format, color);
  RETURN_IF_ERROR(session.Start());
  chat::InstallInterruptHandler();
  if (interactive) {
    std::fprintf(stderr, "chat with %s%s%s (%s template). /help lists the commands; Ctrl-C stops an answer, "
                 "Ctrl-D leaves.\n",
                 flags.common.model.c_str(), pair->draft ? ", draft " : "",
                 pair->draft ? flags.common.draft.c_str() : "", std::string(ChatFormatName(format)).c_str());
    if (color && pair->draft) {
      std::fprintf(stderr, "colours: %sdraft tokens the target accepted%s, %stokens the target supplied%s\n",
                   std::string(chat::kDraftColor).c_str(), std::string(chat::kResetColor).c_str(),
                   std::string(chat::kTargetColor).c_str(), std::string(chat::kResetColor).c_str());
    }
  }
  chat::ChatInput input(STDIN_FILENO, interactive);
  absl::Status last_turn = absl::OkStatus();
  while (true) {
    const chat::InputEvent event = input.Next();
    using Kind = chat::InputEvent::Kind;
    if (event.kind == Kind::kEnd) break;
    if (event.kind == Kind::kInterrupted) {
      chat::ClearInterrupt();
      std::fputs("\n(input dropped; /quit or Ctrl-D leaves)\n", stderr);
      continue;
    }
    if (event.kind == Kind::kUnknownCommand) {
      std::fprintf(stderr, "unknown command /%s (not sent to the model); /help lists the commands, and // "
                   "starts a turn with a '/'\n", event.text.c_str());
      continue;
    }
    if (event.kind == Kind::kCommand) {
      if (event.text == "quit" || event.text == "exit") break;
      if (event.text == "help") PrintHelp();
      if (event.text == "stats") session.PrintStats();
      if (event.text == "reset") {
        session.Reset();
        std::fputs("(conversation reset)\n", stderr);
      }
      continue;
    }
    last_turn = session.Turn(event.text);
    if (!last_turn.ok()) {
      std::fprintf(stderr, "specgen chat: error: %s\n", std::string(last_turn.message()).c_str());
    }
  }
  if (interactive) std::fputs("\n", stderr);
  // A script that pipes turns in learns from the exit status whether the last one was answered.
  if (!last_turn.ok()) return absl::Status(last_turn.code(), "the last turn failed (the error is above)");
  return absl::OkStatus();
}

Registrar kChat{
    {"chat", "Chat with a model through its chat template, plain or speculative, on the GPU or the CPU",
     [](CLI::App& app) {
       auto f = std::make_shared<ChatFlags>();
       f->common.n_predict = 256;
       AddGenerationFlags(app, &f->common);
       app.add_option("--system", f->system, "system prompt, the first message of the conversation");
       app.add_option("--chat-template", f->chat_template,
                      "auto|chatml|llama3|mistral|gemma|harmony|glm4: the prompt format; auto reads it from the "
                      "model's template")
           ->capture_default_str();
       app.add_option("--reasoning", f->reasoning,
                      "on|off: let a Qwen3 model reason in a <think> span before it answers (shown as "
                      "--think says, left out of the history), or answer at once (the template's "
                      "enable_thinking=false; any <think> span is then hidden)")
           ->check(CLI::IsMember({"on", "off"}))
           ->capture_default_str();
       app.add_option("--think", f->think,
                      "auto|dim|hide|show: how a reply's <think>...</think> reasoning is printed. auto: dim "
                      "when the reply is coloured (--color), hidden when it is not (a pipe, --color "
                      "never), where it would read as the answer")
           ->check(CLI::IsMember({"auto", "dim", "hide", "show"}))
           ->capture_default_str();
       app.add_option("--color", f->color,
                      "auto|always|never (or on|off): colour the reply by where each token came from "
                      "(draft or target); auto: when stdout is a terminal and NO_COLOR is unset")
           ->capture_default_str();
       app.footer(
           "A turn per line from a pipe; on a terminal a paste is one turn, a line ending in \\ "
           "continues, and \"\"\" on a line opens and closes a block. /help, /reset, /stats, /quit, "
           "/exit. -n limits each reply. Replies go to stdout; the one-line summary after each reply "
           "(--stats text, the default), /stats and notices go to stderr; --stats json prints one JSON "
           "line per reply on stdout.");
       return [f]() { return RunChat(*f); };
     }}};

}  // namespace
}  // namespace specgen::cli
