// Pairing configs (configs/*.toml): which draft to pair with which target, at which draft lengths,
// acceptance rule, sampling, device, VRAM budget and context, over which prompts. specgen_bench turns
// each pairing x draft length x budget into one benchmark. The format:
//
//   [defaults]                  # any pairing key but `name`; a pairing's own keys win
//   max_new_tokens = 64
//   prompts = "held_out"
//
//   [prompts.held_out]          # a prompt set: exactly one of file, text, ids
//   file = "../models/pair_prompts.json"  # .jsonl, .txt (one prompt a line) or .json; relative to
//   limit = 8                             # this config file; limit: the first N prompts only
//
//   [[pairing]]
//   name = "greedy"
//   target = "../models/tiny-target"     # GGUF file, HF folder or synth:PRESET
//   draft = "../models/tiny-draft"       # or "none": the target alone (plain decoding)
//   draft_lengths = [1, 2, 4, "adaptive"]  # or "adaptive"; adaptive_max bounds the adaptive choice;
//                                        # "modelled": adaptive with the step costs modelled from
//                                        # the bytes a pass streams (moe/step_cost_model.h)
//   acceptance = ["real", "typical", "flat:0.6", "flat:0.9"]  # acceptance regimes (greedy only):
//                                        # "real" the draft's own tokens, else a profile the scripted
//                                        # draft follows (bench/acceptance); default ["real"]
//   routing = ["own", "locality", "uniform"]  # routing regimes of an MoE target (bench/routing):
//                                        # its own router, or a trace's experts; default ["own"]
//   accept = "rejection"                 # or "coupled"
//   temperature = 0.0                    # top_k, top_p, min_p, seed as the CLI's flags
//   device = "auto"                      # auto, cpu or cuda
//   vram_budget = ["8GiB", "16GiB"]      # or one string; absent: the backend's default
//   moe_host = "auto"                    # auto, off or only: as the CLI's --moe-host (default: its default)
//   context = 512
//   enabled = false                      # skipped (its model paths need not exist yet)
//
// Parsing checks everything that needs no model: unknown keys, types, ranges, prompt files (read and
// parsed here), model paths that do not exist. Errors name the file, the line and the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling/acceptance.h"
#include "engine/sampling/sampling_params.h"

namespace specgen::bench {

// A draft length of a pairing: a fixed k (0: plain decoding) or the adaptive controller up to a bound.
struct DraftLength {
  int k = 0;  // fixed k, or the adaptive bound
  bool adaptive = false;
  // With adaptive: the bytes-aware policy (a step's cost modelled from the plan, not measured).
  bool modelled = false;
  // "0", "4", "adaptive8" or "modelled8": the benchmark name's part.
  std::string Name() const;
};

// One prompt: text (encoded with the target's tokenizer at run time) or token ids.
struct Prompt {
  std::string text;
  std::vector<int32_t> ids;  // non-empty: use these ids, not the text
};

struct PromptSet {
  std::string name;
  std::vector<Prompt> prompts;
};

// Where a value came from, for errors found after parsing (model files, vocabularies).
struct SourceRef {
  std::string file;
  int64_t line = 0;
  std::string key;
  std::string ToString() const;  // "file:line: key"
};

struct Pairing {
  std::string name;
  std::string target;
  std::string draft;  // empty: none (plain decoding)
  std::vector<DraftLength> draft_lengths;  // {0} without a draft
  AcceptMode accept = AcceptMode::kRejection;
  SamplingParams sampling = SamplingParams::Plain(0.8f, 1);
  std::string device = "auto";
  std::vector<std::string> vram_budgets;  // {""}: the backend's default
  std::string moe_host;                   // --moe-host's value; empty: auto with a calibration, else off
  // Acceptance regimes, each an acceptance profile's name (moe/acceptance_profile.h) the scripted
  // draft follows, or "" for the draft's own tokens; {""} by default.
  std::vector<std::string> acceptances = {""};
  // Routing regimes (bench/routing/routing_trace.h): "" the target's own router, else "uniform" or
  // "locality", whose trace replaces its experts' choice; {""} by default.
  std::vector<std::string> routings = {""};
  int64_t context = 512;
  int64_t max_new_tokens = 64;
  bool ignore_eos = true;  // benchmarks compare equal lengths
  int threads = 0;
  int prompt_set = -1;                 // index into PairingConfig::prompt_sets
  SourceRef target_ref, draft_ref;     // where target and draft were set
  SourceRef budget_ref;                // where vram_budget was set (line 0: not set)
};

struct PairingConfig {
  std::string path;
  std::vector<PromptSet> prompt_sets;
  std::vector<Pairing> pairings;
};

// Parses `text` as the config file `path` (relative paths in it resolve against path's folder).
absl::StatusOr<PairingConfig> ParsePairingConfig(const std::string& text, const std::string& path);
// Reads and parses the file.
absl::StatusOr<PairingConfig> LoadPairingConfig(const std::string& path);

}  // namespace specgen::bench
