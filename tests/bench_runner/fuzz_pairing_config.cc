// libFuzzer target: arbitrary bytes as a pairing config (configs/*.toml), as specgen_bench reads it.
// Every input must give a config or an error (naming file and line), never a crash, a sanitizer
// report or an exception; a config it accepts must hold only values the runner can use.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "bench/runner/pairing_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // A path in a folder that does not exist: relative model paths and prompt files resolve to nothing
  // on the machine, so the fuzzer exercises the parser rather than the file system.
  auto config = specgen::bench::ParsePairingConfig(text, "/nonexistent-fuzz-dir/pairing.toml");
  if (!config.ok()) return 0;
  if (config->pairings.empty()) std::abort();
  for (const specgen::bench::Pairing& p : config->pairings) {
    const specgen::SamplingParams& s = p.sampling;
    if (p.name.empty() || p.target.empty() || p.draft_lengths.empty() || p.vram_budgets.empty()) std::abort();
    if (!std::isfinite(s.temperature) || s.temperature < 0) std::abort();
    if (!(s.top_p >= 0 && s.top_p <= 1) || !(s.min_p >= 0 && s.min_p <= 1)) std::abort();
    if (p.context < 2 || p.max_new_tokens < 1 || p.max_new_tokens >= p.context) std::abort();
    if (p.prompt_set < 0 || static_cast<size_t>(p.prompt_set) >= config->prompt_sets.size()) std::abort();
    if (config->prompt_sets[p.prompt_set].prompts.empty()) std::abort();
  }
  return 0;
}
