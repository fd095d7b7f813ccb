// Flags and set-up shared by `specgen generate` and `specgen chat`: the model pair, draft length,
// acceptance rule, sampling, context, device and stats options, loading the pair they name
// (tokenizers, the draft/target vocabulary check, the proposer), and printing the run's stats.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/model/transformer.h"
#include "engine/sampling/acceptance.h"
#include "engine/sampling/sampling_params.h"
#include "engine/speculative/speculative_loop.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/kernel_types.h"
#include "moe/apply_plan.h"

namespace specgen {
class CudaBackend;
}  // namespace specgen

namespace specgen::cli {

// --cache-type (both caches) and llama.cpp's --cache-type-k / --cache-type-v (-ctk / -ctv): the KV
// cache's element type, one for K and V.
struct CacheTypeFlags {
  std::string both = moe::kDefaultKvTypeName, k, v;  // f16, as the benchmark runner
};
// Registers --cache-type, --cache-type-k and --cache-type-v on `app`.
void AddCacheTypeFlags(CLI::App& app, CacheTypeFlags* flags);
// The type they name: f16, bf16 or f32; -ctk and -ctv must agree (with each other and --cache-type,
// where given). The error names the flag.
absl::StatusOr<DType> ParseCacheType(const CacheTypeFlags& flags);

struct GenerationFlags {
  std::string model, draft;
  int64_t n_predict = 128;
  int draft_max = 4;
  // --draft-adaptive / --draft-fixed; neither: UseAdaptiveDraftLength decides.
  bool draft_adaptive = false;
  bool draft_fixed = false;
  std::string accept = "rejection";
  SamplingParams sampling;
  int64_t context = 0;
  std::string device = "auto";
  std::string vram_budget;  // --vram-budget, e.g. "8GiB"; empty: free VRAM minus a reserve
  std::string gemv_order = "auto";  // --gemv-order: auto, fma or tensor (ParseGemvOrder)
  CacheTypeFlags cache_type;
  std::string stats = "text";
  bool allow_vocab_mismatch = false;
  bool ignore_eos = false;
  int threads = 0;
  bool random_seed = false;  // --seed -1: sampling.seed was drawn at random (and is printed)
  bool no_check_tensors = false;  // --no-check-tensors: skip the NaN/Inf check of the weights at load
  std::string moe_host;     // --moe-host auto|off|only (moe/host/host_path.h); empty: auto with a calibration
  std::string calibration;  // --calibration FILE; empty: the default path
};

// Where the bundled pair's model NAME (tiny-target, tiny-draft) lives: $SPECGEN_MODELS_DIR/NAME, else
// the source tree's models/NAME. generate and chat run it when no -m is given.
std::string BundledModelPath(std::string_view name);

// Registers the shared flags on `app` (-m, --model-draft, -n, --draft-max, --draft-adaptive,
// --draft-fixed, --accept, --temp, --top-k, --top-p, --min-p, --seed, -c, --device, --vram-budget,
// --gemv-order, --cache-type, --stats, --allow-vocab-mismatch, --ignore-eos, -t, --moe-host, --calibration). `flags` must outlive the parse.
// --seed -1 draws a random seed; -n -1 generates until an end token or a full context.
void AddGenerationFlags(CLI::App& app, GenerationFlags* flags);

// Registers --no-check-tensors (every command that loads weights from a file has it).
void AddNoCheckTensorsFlag(CLI::App& app, bool* flag);

// --gemv-order's value: "auto" (nullopt: the backend's fastest, see BackendOptions::gemv_order),
// "fma" or "tensor"; anything else is an error naming the flag.
absl::StatusOr<std::optional<kernels::GemvOrder>> ParseGemvOrder(std::string_view value);

// Whether the adaptive controller picks the draft length (up to --draft-max): --draft-adaptive or
// --draft-fixed when given; else only where the output does not depend on the lengths chosen, greedy
// (--temp 0) or --accept coupled. Under rejection sampling the text a seed gives follows the draft
// lengths, and adaptive lengths follow timings: a default there would make seeded runs unrepeatable.
bool UseAdaptiveDraftLength(const GenerationFlags& flags, AcceptMode mode);

// Range and choice checks that need no file; the error names the flag.
absl::Status ValidateGenerationFlags(const GenerationFlags& flags);

// The target (and, with a draft and --draft-max > 0, the draft), with their tokenizers where the
// model has one (synth presets do not), ready for a speculative loop. Members are declared so that
// the backend outlives the models.
struct LoadedPair {
  AcceptMode mode = AcceptMode::kRejection;
  std::unique_ptr<Tokenizer> target_tok, draft_tok;
  std::unique_ptr<Backend> backend;  // from --device: the CPU reference or CUDA
  CudaBackend* cuda = nullptr;       // `backend` when it is the CUDA backend
  std::unique_ptr<Transformer> target, draft;  // draft null: plain decoding
  SpeculativeOptions options;        // -n, k, mode, sampling and the end-of-generation ids
};

// Validates the flags, loads both models and tokenizers and checks that the draft can draft for the
// target (CheckCompatible on the tokenizers, or equal vocabulary sizes without them).
absl::StatusOr<std::unique_ptr<LoadedPair>> LoadPair(const GenerationFlags& flags);

// The speculative loop for the pair's backend (MakeSpeculativeLoop): on the GPU the device-resident
// loop (sampling and acceptance on the GPU, one result copy per step), else the CPU reference.
absl::StatusOr<std::unique_ptr<SpeculativeLoop>> MakeLoop(const LoadedPair& pair, const SpeculativeOptions& options);

// The stats JSON object `json` with the run's seed as its first key (the seed that repeats the run,
// drawn at random under --seed -1).
std::string WithSeed(const std::string& json, const GenerationFlags& flags);

// The run's stats JSON (--stats json): seed, version, device, the target and draft paths (draft null
// without one), then SpeculativeStats::ToJson's keys.
std::string StatsJson(const GenerationFlags& flags, const LoadedPair& pair, const SpeculativeStats& stats);

// --stats: text goes to stderr, json is one line on stdout, none prints nothing.
void PrintStats(const GenerationFlags& flags, const LoadedPair& pair, const SpeculativeStats& stats);

}  // namespace specgen::cli
