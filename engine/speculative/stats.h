// Counters of a speculative generation run, named as the benchmark figures they feed
// (docs/design.md §11.6, §7 `--stats json`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specgen {

// Why a generation ended.
enum class StopReason {
  kNone,         // not ended (a Generate that failed, or none yet)
  kEndToken,     // the target emitted an end-of-generation token
  kMaxTokens,    // -n tokens were generated
  kContextFull,  // the sequence filled the target's context
  kStopped,      // SpeculativeOptions::stop asked to stop (the chat's Ctrl-C, generate's --stop)
};
const char* StopReasonName(StopReason reason);  // "end_token", "max_tokens", "context_full", "stopped", "none"

// What the offload runtime streamed and how its expert cache did; the streaming runtime adds each
// step's counters into SpeculativeStats::offload. All zero when nothing streams.
struct OffloadCounters {
  int64_t h2d_bytes = 0;            // host→device bytes of streamed weights
  int64_t expert_hits = 0;          // routed experts found in the VRAM cache
  int64_t expert_misses = 0;        // routed experts fetched (each once per pass)
  int64_t distinct_experts = 0;     // sum over (pass, MoE layer) of the layer's expert union
  int64_t moe_layer_passes = 0;     // (pass, MoE layer) pairs that distinct_experts sums over
  // The host expert path (--moe-host, docs/design.md §12.1): missed experts computed on the host CPU
  // instead of fetched (not in expert_misses' fetches nor in h2d_bytes' weights), the host's wall time
  // for them, and the activations they sent across the link (both ways).
  int64_t host_experts = 0;
  double host_seconds = 0;
  int64_t host_activation_bytes = 0;

  OffloadCounters& operator+=(const OffloadCounters& o);
  // What happened between two readings of running totals: this (the later) less `o`.
  OffloadCounters& operator-=(const OffloadCounters& o);
  bool streamed() const { return h2d_bytes > 0 || expert_misses > 0; }
  // Hits over lookups; 0 before any lookup.
  double hit_rate() const;
  // The mean expert union of one MoE layer in one pass; 0 before any.
  double mean_distinct_experts() const;
};

struct SpeculativeStats {
  int64_t prompt_tokens = 0;
  // Of them, those the target was fed (prefill plus the last one, which goes with the first step);
  // the rest came from the KV cache (a chat's earlier turns). "Prefilled" means this count everywhere.
  int64_t prompt_tokens_prefilled = 0;
  int64_t tokens = 0;    // generated tokens (what was emitted, an end token included)
  int64_t passes = 0;    // target verification passes (prefill excluded)
  int64_t drafted = 0;   // draft tokens proposed
  int64_t accepted = 0;  // draft tokens accepted
  // Per draft position i (0-based): passes that drafted a token there, and passes that accepted it.
  std::vector<int64_t> drafted_at;
  std::vector<int64_t> accepted_at;

  double prefill_seconds = 0;  // target and draft prompt prefill
  double draft_seconds = 0;
  double verify_seconds = 0;   // target forward passes
  double accept_seconds = 0;   // logits processing and the acceptance rule
  double total_seconds = 0;    // generation, prefill excluded
  // Time to first token: from the prefill's start until the first step's tokens were committed (the
  // prefill and one step; 0 when no step ran).
  double ttft_seconds = 0;
  // How the run chose its draft length: the bound (0: no draft, plain decoding) and whether the
  // adaptive controller chose k at each pass (else every pass drafted draft_max).
  int draft_max = 0;
  bool adaptive = false;
  StopReason stop_reason = StopReason::kNone;
  OffloadCounters offload;

  double acceptance_rate() const { return drafted ? double(accepted) / drafted : 0.0; }
  // τ: tokens per verification pass, the bonus/correction token included.
  double mean_accepted_length() const { return passes ? 1.0 + double(accepted) / passes : 0.0; }
  double mean_draft_length() const { return passes ? double(drafted) / passes : 0.0; }
  double tokens_per_second() const { return total_seconds > 0 ? tokens / total_seconds : 0.0; }
  double h2d_bytes_per_token() const { return tokens ? double(offload.h2d_bytes) / tokens : 0.0; }
  void RecordPass(int k, int n_accepted);
  // Adds another run's counters and times (per position, element by element): the totals of several
  // generations. draft_max, adaptive and stop_reason describe one run: the later's are kept.
  SpeculativeStats& operator+=(const SpeculativeStats& o);

  std::string ToJson() const;  // one object; keys as docs/design.md §7
  std::string ToText() const;  // a few human-readable lines (the offload line only when it streamed)
};

}  // namespace specgen
