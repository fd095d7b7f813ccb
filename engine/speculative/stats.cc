#include "engine/speculative/stats.h"

#include <cstdio>

#include "nlohmann/json.hpp"

namespace specgen {

const char* StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kEndToken:
      return "end_token";
    case StopReason::kMaxTokens:
      return "max_tokens";
    case StopReason::kStopped:
      return "stopped";
    case StopReason::kContextFull:
      return "context_full";
    case StopReason::kNone:
      break;
  }
  return "none";
}

namespace {
// The text stats' words for a stop reason (the JSON keeps StopReasonName's).
const char* StopReasonWords(StopReason reason) {
  switch (reason) {
    case StopReason::kEndToken:
      return "the model's end token";
    case StopReason::kMaxTokens:
      return "the -n limit";
    case StopReason::kStopped:
      return "a stop: Ctrl-C or a --stop string";
    case StopReason::kContextFull:
      return "the context is full (-c)";
    case StopReason::kNone:
      break;
  }
  return "not ended";
}
}  // namespace

OffloadCounters& OffloadCounters::operator+=(const OffloadCounters& o) {
  h2d_bytes += o.h2d_bytes;
  expert_hits += o.expert_hits;
  expert_misses += o.expert_misses;
  distinct_experts += o.distinct_experts;
  moe_layer_passes += o.moe_layer_passes;
  host_experts += o.host_experts;
  host_seconds += o.host_seconds;
  host_activation_bytes += o.host_activation_bytes;
  return *this;
}

OffloadCounters& OffloadCounters::operator-=(const OffloadCounters& o) {
  h2d_bytes -= o.h2d_bytes;
  expert_hits -= o.expert_hits;
  expert_misses -= o.expert_misses;
  distinct_experts -= o.distinct_experts;
  moe_layer_passes -= o.moe_layer_passes;
  host_experts -= o.host_experts;
  host_seconds -= o.host_seconds;
  host_activation_bytes -= o.host_activation_bytes;
  return *this;
}

double OffloadCounters::hit_rate() const {
  const int64_t lookups = expert_hits + expert_misses;
  return lookups ? double(expert_hits) / double(lookups) : 0.0;
}

double OffloadCounters::mean_distinct_experts() const {
  return moe_layer_passes ? double(distinct_experts) / double(moe_layer_passes) : 0.0;
}

SpeculativeStats& SpeculativeStats::operator+=(const SpeculativeStats& o) {
  prompt_tokens += o.prompt_tokens;
  tokens += o.tokens;
  passes += o.passes;
  drafted += o.drafted;
  accepted += o.accepted;
  if (drafted_at.size() < o.drafted_at.size()) drafted_at.resize(o.drafted_at.size(), 0);
  if (accepted_at.size() < o.accepted_at.size()) accepted_at.resize(o.accepted_at.size(), 0);
  for (size_t i = 0; i < o.drafted_at.size(); ++i) drafted_at[i] += o.drafted_at[i];
  for (size_t i = 0; i < o.accepted_at.size(); ++i) accepted_at[i] += o.accepted_at[i];
  prefill_seconds += o.prefill_seconds;
  draft_seconds += o.draft_seconds;
  verify_seconds += o.verify_seconds;
  accept_seconds += o.accept_seconds;
  total_seconds += o.total_seconds;
  ttft_seconds += o.ttft_seconds;
  draft_max = o.draft_max;
  adaptive = o.adaptive;
  stop_reason = o.stop_reason;
  offload += o.offload;
  return *this;
}

void SpeculativeStats::RecordPass(int k, int n_accepted) {
  ++passes;
  drafted += k;
  accepted += n_accepted;
  if (drafted_at.size() < static_cast<size_t>(k)) {
    drafted_at.resize(k, 0);
    accepted_at.resize(k, 0);
  }
  for (int i = 0; i < k; ++i) ++drafted_at[i];
  for (int i = 0; i < n_accepted; ++i) ++accepted_at[i];
}

std::string SpeculativeStats::ToJson() const {
  nlohmann::json per_position = nlohmann::json::array();
  for (size_t i = 0; i < drafted_at.size(); ++i) {
    per_position.push_back(drafted_at[i] ? double(accepted_at[i]) / drafted_at[i] : 0.0);
  }
  nlohmann::json j = {
      {"prompt_tokens", prompt_tokens},
      {"prompt_tokens_prefilled", prompt_tokens_prefilled},
      {"tokens", tokens},
      {"passes", passes},
      {"drafted", drafted},
      {"accepted", accepted},
      {"acceptance_rate", drafted > 0 ? nlohmann::json(acceptance_rate()) : nlohmann::json(nullptr)},
      {"tokens_per_pass", mean_accepted_length()},
      {"mean_draft_length", mean_draft_length()},
      {"draft_max", draft_max},
      {"draft_length", draft_max == 0 ? "none" : adaptive ? "adaptive" : "fixed"},
      {"per_position_acceptance", per_position},
      {"tokens_per_second", tokens_per_second()},
      {"stop_reason", StopReasonName(stop_reason)},
      {"h2d_bytes", offload.h2d_bytes},
      {"h2d_bytes_per_token", h2d_bytes_per_token()},
      {"host_experts", offload.host_experts},
      {"host_seconds", offload.host_seconds},
      {"host_activation_bytes", offload.host_activation_bytes},
      // null where the figure does not apply: no expert cache consulted, no draft.
      {"expert_cache_hit_rate", offload.expert_hits + offload.expert_misses > 0
                                    ? nlohmann::json(offload.hit_rate()) : nlohmann::json(nullptr)},
      {"mean_distinct_experts", offload.moe_layer_passes > 0 ? nlohmann::json(offload.mean_distinct_experts())
                                                            : nlohmann::json(nullptr)},
      {"time",
       {{"prefill", prefill_seconds},
        {"ttft", ttft_seconds},
        {"draft", draft_seconds},
        {"verify", verify_seconds},
        {"accept", accept_seconds},
        {"total", total_seconds}}},
  };
  return j.dump();
}

std::string SpeculativeStats::ToText() const {
  char buf[1024];
  std::string per_position;
  for (size_t i = 0; i < drafted_at.size(); ++i) {
    char one[32];
    std::snprintf(one, sizeof(one), "%s%.3f", i ? " " : "",
                  drafted_at[i] ? double(accepted_at[i]) / drafted_at[i] : 0.0);
    per_position += one;
  }
  const std::string rule = draft_max == 0 ? "no draft"
                           : adaptive     ? "adaptive, up to " + std::to_string(draft_max)
                                          : "fixed at " + std::to_string(draft_max);
  std::snprintf(buf, sizeof(buf),
                "tokens %lld in %.3f s (%.2f tokens/s), prompt %lld tokens, %lld prefilled in %.3f s, "
                "first token after %.3f s\n"
                "passes %lld, drafted %lld, accepted %lld, acceptance %.3f, tokens per pass %.3f, "
                "mean draft length %.2f (%s)\n"
                "per-position acceptance [%s]\n"
                "time: draft %.3f s, verify %.3f s, accept %.3f s\n"
                "ended: %s\n",
                (long long)tokens, total_seconds, tokens_per_second(), (long long)prompt_tokens,
                (long long)prompt_tokens_prefilled, prefill_seconds, ttft_seconds, (long long)passes, (long long)drafted, (long long)accepted,
                acceptance_rate(), mean_accepted_length(), mean_draft_length(), rule.c_str(),
                per_position.c_str(), draft_seconds, verify_seconds, accept_seconds,
                StopReasonWords(stop_reason));
  std::string text = buf;
  if (offload.streamed()) {
    std::snprintf(buf, sizeof(buf),
                  "offload: %.1f MiB host to device (%.2f MiB/token), expert cache hit rate %.3f, %.1f "
                  "distinct experts per layer per pass\n",
                  offload.h2d_bytes / 1048576.0, h2d_bytes_per_token() / 1048576.0, offload.hit_rate(),
                  offload.mean_distinct_experts());
    text += buf;
  }
  return text;
}

}  // namespace specgen
