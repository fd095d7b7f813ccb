// `specgen chat`: a conversation on the CPU reference engine with the model's chat template (ChatML
// or [INST]), plain or speculative, with the same model/draft/sampling flags as generate. User turns
// are read from stdin one line each (interactive or piped); replies stream as they are accepted and
// end at the template's end-of-turn token or -n. Each turn re-encodes the whole conversation and the
// target's KV cache is kept for its longest common prefix with the previous turn, so only the new
// tokens (the new user turn, plus any of the last reply whose re-encoding differs) are prefilled;
// the draft's proposer does the same for its cache. /reset starts over, /stats prints the
// counters, EOF (Ctrl-D) exits.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/cli/command.h"
#include "engine/cli/generation_flags.h"
#include "engine/core/status_macros.h"
#include "engine/speculative/speculative_decoder.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/streaming_detokenizer.h"

namespace specgen::cli {
namespace {

struct ChatFlags {
  GenerationFlags common;
  std::string system;
};

// Counters summed over the turns since the start or the last /reset.
struct ChatTotals {
  int64_t turns = 0, prompt_tokens_fed = 0, tokens = 0, passes = 0, drafted = 0, accepted = 0;
  double seconds = 0, prefill_seconds = 0;

  void Add(const SpeculativeStats& s, int64_t fed) {
    ++turns;
    prompt_tokens_fed += fed;
    tokens += s.tokens;
    passes += s.passes;
    drafted += s.drafted;
    accepted += s.accepted;
    seconds += s.total_seconds;
    prefill_seconds += s.prefill_seconds;
  }
  std::string ToText() const {
    return absl::StrFormat(
        "%d replies, %d tokens in %d target passes (%.2f per pass), %d of %d drafted tokens "
        "accepted (%.1f%%), %.1f tokens/s; %d prompt tokens prefilled in %.3f s\n",
        turns, tokens, passes, passes ? static_cast<double>(tokens) / passes : 0.0, accepted, drafted,
        drafted ? 100.0 * static_cast<double>(accepted) / drafted : 0.0,
        seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0, prompt_tokens_fed, prefill_seconds);
  }
};

class ChatSession {
 public:
  // `decoder` runs `pair`'s models; made with keep_cache so that each turn feeds only its new tokens
  // where the loop supports it (the CPU loop; the GPU loop prefills the conversation again each turn,
  // and the per-turn figure of prompt tokens fed says so).
  ChatSession(const ChatFlags& flags, LoadedPair* pair, ChatFormat format, std::unique_ptr<SpeculativeLoop> decoder)
      : flags_(flags), pair_(pair), tok_(*pair->target_tok), format_(format), decoder_(std::move(decoder)) {
    Reset();
  }

  void Reset() {
    messages_.clear();
    if (!flags_.system.empty()) messages_.push_back({"system", flags_.system});
    totals_ = ChatTotals();
    last_stats_.reset();
  }

  void PrintStats() const {
    std::string text = Cat("conversation: ", totals_.ToText());
    if (last_stats_) text = Cat("last reply:\n", last_stats_->ToText(), text);
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }

  // Replies to one user line. A turn that cannot run (the conversation no longer fits the context)
  // is an error for the caller to report; the conversation stays as it was.
  absl::Status Turn(const std::string& user) {
    messages_.push_back({"user", user});
    absl::Status status = Reply();
    if (!status.ok()) messages_.pop_back();
    return status;
  }

 private:
  absl::Status Reply() {
    ASSIGN_OR_RETURN(std::string text, FormatChat(format_, tok_, messages_, true));
    ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                     tok_.Encode(text, EncodeOptions{.add_special = false, .parse_special = true}));
    const int64_t room = pair_->target->max_context() - static_cast<int64_t>(prompt.size());
    if (room < 1) {
      return InvalidArgument("the conversation is ", prompt.size(),
                             " tokens and fills the context of ", pair_->target->max_context(),
                             " (-c); /reset starts over");
    }
    StreamingDetokenizer detok(tok_);
    absl::Status sink_status = absl::OkStatus();
    auto sink = [&](std::span<const int32_t> tokens) {
      for (int32_t t : tokens) {
        auto piece = detok.Add(t);
        if (!piece.ok()) {
          sink_status.Update(piece.status());
          continue;
        }
        std::fputs(piece->c_str(), stdout);
      }
      std::fflush(stdout);
    };
    ASSIGN_OR_RETURN(std::vector<int32_t> reply, decoder_->Generate(prompt, sink));
    std::fputs(detok.Finish().c_str(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    RETURN_IF_ERROR(sink_status);

    const auto& end_ids = pair_->options.end_ids;
    if (!reply.empty() && std::find(end_ids.begin(), end_ids.end(), reply.back()) != end_ids.end()) {
      reply.pop_back();  // the template writes the end-of-turn token itself
    }
    ASSIGN_OR_RETURN(std::string content, tok_.Decode(reply, DecodeOptions{.render_special = false}));
    messages_.push_back({"assistant", std::move(content)});

    const SpeculativeStats& stats = decoder_->stats();
    // Prompt tokens the decoder had to prefill: those past what the cache already held.
    const int64_t fed = decoder_->last_prefill_fed() + 1;  // the last prompt token goes with the first step
    last_prompt_ = prompt;
    last_prompt_.insert(last_prompt_.end(), reply.begin(), reply.end());
    totals_.Add(stats, fed);
    last_stats_ = std::make_unique<SpeculativeStats>(stats);
    if (flags_.common.stats == "json") {
      std::printf("%s\n", stats.ToJson().c_str());
    } else if (flags_.common.stats == "text") {
      std::fprintf(stderr, "[%lld prompt tokens, %lld new] %s",
                   static_cast<long long>(prompt.size()), static_cast<long long>(fed),
                   stats.ToText().c_str());
    }
    std::fflush(stdout);
    return absl::OkStatus();
  }

  const ChatFlags& flags_;
  LoadedPair* pair_;
  const Tokenizer& tok_;
  ChatFormat format_;
  std::unique_ptr<SpeculativeLoop> decoder_;
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> last_prompt_;  // the previous turn's prompt and reply
  ChatTotals totals_;
  std::unique_ptr<SpeculativeStats> last_stats_;
};

absl::Status RunChat(const ChatFlags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedPair> pair, LoadPair(flags.common));
  if (pair->target_tok == nullptr) {
    return InvalidArgument("-m ", flags.common.model, ": no tokenizer found; chat needs text");
  }
  ASSIGN_OR_RETURN(const ChatFormat format, DetectChatFormat(*pair->target_tok));
  const bool interactive = isatty(STDIN_FILENO);
  if (interactive) {
    std::fprintf(stderr, "chat with %s%s%s (%s template); /reset starts over, /stats, Ctrl-D quits\n",
                 flags.common.model.c_str(), pair->draft ? ", draft " : "",
                 pair->draft ? flags.common.draft.c_str() : "",
                 format == ChatFormat::kChatMl ? "ChatML" : "[INST]");
  }
  SpeculativeOptions options = pair->options;
  options.keep_cache = true;
  ASSIGN_OR_RETURN(std::unique_ptr<SpeculativeLoop> decoder, MakeLoop(*pair, options));
  ChatSession session(flags, pair.get(), format, std::move(decoder));
  std::string line;
  absl::Status last_turn = absl::OkStatus();
  while (true) {
    if (interactive) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line == "/reset") {
      session.Reset();
      std::fputs("(conversation reset)\n", stderr);
      continue;
    }
    if (line == "/stats") {
      session.PrintStats();
      continue;
    }
    last_turn = session.Turn(line);
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
       f->common.stats = "none";  // /stats prints them on demand
       f->common.n_predict = 256;
       AddGenerationFlags(app, &f->common);
       app.add_option("--system", f->system, "system prompt, the first message of the conversation");
       app.footer(
           "Reads one user turn per line from stdin (a pipe works too) and streams each reply to "
           "stdout. Commands: /reset forgets the conversation, /stats prints the counters; EOF "
           "exits. -n limits each reply; --stats json|text prints one line of stats per reply.");
       return [f]() { return RunChat(*f); };
     }}};

}  // namespace
}  // namespace specgen::cli
