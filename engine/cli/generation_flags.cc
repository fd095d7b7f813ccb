#include "engine/cli/generation_flags.h"

#include <cstdio>
#include <cstdlib>
#include <random>

#include "absl/strings/numbers.h"
#include "engine/cli/command.h"
#include "nlohmann/json.hpp"
#include "engine/backend/make_backend.h"
#include "engine/cli/load_report.h"
#include "engine/cli/resource_check.h"
#include "engine/core/byte_size.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "moe/host/host_path.h"
#include "moe/run_plan.h"
#include "engine/tokenizer/compatibility.h"
#include "engine/tokenizer/tokenizer_loader.h"
#include "engine/speculative/make_loop.h"

namespace specgen::cli {
namespace {

// A seed for --seed -1 from the OS's entropy; 63 bits, so it prints and parses back as itself.
uint64_t RandomSeed() {
  std::random_device rd;
  return ((uint64_t{rd()} << 32) ^ rd()) & ~(uint64_t{1} << 63);
}

// The pair must speak one vocabulary: with both tokenizers, CheckCompatible decides; without them
// (synth presets, GGUF without tokenizer) the vocabulary sizes must match.
absl::Status CheckPair(const GenerationFlags& flags, const Tokenizer* target_tok,
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

constexpr char kAcceptHelp[] =
    "acceptance rule, both exact (output distributed as the target's): rejection (accept draft x "
    "w.p. min(1, p(x)/q(x)); the highest acceptance) or coupled (shared Gumbel noise: a seed gives "
    "the same text with or without a draft, whatever the draft length). Both are greedy at --temp 0";

}  // namespace

void AddCacheTypeFlags(CLI::App& app, CacheTypeFlags* f) {
  app.add_option("--cache-type", f->both,
                 "f16|bf16|f32: the element type the KV caches of both models store their rows in (the "
                 "attention reads them in fp32); f32 is the fp32 reference, f16 holds half the bytes")
      ->capture_default_str();
  app.add_option("--cache-type-k", f->k, "as --cache-type (also -ctk); K and V take one type");
  app.add_option("--cache-type-v", f->v, "as --cache-type (also -ctv); K and V take one type");
}

absl::StatusOr<DType> ParseCacheType(const CacheTypeFlags& f) {
  const auto parse = [](std::string_view flag, std::string_view value) -> absl::StatusOr<DType> {
    if (value == "f16") return DType::kF16;
    if (value == "bf16") return DType::kBF16;
    if (value == "f32") return DType::kF32;
    return InvalidArgument(flag, " must be f16, bf16 or f32, got '", value, "'");
  };
  ASSIGN_OR_RETURN(const DType both, parse("--cache-type", f.both));
  std::optional<DType> k, v;
  if (!f.k.empty()) {
    ASSIGN_OR_RETURN(k, parse("--cache-type-k", f.k));
  }
  if (!f.v.empty()) {
    ASSIGN_OR_RETURN(v, parse("--cache-type-v", f.v));
  }
  if (k && v && *k != *v) {
    return InvalidArgument("--cache-type-k ", f.k, " and --cache-type-v ", f.v,
                           ": specgen stores K and V in one type; give them the same");
  }
  return k ? *k : v ? *v : both;
}

std::string BundledModelPath(std::string_view name) {
  // SPECGEN_MODELS_DIR overrides where the bundled pair lives (an installed copy); the default is the
  // source tree this binary was built from.
  const char* dir = std::getenv("SPECGEN_MODELS_DIR");
  return Cat(dir != nullptr && *dir != '\0' ? std::string(dir) : std::string(SPECGEN_SOURCE_DIR) + "/models", "/", name);
}

void AddGenerationFlags(CLI::App& app, GenerationFlags* f) {
  app.add_option("-m,--model", f->model,
                 "target MODEL: GGUF file, HF directory or synth:PRESET (default: the bundled pair, "
                 "models/tiny-target with models/tiny-draft)");
  app.add_option("--model-draft", f->draft,
                 "draft MODEL (also -md): proposes tokens the target verifies; same vocabulary");
  // No -m: the bundled pair, so that `specgen generate` and `specgen chat` work out of the box.
  app.parse_complete_callback([f]() {
    if (!f->model.empty()) return;
    f->model = BundledModelPath("tiny-target");
    if (f->draft.empty()) f->draft = BundledModelPath("tiny-draft");
  });
  app.add_option("-n,--n-predict", f->n_predict,
                 "tokens to generate (stops earlier at an end token); -1: until an end token or a full "
                 "context")
      ->capture_default_str();
  app.add_option("--draft-max", f->draft_max,
                 "the draft length k per pass, or the largest k the adaptive choice tries. 0 = plain "
                 "decoding")
      ->capture_default_str();
  app.add_flag("--draft-adaptive", f->draft_adaptive,
               "choose k in 0..--draft-max each pass for the most expected tokens/s, from the "
               "acceptance and step times seen so far. Default at --temp 0 and under --accept coupled, "
               "where the text does not depend on k; elsewhere --draft-fixed is");
  app.add_flag("--draft-fixed", f->draft_fixed,
               "draft --draft-max tokens every pass (the default under --accept rejection at --temp > "
               "0, where a seed then reproduces the text)");
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
  app.add_option_function<std::string>(
         "--seed",
         [f](const std::string& text) {
           uint64_t seed = 0;
           if (text == "-1") {
             f->sampling.seed = RandomSeed();
             f->random_seed = true;
           } else if (absl::SimpleAtoi(text, &seed)) {
             f->sampling.seed = seed;
             f->random_seed = false;
           } else {
             throw CLI::ValidationError(
                 "--seed", Cat("'", text, "' is not a seed: give an integer in [0, 2^64) or -1 for a "
                               "random one"));
           }
         },
         "seed; every draw is keyed by (seed, position), so a seed reproduces the output "
         "(under --accept rejection, at a fixed draft length: --draft-fixed, its default there); -1: "
         "random, printed with the stats (default 0)")
      ->type_name("INT");
  app.add_option("-c,--ctx-size", f->context, "context length (default: min(model's, 4096))");
  app.add_option("--device", f->device,
                 CudaCompiledIn() ? "auto|cpu|cuda: auto runs on the GPU when one is present; cpu is "
                                    "the fp32 reference"
                                  : "auto|cpu|cuda (this build has no CUDA: auto runs on the CPU)")
      ->capture_default_str();
  app.add_option("--vram-budget", f->vram_budget,
                 "GPU memory for weights, KV caches and workspaces, e.g. 8GiB or 512MiB, reserved at "
                 "start so a model that does not fit is a clear error (default: free VRAM minus 2 GiB; "
                 "the CUDA context and graphs come on top)");
  app.add_option("--gemv-order", f->gemv_order,
                 Cat("auto|fma|tensor: how GPU products of 1..16 tokens are summed: bf16 tensor cores "
                     "or CUDA-core FMAs (they differ in the last bits); auto = ",
                     kernels::GemvOrderName(kernels::kDefaultGemvOrder),
                     ". The CPU has one order (tensor is an error)"))
      ->capture_default_str();
  AddCacheTypeFlags(app, &f->cache_type);
  app.add_option("--stats", f->stats,
                 "text: summary on stderr; json: one JSON object on stdout after the output; none")
      ->capture_default_str();
  app.add_flag("--allow-vocab-mismatch", f->allow_vocab_mismatch,
               "run a draft whose tokenizer differs from the target's (a warning instead of an "
               "error)");
  app.add_flag("--ignore-eos", f->ignore_eos, "do not stop at end-of-generation tokens");
  app.add_option("-t,--threads", f->threads, "CPU threads (default: all)");
  app.add_option("--moe-host", f->moe_host,
                 "auto|off|only: where a streamed target's experts are computed: auto routes a pass on the host "
                 "and lets the host CPU take a share of its experts where `specgen plan --calibrate`'s calibration "
                 "predicts that faster than the VRAM cache (which such passes bypass), off fetches every missed "
                 "expert over the link, only computes every expert of passes up to 16 positions on the host "
                 "(default: auto with a calibration, else off)");
  app.add_option("--calibration", f->calibration,
                 "the calibration FILE --moe-host reads (default: $XDG_CACHE_HOME/specgen/calibration.json)");
  AddNoCheckTensorsFlag(app, &f->no_check_tensors);
}

absl::StatusOr<std::optional<kernels::GemvOrder>> ParseGemvOrder(std::string_view value) {
  if (value == "auto") return std::optional<kernels::GemvOrder>();
  for (const kernels::GemvOrder order : kernels::kGemvOrders) {
    if (value == kernels::GemvOrderName(order)) return std::optional<kernels::GemvOrder>(order);
  }
  return InvalidArgument("--gemv-order must be auto, fma or tensor, got '", value, "'");
}

void AddNoCheckTensorsFlag(CLI::App& app, bool* flag) {
  app.add_flag("--no-check-tensors", *flag,
               "skip the check, at load, that every weight (f32/f16/bf16 values, packed blocks' scales) "
               "is finite: faster start, and a corrupt file then gives NaN logits, stopped at run time");
}

bool UseAdaptiveDraftLength(const GenerationFlags& flags, AcceptMode mode) {
  if (flags.draft_adaptive || flags.draft_fixed) return flags.draft_adaptive;
  return flags.sampling.greedy() || mode == AcceptMode::kCoupled;
}

absl::Status ValidateGenerationFlags(const GenerationFlags& flags) {
  if (flags.device != "auto" && flags.device != "cpu" && flags.device != "cuda") {
    return InvalidArgument("--device must be auto, cpu or cuda, got '", flags.device, "'");
  }
  if (!flags.vram_budget.empty()) RETURN_IF_ERROR(ParseByteSize(flags.vram_budget).status());
  RETURN_IF_ERROR(ParseGemvOrder(flags.gemv_order).status());
  RETURN_IF_ERROR(ParseCacheType(flags.cache_type).status());
  if (!flags.moe_host.empty()) RETURN_IF_ERROR(moe_host::ParseHostMode(flags.moe_host).status());
  if (flags.stats != "text" && flags.stats != "json" && flags.stats != "none") {
    return InvalidArgument("--stats must be text, json or none, got '", flags.stats, "'");
  }
  if (flags.n_predict < -1) {
    return InvalidArgument("-n must be >= 0, or -1 for no limit but the context, got ", flags.n_predict);
  }
  if (flags.draft_max < 0) return InvalidArgument("--draft-max must be >= 0, got ", flags.draft_max);
  if (flags.context < 0) return InvalidArgument("-c must be >= 0, got ", flags.context);
  RETURN_IF_ERROR(CheckThreads(flags.threads, "-t").status());
  if (flags.draft_adaptive && flags.draft_fixed) {
    return InvalidArgument("--draft-adaptive and --draft-fixed: give one of them");
  }
  RETURN_IF_ERROR(Validate(flags.sampling));
  return ParseAcceptMode(flags.accept).status();
}

absl::StatusOr<std::unique_ptr<LoadedPair>> LoadPair(const GenerationFlags& flags) {
  RETURN_IF_ERROR(ValidateGenerationFlags(flags));
  auto pair = std::make_unique<LoadedPair>();
  ASSIGN_OR_RETURN(pair->mode, ParseAcceptMode(flags.accept));
  // Tokenizers are optional (synth presets have none; text needs the target's), but one that is
  // present and unreadable is reported, not silently replaced by ids.
  ASSIGN_OR_RETURN(pair->target_tok, LoadTokenizerIfPresent(flags.model));
  if (!flags.draft.empty()) {
    ASSIGN_OR_RETURN(pair->draft_tok, LoadTokenizerIfPresent(flags.draft));
  }

  // Sizes are checked before anything is allocated: threads, then the KV caches the context needs
  // (from the specs alone, which cost no weights), then the models are loaded.
  BackendOptions backend_options;
  ASSIGN_OR_RETURN(backend_options.cpu_threads, CheckThreads(flags.threads, "-t"));
  ASSIGN_OR_RETURN(backend_options.gemv_order, ParseGemvOrder(flags.gemv_order));
  if (!flags.vram_budget.empty()) {
    ASSIGN_OR_RETURN(backend_options.vram_bytes, ParseByteSize(flags.vram_budget));
  }
  ASSIGN_OR_RETURN(MadeBackend made, MakeDeviceBackend(flags.device, backend_options));
  pair->backend = std::move(made.backend);
  pair->cuda = made.cuda;
  if (!made.cuda && !flags.vram_budget.empty()) {
    // A user who asked for a budget and got the CPU would otherwise think it applied.
    std::fprintf(stderr, "note: --vram-budget %s is ignored: this run is on the CPU (%s), which holds every "
                 "weight in host RAM\n", flags.vram_budget.c_str(),
                 CudaCompiledIn() ? "--device cpu, or no GPU found" : "this build has no CUDA");
  }
  const size_t vram_budget = made.vram_budget;
  if (pair->cuda == nullptr && !flags.vram_budget.empty()) {
    std::fprintf(stderr, "note: --vram-budget %s is ignored: this run is on the CPU (--device %s%s), which has no "
                 "VRAM to budget\n", flags.vram_budget.c_str(), flags.device.c_str(),
                 flags.device == "auto" ? ": no CUDA device or build" : "");
  }
  const bool with_draft = !flags.draft.empty() && flags.draft_max > 0;
  ASSIGN_OR_RETURN(const ModelSpec target_spec, LoadModelSpec(flags.model));
  std::optional<ModelSpec> draft_spec;
  if (with_draft) {
    ASSIGN_OR_RETURN(draft_spec, LoadModelSpec(flags.draft));
  }
  ASSIGN_OR_RETURN(const DType kv_type, ParseCacheType(flags.cache_type));
  ASSIGN_OR_RETURN(const int64_t context,
                   CheckContext(flags.context, target_spec, draft_spec ? &*draft_spec : nullptr,
                                *pair->backend, kv_type));
  // On the GPU the planner decides, from headers alone, whether the target's experts fit beside
  // everything else or stream from host RAM into a cache of slots, and which dense layers stream
  // through a ring of layer buffers (docs/design.md §12).
  // The benchmark runner places its models through the same moe/apply_plan.h functions.
  moe::RunRequest request;
  request.target = flags.model;
  if (with_draft) request.draft = flags.draft;
  request.draft_max = flags.draft_max;
  request.context = context;
  request.kv_type = kv_type;
  ASSIGN_OR_RETURN(request.host_path, moe_host::ResolveHostPath(flags.moe_host, flags.calibration));
  ASSIGN_OR_RETURN(const moe::RunPlan plan, moe::PlanFor(request, vram_budget));
  if (plan.expert_cache_slots >= 0) {
    // Which path the streamed passes take and why (moe/host/streamed_decision.h, docs/design.md §12.1).
    if (!request.host_path.note.empty()) std::fprintf(stderr, "note: %s\n", request.host_path.note.c_str());
    if (plan.host_path.mode != moe_host::HostMode::kOff) {
      std::fprintf(stderr, "note: %s\n", plan.host_decision.note.c_str());
    }
  }
  ASSIGN_OR_RETURN(pair->target, LoadWithReport("target", flags.model, pair->backend.get(),
                                                moe::TargetOptions(request, context, plan, pair->cuda),
                                                !flags.no_check_tensors));
  if (!pair->target->host_experts_note().empty()) {
    std::fprintf(stderr, "note: %s\n", pair->target->host_experts_note().c_str());
  }
  if (with_draft) {
    ASSIGN_OR_RETURN(pair->draft, LoadWithReport("draft", flags.draft, pair->backend.get(),
                                                 moe::DraftOptions(request, pair->target->max_context()),
                                                 !flags.no_check_tensors));
    RETURN_IF_ERROR(CheckPair(flags, pair->target_tok.get(), pair->draft_tok.get(), *pair->target,
                              *pair->draft));
  }

  SpeculativeOptions& options = pair->options;
  // -n -1: no limit of its own; the loops stop at a full context.
  options.max_new_tokens = flags.n_predict >= 0 ? flags.n_predict : pair->target->max_context();
  options.draft_max = flags.draft_max;
  options.adaptive = UseAdaptiveDraftLength(flags, pair->mode);
  options.accept = pair->mode;
  options.sampling = flags.sampling;
  if (!flags.ignore_eos) {
    if (pair->target_tok != nullptr) {
      options.end_ids = pair->target_tok->eog_ids();
      if (pair->target_tok->eos_id() >= 0) options.end_ids.push_back(pair->target_tok->eos_id());
    } else if (pair->target->spec().eos_token_id >= 0) {
      options.end_ids.push_back(static_cast<int32_t>(pair->target->spec().eos_token_id));
    }
  }
  return pair;
}

absl::StatusOr<std::unique_ptr<SpeculativeLoop>> MakeLoop(const LoadedPair& pair, const SpeculativeOptions& options) {
  return MakeSpeculativeLoop(pair.cuda, pair.target.get(), pair.draft.get(), options);
}

std::string WithSeed(const std::string& json, const GenerationFlags& flags) {
  if (json.empty() || json[0] != '{') return json;
  return Cat("{\"seed\":", flags.sampling.seed, json.size() > 2 ? "," : "", json.substr(1));
}

std::string StatsJson(const GenerationFlags& flags, const LoadedPair& pair, const SpeculativeStats& stats) {
  // What ran comes first, so a saved line says by itself which build, device and models it measured.
  // Spliced in front of the stats object's own keys (dumped values, so the paths are escaped).
  const std::string stats_json = stats.ToJson();
  const std::string device = pair.backend != nullptr ? std::string(pair.backend->name()) : "none";
  std::string head = Cat("{\"seed\":", flags.sampling.seed, ",\"version\":", nlohmann::json(kSpecgenVersion).dump(),
                         ",\"device\":", nlohmann::json(device).dump(), ",\"target\":",
                         nlohmann::json(flags.model).dump(), ",\"draft\":",
                         pair.draft != nullptr ? nlohmann::json(flags.draft).dump() : "null");
  if (stats_json.size() > 2) head += ",";
  return head + stats_json.substr(1);
}

void PrintStats(const GenerationFlags& flags, const LoadedPair& pair, const SpeculativeStats& stats) {
  if (flags.stats == "json") {
    std::printf("%s\n", StatsJson(flags, pair, stats).c_str());
    std::fflush(stdout);
  } else if (flags.stats == "text") {
    const bool spec = pair.draft != nullptr;
    std::fprintf(stderr, "\n%s%s, %s%s%s\n%s", spec ? "speculative, draft " : "plain decoding",
                 spec ? flags.draft.c_str() : "",
                 spec ? Cat("accept ", AcceptModeName(pair.mode), ", ").c_str() : "",
                 ToString(flags.sampling).c_str(),
                 flags.random_seed ? Cat(" (random; --seed ", flags.sampling.seed, " repeats it)").c_str()
                                   : "",
                 stats.ToText().c_str());
  }
}

}  // namespace specgen::cli
