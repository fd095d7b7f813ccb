// `specgen perplexity`: how well a model predicts a text (perplexity over context windows, llama.cpp's
// convention), and, against a reference run of another file of the same model saved with
// --save-logits, how far its next-token distributions are from the reference's (KL divergence) and
// how often both rank the same token first. The model loads as `specgen generate` loads it.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend/make_backend.h"
#include "engine/cli/command.h"
#include "engine/cli/generation_flags.h"
#include "engine/core/status_macros.h"
#include "engine/eval/log_prob_file.h"
#include "engine/eval/log_probs.h"
#include "engine/eval/perplexity.h"
#include "engine/io/model_loader.h"
#include "engine/io/safe_write.h"
#include "engine/model/cached_prefix.h"

namespace specgen::cli {
namespace {

constexpr int64_t kDefaultContext = 512;

struct PerplexityFlags {
  std::string model;
  std::string file;
  int64_t context = kDefaultContext;
  std::string kl_base;
  std::string save_logits;
  std::string llama_kl_base;  // --kl-divergence-base: saved to, or with --kl-divergence read from
  bool llama_kl = false;      // --kl-divergence
  std::string device = "auto";
  std::string vram_budget;
  std::string gemv_order = "auto";
  int threads = 0;
  bool no_check_tensors = false;
};

absl::StatusOr<std::string> ReadText(const std::string& path) {
  // A directory opens as an empty stream: named for what it is, as generate -f does.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidArgument("-f ", path, ": is a directory; -f takes a file of text to score");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("-f ", path, ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) return InvalidArgument("-f ", path, ": the file is empty; perplexity needs a text");
  return ss.str();
}

// The reference must be the same text, tokenized the same way, cut into the same windows, over the
// same vocabulary: anything else compares different positions.
absl::Status CheckBase(const std::string& path, const LogProbHeader& base, int64_t vocab,
                       const std::vector<int32_t>& tokens, const WindowPlan& plan) {
  if (base.vocab_size != vocab) {
    return InvalidArgument("--kl-base ", path, ": saved with a vocabulary of ", base.vocab_size,
                           " tokens, but this model has ", vocab, "; compare files of the same model");
  }
  if (base.tokens.size() != tokens.size()) {
    return InvalidArgument("--kl-base ", path, ": saved from a text of ", base.tokens.size(),
                           " tokens, but this text gives ", tokens.size(), "; run both on the same -f text");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (base.tokens[i] != tokens[i]) {
      return InvalidArgument("--kl-base ", path, ": token ", i, " differs (", base.tokens[i], " there, ",
                             tokens[i], " here): run both on the same -f text with the same tokenizer");
    }
  }
  if (base.window != plan.window) {
    return InvalidArgument("--kl-base ", path, ": saved with windows of ", base.window,
                           " tokens, this run has ", plan.window, "; give -c ", base.window);
  }
  if (base.n_positions != static_cast<uint64_t>(plan.scored())) {
    return DataLoss("--kl-base ", path, ": holds ", base.n_positions, " positions, expected ", plan.scored());
  }
  return absl::OkStatus();
}

absl::Status RunPerplexity(PerplexityFlags f) {
  if (!f.llama_kl_base.empty()) {
    std::string& into = f.llama_kl ? f.kl_base : f.save_logits;
    if (!into.empty() && into != f.llama_kl_base) {
      return InvalidArgument("--kl-divergence-base ", f.llama_kl_base, " and ", f.llama_kl ? "--kl-base " : "--save-logits ",
                             into, ": give the file once");
    }
    into = f.llama_kl_base;
  } else if (f.llama_kl) {
    return InvalidArgument("--kl-divergence needs --kl-divergence-base FILE (or use --kl-base FILE)");
  }
  if (f.context < 2) return InvalidArgument("-c must be at least 2, got ", f.context);
  ASSIGN_OR_RETURN(const std::string text, ReadText(f.file));

  // Files first, so a bad path fails before the model loads.
  std::unique_ptr<LogProbFileReader> base;
  if (!f.kl_base.empty()) {
    ASSIGN_OR_RETURN(base, LogProbFileReader::Open(f.kl_base));
  }
  SafeWriteOptions output;
  output.inputs = {f.model, f.file};
  if (!f.kl_base.empty()) output.inputs.push_back(f.kl_base);
  output.label = Cat("--save-logits ", f.save_logits);
  if (!f.save_logits.empty()) RETURN_IF_ERROR(CheckOutputPath(f.save_logits, output));

  GenerationFlags g;
  g.model = f.model;
  g.device = f.device;
  g.vram_budget = f.vram_budget;
  g.gemv_order = f.gemv_order;
  g.threads = f.threads;
  g.no_check_tensors = f.no_check_tensors;
  ASSIGN_OR_RETURN(const ModelSpec spec, LoadModelSpec(f.model));
  g.context = std::min<int64_t>(f.context, spec.context_length);
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedPair> pair, LoadPair(g));
  if (pair->target_tok == nullptr) {
    return InvalidArgument("-m ", f.model, ": the model has no tokenizer, and perplexity reads text");
  }
  const Tokenizer& tok = *pair->target_tok;
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens, tok.Encode(text, {.add_special = true, .parse_special = false}));
  absl::StatusOr<WindowPlan> plan_or = PlanWindows(static_cast<int64_t>(tokens.size()), g.context);
  if (!plan_or.ok()) return InvalidArgument("-f ", f.file, ": ", plan_or.status().message());
  const WindowPlan plan = *plan_or;
  const int32_t bos = tok.add_bos() && tok.bos_id() >= 0 ? tok.bos_id() : -1;
  CausalLm& lm = *pair->target;
  const int64_t vocab = lm.vocab_size();
  if (base != nullptr) RETURN_IF_ERROR(CheckBase(f.kl_base, base->header(), vocab, tokens, plan));

  std::optional<LogProbFileWriter> save;
  if (!f.save_logits.empty()) {
    LogProbHeader header;
    header.vocab_size = static_cast<uint32_t>(vocab);
    header.window = static_cast<uint32_t>(plan.window);
    header.n_positions = static_cast<uint64_t>(plan.scored());
    header.tokens = tokens;
    ASSIGN_OR_RETURN(save, LogProbFileWriter::Create(f.save_logits, header, output));
  }

  std::fprintf(stderr,
               "perplexity: %s on %s: %zu tokens, %lld window%s of %lld, scoring positions %lld..%lld of "
               "each (%lld tokens)\n",
               f.model.c_str(), std::string(pair->backend->name()).c_str(), tokens.size(),
               static_cast<long long>(plan.n_windows), plan.n_windows == 1 ? "" : "s",
               static_cast<long long>(plan.window), static_cast<long long>(plan.first),
               static_cast<long long>(plan.window - 2), static_cast<long long>(plan.scored()));
  if (static_cast<int64_t>(tokens.size()) < f.context) {
    std::fprintf(stderr, "perplexity: the text is shorter than -c %lld: one window of all %zu tokens\n",
                 static_cast<long long>(f.context), tokens.size());
  }

  PerplexityStats ppl, base_ppl, log_ratio;
  KlStats kl;
  LogProbRecord mine, theirs;
  int64_t last_window = -1;
  RETURN_IF_ERROR(ScoreWindows(lm, tokens, plan, bos, static_cast<int64_t>(kPrefillChunk),
                               [&](const ScoredPosition& p) -> absl::Status {
    if (p.window != last_window && last_window >= 0) {
      std::fprintf(stderr, "[%lld]%.4f,", static_cast<long long>(last_window + 1), ppl.perplexity());
    }
    last_window = p.window;
    const double nll = NegLogLikelihood(p.logits, p.next);
    ppl.Add(nll);
    if (save || base) {
      mine.nll = static_cast<float>(nll);
      mine.top = ArgMax(p.logits);
      EncodeLogProbs(p.logits, &mine.log_probs);
    }
    if (save) RETURN_IF_ERROR(save->Append(mine));
    if (base) {
      RETURN_IF_ERROR(base->Next(&theirs));
      base_ppl.Add(theirs.nll);
      log_ratio.Add(nll - theirs.nll);
      kl.Add(KlDivergence(theirs.log_probs, mine.log_probs), theirs.top == mine.top);
    }
    return absl::OkStatus();
  }));
  std::fprintf(stderr, "[%lld]%.4f\n", static_cast<long long>(plan.n_windows), ppl.perplexity());
  if (save) RETURN_IF_ERROR(save->Commit());

  std::printf("Final estimate: PPL = %.4f +/- %.5f  (%lld tokens scored)\n", ppl.perplexity(),
              ppl.perplexity_error(), static_cast<long long>(ppl.count()));
  if (save) std::printf("saved the log-probs of every scored position to %s\n", f.save_logits.c_str());
  if (base) {
    std::printf("\nagainst %s\n", f.kl_base.c_str());
    std::printf("Mean PPL(Q)                   : %10.6f +/- %10.6f\n", ppl.perplexity(), ppl.perplexity_error());
    std::printf("Mean PPL(base)                : %10.6f +/- %10.6f\n", base_ppl.perplexity(),
                base_ppl.perplexity_error());
    std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f +/- %10.6f\n", log_ratio.mean_nll(),
                log_ratio.mean_nll_error());
    std::printf("Mean    KLD: %10.6f +/- %10.6f\n", kl.mean(), kl.mean_error());
    std::printf("Maximum KLD: %10.6f\n", kl.max());
    std::printf("99.0%%   KLD: %10.6f\n", kl.Quantile(0.99));
    std::printf("Median  KLD: %10.6f\n", kl.Quantile(0.5));
    std::printf("Same top p: %7.3f +/- %6.3f %%\n", 100.0 * kl.same_top(), 100.0 * kl.same_top_error());
  }
  return absl::OkStatus();
}

Registrar kPerplexity{{"perplexity",
                       "Perplexity of a model over a text; KL divergence against a saved reference run",
                       [](CLI::App& app) {
  auto f = std::make_shared<PerplexityFlags>();
  app.footer(
      "The text's tokens are cut into non-overlapping windows of -c tokens (a text shorter than -c is one "
      "window), each run from an empty cache with its first token replaced by BOS where the tokenizer "
      "adds one, and only the second half of each window is scored (positions c/2 .. c-2 predicting the "
      "next token), as llama.cpp's perplexity tool does; a trailing partial window is not scored. "
      "PPL = exp(mean negative log-likelihood), +/- its standard error. With --kl-base, each scored "
      "position's distribution is compared with the reference run's: KL(base || this) (mean, median, "
      "99th percentile, maximum) over log-probabilities within 16 nats of the top one, stored with 16 "
      "bits (docs/formats.md §9), and how often both runs rank the same token first.");
  app.add_option("-m,--model", f->model, "GGUF file or Hugging Face directory (with its tokenizer)")->required();
  app.add_option("-f,--file", f->file, "the text to score")->required();
  app.add_option("-c,--ctx-size", f->context, "tokens a window (capped at the model's context)")
      ->capture_default_str();
  app.add_option("--save-logits", f->save_logits,
                 "save this run's log-probs at every scored position as a reference for --kl-base");
  app.add_option("--kl-base", f->kl_base,
                 "compare with a reference saved by --save-logits from another file of the same model, "
                 "on the same text and -c");
  app.add_option("--kl-divergence-base", f->llama_kl_base,
                 "llama.cpp's spelling: alone, as --save-logits; with --kl-divergence, as --kl-base");
  app.add_flag("--kl-divergence", f->llama_kl, "llama.cpp's spelling: compare with --kl-divergence-base");
  app.add_option("--device", f->device,
                 CudaCompiledIn() ? "auto|cpu|cuda: auto runs on the GPU when one is present"
                                  : "auto|cpu|cuda (this build has no CUDA: auto runs on the CPU)")
      ->capture_default_str();
  app.add_option("--vram-budget", f->vram_budget, "GPU memory to reserve, e.g. 8GiB (see specgen generate --help)");
  app.add_option("--gemv-order", f->gemv_order, "auto|fma|tensor (see specgen generate --help)")
      ->capture_default_str();
  app.add_option("-t,--threads", f->threads, "CPU threads (default: all)");
  AddNoCheckTensorsFlag(app, &f->no_check_tensors);
  return [f]() { return RunPerplexity(*f); };
}}};

}  // namespace
}  // namespace specgen::cli
