// RoPE frequency scaling: how a model stretches its rotary frequencies past the context it was trained
// on. The forward pass needs one inverse frequency per rotated pair; this file turns a model's scaling
// description (config.json rope_scaling / rope_parameters, GGUF rope.scaling.* and rope_freqs.weight)
// into that table. YaRN also scales the rotated dims by an attention factor (RopeAttentionFactor), which
// the RoPE op applies beside the table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace specgen {

enum class RopeScalingKind {
  kNone,
  kLinear,  // every frequency divided by factor (position interpolation)
  kLlama3,  // Llama 3.1: low frequencies divided by factor, high ones kept, a smooth ramp between
  kYarn,    // YaRN (gpt-oss, DeepSeek, Qwen long context): the same bands by rotations per original
            // context, and the rotated dims scaled by an attention factor
};

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::kNone;
  float factor = 1.0f;                     // kLinear, kLlama3
  float low_freq_factor = 1.0f;            // kLlama3
  float high_freq_factor = 4.0f;           // kLlama3
  int64_t original_context_length = 8192;  // kLlama3, kYarn: original_max_position_embeddings
  float beta_fast = 32.0f;                 // kYarn: rotations (over the original context) above
  float beta_slow = 1.0f;                  //   which a pair is kept, below which it is interpolated
  bool truncate = true;                    // kYarn: the band's ends rounded to whole pairs
  float attention_factor = 0.0f;           // kYarn: 0: 0.1·ln(factor) + 1 (transformers' default)
  // GGUF rope_freqs.weight (llama.cpp's converter writes llama3 scaling so): pair j's frequency is
  // further divided by freq_factors[j]. Empty when the file has none.
  std::vector<float> freq_factors;

  bool active() const { return kind != RopeScalingKind::kNone || !freq_factors.empty(); }
};

// "linear (factor 4)", "llama3 (factor 8, low 1, high 4, original context 8192)", "rope_freqs (64
// factors)", "none": for messages and `specgen inspect`.
std::string Describe(const RopeScaling& s);

// Checks the parameters against a head of head_dim (factors positive and finite, low < high,
// freq_factors of head_dim / 2 positive entries); the error names `source`.
absl::Status ValidateRopeScaling(const RopeScaling& s, int64_t head_dim, std::string_view source);

// The inverse frequency of each of the head_dim / 2 rotated pairs: theta^(−2j/head_dim) in fp32 (as
// the CPU's unscaled RoPE), then remapped per `s` (transformers' _compute_linear_scaling /
// _compute_llama3_parameters), then divided by freq_factors.
std::vector<float> RopeInverseFrequencies(float theta, int64_t head_dim, const RopeScaling& s);

// The factor the rotated dims of q and k are multiplied by (cos and sin scaled, as transformers and
// llama.cpp do): YaRN's attention factor, 1 for every other kind.
float RopeAttentionFactor(const RopeScaling& s);

// llama3 scaling as per-pair divisors of the unscaled frequencies, as llama.cpp's converter writes
// them into rope_freqs.weight: 1 for high frequencies, factor for low ones, the ramp between.
std::vector<float> Llama3FreqFactors(float theta, int64_t head_dim, const RopeScaling& s);

}  // namespace specgen
