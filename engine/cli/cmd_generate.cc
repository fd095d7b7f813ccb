// `specgen generate`: text generation on the CPU reference engine, plain or speculative. Tokens are
// printed as they are accepted; stats (tokens/s, acceptance, τ, time split) follow at the end.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/cli/command.h"
#include "engine/cli/id_list.h"
#include "engine/cli/generation_flags.h"
#include "engine/cli/token_probs.h"
#include "engine/core/status_macros.h"
#include "engine/speculative/speculative_loop.h"
#include "engine/io/model_loader.h"
#include "engine/tokenizer/stop_strings.h"
#include "engine/tokenizer/streaming_detokenizer.h"

namespace specgen::cli {
namespace {

// generate's own flags: where the prompt comes from and how tokens are printed.
struct GenerateFlags {
  GenerationFlags common;
  std::string prompt, prompt_file, prompt_ids;
  std::vector<std::string> stop;  // --stop / -r / --reverse-prompt
  bool print_ids = false;
  int n_probs = 0;  // --n-probs: per emitted token, the N most probable tokens and their log-probs
};

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidArgument("-f ", path, ": is a directory; -f takes a file of prompt text");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("-f ", path, ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status RunGenerate(const GenerateFlags& flags) {
  RETURN_IF_ERROR(ValidateGenerationFlags(flags.common));
  if (flags.n_probs < 0) return InvalidArgument("--n-probs must be >= 0, got ", flags.n_probs);
  if (flags.n_probs > 0 && flags.common.stats == "none") {
    return InvalidArgument("--n-probs ", flags.n_probs, " prints with the stats: give --stats json (the "
                           "completion_probabilities key) or --stats text (lines on stderr), not --stats none");
  }
  const int prompt_sources =
      !flags.prompt.empty() + !flags.prompt_file.empty() + !flags.prompt_ids.empty();
  if (prompt_sources == 0) {
    return InvalidArgument("no prompt: give -p TEXT, -f FILE or --prompt-ids IDS",
                           " (an empty -p counts as none)");
  }
  if (prompt_sources > 1) {
    return InvalidArgument("give one prompt only: -p, -f or --prompt-ids, not ", prompt_sources);
  }
  std::string text = flags.prompt;
  if (!flags.prompt_file.empty()) {
    ASSIGN_OR_RETURN(text, ReadTextFile(flags.prompt_file));
  }
  std::vector<int32_t> prompt;
  if (!flags.prompt_ids.empty()) {
    ASSIGN_OR_RETURN(prompt, ParseIdList("--prompt-ids", flags.prompt_ids));
  }

  // Synth presets have no tokenizer; say so before generating gigabytes of random weights.
  if (prompt.empty() && SourceKind(flags.common.model) == ModelSourceKind::kSynth) {
    return InvalidArgument("-m ", flags.common.model, ": synthetic models have no tokenizer, so ",
                           flags.prompt_file.empty() ? "-p TEXT" : "-f FILE",
                           " cannot be turned into tokens; give token ids with --prompt-ids 1,2,3");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedPair> pair, LoadPair(flags.common));
  const Tokenizer* target_tok = pair->target_tok.get();
  if (prompt.empty()) {
    if (target_tok == nullptr) {
      return InvalidArgument("-m ", flags.common.model, ": no tokenizer found; use --prompt-ids");
    }
    ASSIGN_OR_RETURN(prompt, target_tok->Encode(text));
    if (prompt.empty()) return InvalidArgument("the prompt encodes to no tokens");
  }
  // Checked here too (the decoder would say the same) so that nothing is printed before the error.
  if (static_cast<int64_t>(prompt.size()) >= pair->target->max_context()) {
    return InvalidArgument("the prompt has ", prompt.size(), " tokens, leaving no room in the context of ",
                           pair->target->max_context(), " (-c)");
  }

  const bool text_out = target_tok != nullptr && !flags.print_ids;
  StopStrings stops(flags.stop);
  if (!stops.empty() && !text_out) {
    return InvalidArgument("--stop matches text, and this run prints ",
                           flags.print_ids ? "token ids (--print-ids)" : "token ids (the model has no tokenizer)");
  }
  std::unique_ptr<StreamingDetokenizer> detok;
  if (text_out) detok = std::make_unique<StreamingDetokenizer>(*target_tok);
  absl::Status sink_status = absl::OkStatus();
  bool first_id = true;
  auto sink = [&](std::span<const int32_t> tokens) {
    for (int32_t t : tokens) {
      if (text_out) {
        auto piece = detok->Add(t);
        if (!piece.ok()) {
          sink_status.Update(piece.status());
          continue;
        }
        std::fputs(stops.Add(*piece).c_str(), stdout);
      } else {
        std::printf(first_id ? "%d" : " %d", t);
        first_id = false;
      }
    }
    std::fflush(stdout);
  };
  if (text_out) {
    // Echo the prompt so the continuation reads in place.
    ASSIGN_OR_RETURN(std::string prompt_text, target_tok->Decode(prompt));
    std::fputs(prompt_text.c_str(), stdout);
  }

  SpeculativeOptions options = pair->options;
  // A stop string ends generation before the next step; tokens of the step that completed it are not
  // printed past it.
  if (!stops.empty()) options.stop = [&stops] { return stops.stopped(); };
  std::vector<TokenLogprobs> probs;
  if (flags.n_probs > 0) {
    options.n_probs = flags.n_probs;
    options.on_logprobs = [&probs](std::span<const TokenLogprobs> step) {
      probs.insert(probs.end(), step.begin(), step.end());
    };
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SpeculativeLoop> decoder, MakeLoop(*pair, options));
  ASSIGN_OR_RETURN(std::vector<int32_t> generated, decoder->Generate(prompt, sink));
  if (text_out) {
    std::string tail = stops.Add(detok->Finish());
    std::fputs((tail + stops.Finish()).c_str(), stdout);
  }
  std::fputs("\n", stdout);
  RETURN_IF_ERROR(sink_status);
  if (flags.n_probs > 0 && flags.common.stats == "json") {
    std::printf("%s\n", WithProbs(StatsJson(flags.common, *pair, decoder->stats()), probs, target_tok).c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  }
  PrintStats(flags.common, *pair, decoder->stats());
  if (flags.n_probs > 0) {
    std::fprintf(stderr, "log-probabilities of the target (natural log; token | the %d most probable):\n%s",
                 flags.n_probs, ProbsText(probs, target_tok).c_str());
  }
  return absl::OkStatus();
}

Registrar kGenerate{
    {"generate", "Generate text, plain or with speculative decoding, on the GPU or the CPU",
     [](CLI::App& app) {
       auto f = std::make_shared<GenerateFlags>();
       AddGenerationFlags(app, &f->common);
       app.add_option("-p,--prompt", f->prompt, "prompt text (needs the model's tokenizer)");
       app.add_option("-f,--file", f->prompt_file, "read the prompt text from this file");
       app.add_option("--prompt-ids", f->prompt_ids, "prompt as comma-separated token ids");
       app.add_flag("--print-ids", f->print_ids, "print token ids instead of text");
       app.add_option("--n-probs", f->n_probs,
                      "for every generated token, its log-probability and the N most probable tokens "
                      "at its position: the target's own (softmax of its logits, before temperature "
                      "and top-k/p), the same with or without a draft. In --stats json as "
                      "completion_probabilities (llama.cpp's n_probs), with --stats text on stderr")
           ->type_name("N");
       app.add_option("--stop,-r,--reverse-prompt", f->stop,
                      "stop when the output contains TEXT, printing nothing of it; repeat for several "
                      "(llama.cpp's -r / --reverse-prompt)")
           ->type_name("TEXT")
           ->expected(1)
           ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
       return [f]() { return RunGenerate(*f); };
     }}};

}  // namespace
}  // namespace specgen::cli
