// The acceptance regimes of the benchmarks (docs/design.md §3.5; specgen_bench and the benchmarks only,
// never generate or chat). Random-weight models agree rarely, so a synth pair says nothing of what a
// trained draft would gain. Under a regime the target's greedy continuation of the prompt is computed
// first; then the draft runs its real forward passes, but its token at depth j of a step is the
// target's next token with probability a_j of an acceptance profile (moe/acceptance_profile.h), else a
// token the target does not pick (scripted_draft.h). The target verifies with its real logits, so the
// acceptance is measured, the draft's cost stays real, and the output is the target's own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/causal_lm.h"
#include "engine/model/transformer.h"
#include "engine/speculative/speculative_loop.h"
#include "moe/acceptance_profile.h"

namespace specgen {
class CudaBackend;
}  // namespace specgen

namespace specgen::bench {

class AcceptanceScript {
 public:
  AcceptanceScript(moe::AcceptanceProfile profile, uint64_t seed, int32_t vocab)
      : profile_(std::move(profile)), seed_(seed), vocab_(vocab) {}

  // The prompt the next generation runs: its length, the target's greedy continuation of it, and its
  // index in the prompt set. The index enters the key (key_seed()): prompts of one length would
  // otherwise draw the same decisions at the same positions, and a set of them would measure one
  // prompt's acceptance many times over.
  // A loop on the GPU reads a device copy, which this also updates (an error where it cannot).
  absl::Status SetContinuation(int64_t prompt_len, std::vector<int32_t> continuation, uint64_t prompt_index = 0);
  // The seed the current prompt's decisions are keyed by (what the device kernel's table takes).
  uint64_t key_seed() const { return key_seed_; }
  // ModelProposer::DraftScript: at `position` (absolute) and `depth` (0-based in the step), the
  // continuation's token with probability a_depth, else another; the drawn token where the
  // continuation does not reach (positions the loop never verifies: it drafts no further than -n).
  int32_t Token(int64_t position, int depth, int32_t drawn) const;

  const moe::AcceptanceProfile& profile() const { return profile_; }
  uint64_t seed() const { return seed_; }
  int32_t vocab() const { return vocab_; }
  int64_t prompt_len() const { return prompt_len_; }
  const std::vector<int32_t>& continuation() const { return continuation_; }

  // Where SetContinuation mirrors the prompt's script (MakeScriptedLoop sets it for the GPU loop; the
  // function owns the device copy).
  using Mirror = std::function<absl::Status(const AcceptanceScript&)>;
  void set_mirror(Mirror mirror) { mirror_ = std::move(mirror); }

 private:
  moe::AcceptanceProfile profile_;
  uint64_t seed_;
  uint64_t key_seed_ = seed_;
  int32_t vocab_;
  int64_t prompt_len_ = 0;
  std::vector<int32_t> continuation_;
  Mirror mirror_;
};

// The target's greedy continuation of `prompt`, `n` tokens (no end token stops it), through the loop
// without a draft on the target's backend (`cuda`: the CUDA backend it runs on, else null), so that it
// is the text the regime's loop verifies against. The target's cache is left holding it.
absl::StatusOr<std::vector<int32_t>> GreedyContinuation(CudaBackend* cuda, Transformer* target,
                                                        std::span<const int32_t> prompt, int64_t n);

// The loop under a regime: the CPU loop (SpeculativeDecoder) whose ModelProposer's draws follow
// `script` (not owned; SetContinuation before each Generate). Greedy only: the script stands for what
// a draft proposes, and under sampling the target's token is no longer one known token. With `cuda`
// the GPU loop (DeviceSpeculativeDecoder) whose DeviceProposer runs kernels/scripted_draft.cuh after
// each draw, from a device copy of the script (continuations of up to options.max_new_tokens) that
// SetContinuation keeps current. The script must outlive the loop.
absl::StatusOr<std::unique_ptr<SpeculativeLoop>> MakeScriptedLoop(CudaBackend* cuda, Transformer* target,
                                                                  Transformer* draft,
                                                                  const SpeculativeOptions& options,
                                                                  AcceptanceScript* script);

}  // namespace specgen::bench
