// `specgen generate`: text generation on the CPU reference engine, plain or speculative. Tokens are
// printed as they are accepted; stats (tokens/s, acceptance, τ, time split) follow at the end.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "draft/model_proposer.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/cli/command.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "engine/sampling/acceptance.h"
#include "engine/sampling/distribution.h"
#include "engine/speculative/speculative_decoder.h"
#include "engine/tokenizer/compatibility.h"
#include "engine/tokenizer/streaming_detokenizer.h"
#include "engine/tokenizer/tokenizer_loader.h"

namespace specgen::cli {
namespace {

struct GenerateFlags {
  std::string model, draft;
  std::string prompt, prompt_file, prompt_ids;
  int64_t n_predict = 128;
  int draft_max = 4;
  bool draft_adaptive = false;
  std::string accept = "rejection";
  SamplingParams sampling;
  int64_t context = 0;
  std::string device = "auto";
  std::string stats = "text";
  bool allow_vocab_mismatch = false;
  bool ignore_eos = false;
  bool print_ids = false;
  int threads = 0;
};

absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(piece, &id)) {
      return InvalidArgument("--prompt-ids: '", AsStd(piece), "' is not a token id");
    }
    ids.push_back(id);
  }
  if (ids.empty()) return InvalidArgument("--prompt-ids: no token ids");
  return ids;
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("-f ", path, ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::unique_ptr<Transformer>> LoadLm(const std::string& path, Backend* backend,
                                                    int64_t context) {
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> loaded, LoadModel(path));
  std::shared_ptr<const LoadedModel> model = std::move(loaded);
  TransformerOptions options;
  options.max_context = context;
  return Transformer::Create(model, backend, options);
}

// The pair must speak one vocabulary: with both tokenizers, CheckCompatible decides; without them
// (synth presets, GGUF without tokenizer) the vocabulary sizes must match.
absl::Status CheckPair(const GenerateFlags& flags, const Tokenizer* target_tok,
                       const Tokenizer* draft_tok, const CausalLm& target, const CausalLm& draft) {
  absl::Status status = absl::OkStatus();
  if (target_tok != nullptr && draft_tok != nullptr) {
    status = CheckCompatible(*target_tok, *draft_tok);
  } else if (target.vocab_size() != draft.vocab_size()) {
    status = absl::FailedPreconditionError(Cat("vocabulary sizes differ: target ", target.vocab_size(),
                                               ", draft ", draft.vocab_size()));
  }
  if (status.ok()) return status;
  if (flags.allow_vocab_mismatch) {
    std::fprintf(stderr, "warning: draft %s and target %s: %s (allowed by --allow-vocab-mismatch)\n",
                 flags.draft.c_str(), flags.model.c_str(), std::string(status.message()).c_str());
    return absl::OkStatus();
  }
  return InvalidArgument("-md ", flags.draft, " cannot draft for -m ", flags.model, ": ",
                         status.message(), " (--allow-vocab-mismatch overrides)");
}

absl::Status RunGenerate(const GenerateFlags& flags) {
  if (flags.device != "auto" && flags.device != "cpu") {
    return InvalidArgument("--device ", flags.device, ": this build runs on the CPU only (auto|cpu)");
  }
  if (flags.stats != "text" && flags.stats != "json" && flags.stats != "none") {
    return InvalidArgument("--stats must be text, json or none, got '", flags.stats, "'");
  }
  if (flags.n_predict < 0) return InvalidArgument("-n must be >= 0, got ", flags.n_predict);
  if (flags.draft_max < 0) return InvalidArgument("--draft-max must be >= 0, got ", flags.draft_max);
  const int prompt_sources =
      !flags.prompt.empty() + !flags.prompt_file.empty() + !flags.prompt_ids.empty();
  if (prompt_sources != 1) return InvalidArgument("give exactly one of -p, -f, --prompt-ids");
  RETURN_IF_ERROR(Validate(flags.sampling));
  ASSIGN_OR_RETURN(const AcceptMode mode, ParseAcceptMode(flags.accept));

  // Tokenizers are optional (synth presets have none); text needs the target's.
  std::unique_ptr<Tokenizer> target_tok, draft_tok;
  if (auto t = LoadTokenizerForModel(flags.model); t.ok()) target_tok = std::move(*t);
  if (!flags.draft.empty()) {
    if (auto t = LoadTokenizerForModel(flags.draft); t.ok()) draft_tok = std::move(*t);
  }
  std::vector<int32_t> prompt;
  if (!flags.prompt_ids.empty()) {
    ASSIGN_OR_RETURN(prompt, ParseIdList(flags.prompt_ids));
  } else {
    if (target_tok == nullptr) {
      return InvalidArgument("-m ", flags.model, ": no tokenizer found; use --prompt-ids");
    }
    std::string text = flags.prompt;
    if (!flags.prompt_file.empty()) {
      ASSIGN_OR_RETURN(text, ReadTextFile(flags.prompt_file));
    }
    ASSIGN_OR_RETURN(prompt, target_tok->Encode(text));
    if (prompt.empty()) return InvalidArgument("the prompt encodes to no tokens");
  }

  CpuBackend backend(flags.threads);
  ASSIGN_OR_RETURN(std::unique_ptr<Transformer> target, LoadLm(flags.model, &backend, flags.context));
  std::unique_ptr<Transformer> draft;
  std::unique_ptr<ModelProposer> proposer;
  if (!flags.draft.empty() && flags.draft_max > 0) {
    ASSIGN_OR_RETURN(draft, LoadLm(flags.draft, &backend, target->max_context()));
    RETURN_IF_ERROR(CheckPair(flags, target_tok.get(), draft_tok.get(), *target, *draft));
    proposer = std::make_unique<ModelProposer>(draft.get(), target->vocab_size(), flags.sampling, mode);
  }

  SpeculativeOptions options;
  options.max_new_tokens = flags.n_predict;
  options.draft_max = flags.draft_max;
  options.adaptive = flags.draft_adaptive;
  options.accept = mode;
  options.sampling = flags.sampling;
  if (!flags.ignore_eos) {
    if (target_tok != nullptr) {
      options.end_ids = target_tok->eog_ids();
      if (target_tok->eos_id() >= 0) options.end_ids.push_back(target_tok->eos_id());
    } else if (target->spec().eos_token_id >= 0) {
      options.end_ids.push_back(static_cast<int32_t>(target->spec().eos_token_id));
    }
  }

  const bool text_out = target_tok != nullptr && !flags.print_ids;
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
        std::fputs(piece->c_str(), stdout);
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

  SpeculativeDecoder decoder(target.get(), proposer.get(), options);
  ASSIGN_OR_RETURN(std::vector<int32_t> generated, decoder.Generate(prompt, sink));
  if (text_out) std::fputs(detok->Finish().c_str(), stdout);
  std::fputs("\n", stdout);
  RETURN_IF_ERROR(sink_status);

  const SpeculativeStats& stats = decoder.stats();
  if (flags.stats == "json") {
    std::printf("%s\n", stats.ToJson().c_str());
  } else if (flags.stats == "text") {
    std::fprintf(stderr, "\n%s%s, %s%s\n%s", proposer ? "speculative, draft " : "plain decoding",
                 proposer ? flags.draft.c_str() : "",
                 proposer ? Cat("accept ", AcceptModeName(mode), ", ").c_str() : "",
                 ToString(flags.sampling).c_str(), stats.ToText().c_str());
  }
  return absl::OkStatus();
}

constexpr char kAcceptHelp[] =
    "acceptance rule, both exact (the output is distributed as the target's): rejection "
    "(Leviathan/Chen: accept draft x w.p. min(1, p(x)/q(x)), else resample from norm(max(0, p-q)); "
    "per-token acceptance 1 - TV(p, q), the most any rule can reach) or coupled (draft and target "
    "share Gumbel noise keyed by seed and position; accept iff the draft's token is the target's, so "
    "the output for a seed is identical with or without a draft, at an acceptance of at least "
    "(1 - TV)/(1 + TV)). Rejection therefore accepts more; measured on the bundled pair at T=0.8, "
    "k=4: see bench_speculative (acceptance_rate per mode). At --temp 0 both are the greedy rule";

Registrar kGenerate{
    {"generate", "Generate text, plain or with speculative decoding (CPU reference)",
     [](CLI::App& app) {
       auto f = std::make_shared<GenerateFlags>();
       app.add_option("-m,--model", f->model, "target MODEL: GGUF file, HF directory or synth:PRESET")
           ->required();
       app.add_option("--model-draft", f->draft,
                      "draft MODEL (also -md): proposes tokens the target verifies; same vocabulary");
       app.add_option("-p,--prompt", f->prompt, "prompt text (needs the model's tokenizer)");
       app.add_option("-f,--file", f->prompt_file, "read the prompt text from this file");
       app.add_option("--prompt-ids", f->prompt_ids, "prompt as comma-separated token ids");
       app.add_option("-n,--n-predict", f->n_predict, "tokens to generate (stops earlier at an end token)")
           ->capture_default_str();
       app.add_option("--draft-max", f->draft_max,
                      "draft length k per pass; with --draft-adaptive the largest k tried. 0 = plain "
                      "decoding")
           ->capture_default_str();
       app.add_flag("--draft-adaptive", f->draft_adaptive,
                    "choose k each pass from the measured acceptance (EWMA) and measured draft/verify "
                    "costs, maximizing expected tokens/s; k = 0 when speculation does not pay");
       app.add_option("--accept", f->accept, kAcceptHelp)->capture_default_str();
       app.add_option("--temp", f->sampling.temperature, "temperature; 0 = greedy (argmax)")
           ->capture_default_str();
       app.add_option("--top-k", f->sampling.top_k, "keep the k most probable tokens; 0 = off")
           ->capture_default_str();
       app.add_option("--top-p", f->sampling.top_p,
                      "keep the smallest most-probable set with mass >= P; 1 = off")
           ->capture_default_str();
       app.add_option("--min-p", f->sampling.min_p, "keep tokens with p >= P * max p; 0 = off")
           ->capture_default_str();
       app.add_option("--seed", f->sampling.seed,
                      "seed; every draw is keyed by (seed, position), so a seed reproduces the output")
           ->capture_default_str();
       app.add_option("-c,--ctx-size", f->context, "context length (default: min(model's, 4096))");
       app.add_option("--device", f->device, "auto|cpu (this build: cpu)")->capture_default_str();
       app.add_option("--stats", f->stats,
                      "text: summary on stderr; json: one JSON object on stdout after the output; "
                      "none")
           ->capture_default_str();
       app.add_flag("--allow-vocab-mismatch", f->allow_vocab_mismatch,
                    "run a draft whose tokenizer differs from the target's (a warning instead of an "
                    "error)");
       app.add_flag("--ignore-eos", f->ignore_eos, "do not stop at end-of-generation tokens");
       app.add_flag("--print-ids", f->print_ids, "print token ids instead of text");
       app.add_option("-t,--threads", f->threads, "CPU threads (default: all)");
       return [f]() { return RunGenerate(*f); };
     }}};

}  // namespace
}  // namespace specgen::cli
