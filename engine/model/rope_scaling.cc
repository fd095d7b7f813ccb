#include "engine/model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/core/status_macros.h"
#include "engine/core/str_cat.h"

namespace specgen {
namespace {

std::vector<float> UnscaledInverseFrequencies(float theta, int64_t head_dim) {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int64_t j = 0; j < head_dim / 2; ++j) {
    inv[j] = 1.0f / std::pow(theta, static_cast<float>(2 * j) / static_cast<float>(head_dim));
  }
  return inv;
}

// Where pair j's wavelength 2π/inv falls against the original context: 0 at or below
// original/high_freq_factor (kept), 1 at or above original/low_freq_factor (divided by factor).
struct Llama3Band {
  bool high = false, low = false;
  float smooth = 0.0f;  // in the medium band: weight of the unscaled frequency
};

Llama3Band Band(float inv, const RopeScaling& s) {
  const float original = static_cast<float>(s.original_context_length);
  const float low_wavelen = original / s.low_freq_factor;
  const float high_wavelen = original / s.high_freq_factor;
  const float wavelen = 2.0f * std::numbers::pi_v<float> / inv;
  Llama3Band b;
  b.high = wavelen < high_wavelen;
  b.low = wavelen > low_wavelen;
  b.smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return b;
}

// transformers' _compute_yarn_parameters: the (fractional) pair index at which a frequency makes
// `rotations` turns over the original context.
float YarnCorrectionDim(float rotations, int64_t dim, float theta, int64_t original) {
  return static_cast<float>(dim) * std::log(static_cast<float>(original) / (rotations * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(theta));
}

}  // namespace

float RopeAttentionFactor(const RopeScaling& s) {
  if (s.kind != RopeScalingKind::kYarn) return 1.0f;
  if (s.attention_factor > 0.0f) return s.attention_factor;
  return s.factor <= 1.0f ? 1.0f : 0.1f * std::log(s.factor) + 1.0f;
}

std::string Describe(const RopeScaling& s) {
  std::string out;
  switch (s.kind) {
    case RopeScalingKind::kNone: break;
    case RopeScalingKind::kLinear: out = Cat("linear (factor ", s.factor, ")"); break;
    case RopeScalingKind::kLlama3:
      out = Cat("llama3 (factor ", s.factor, ", low ", s.low_freq_factor, ", high ", s.high_freq_factor,
                ", original context ", s.original_context_length, ")");
      break;
    case RopeScalingKind::kYarn:
      out = Cat("yarn (factor ", s.factor, ", original context ", s.original_context_length, ", beta ",
                s.beta_fast, "/", s.beta_slow, s.truncate ? "" : ", untruncated", ", attention factor ",
                RopeAttentionFactor(s), ")");
      break;
  }
  if (!s.freq_factors.empty()) {
    out += Cat(out.empty() ? "" : " with ", "rope_freqs (", s.freq_factors.size(), " factors)");
  }
  return out.empty() ? "none" : out;
}

absl::Status ValidateRopeScaling(const RopeScaling& s, int64_t head_dim, std::string_view source) {
  auto positive = [](float v) { return std::isfinite(v) && v > 0.0f; };
  if (s.kind != RopeScalingKind::kNone && !positive(s.factor)) {
    return InvalidArgument(source, ": RoPE scaling factor ", s.factor, " must be positive");
  }
  if (s.kind == RopeScalingKind::kLlama3) {
    if (!positive(s.low_freq_factor) || !positive(s.high_freq_factor) ||
        !(s.high_freq_factor > s.low_freq_factor)) {
      return InvalidArgument(source, ": llama3 RoPE scaling needs 0 < low_freq_factor < high_freq_factor, got ",
                             s.low_freq_factor, " and ", s.high_freq_factor);
    }
    if (s.original_context_length <= 0) {
      return InvalidArgument(source, ": llama3 RoPE scaling needs a positive original_max_position_embeddings, got ",
                             s.original_context_length);
    }
  }
  if (s.kind == RopeScalingKind::kYarn) {
    if (s.original_context_length <= 0) {
      return InvalidArgument(source, ": yarn RoPE scaling needs a positive original_max_position_embeddings, got ",
                             s.original_context_length);
    }
    if (!positive(s.beta_fast) || !positive(s.beta_slow) || !(s.beta_fast > s.beta_slow)) {
      return InvalidArgument(source, ": yarn RoPE scaling needs 0 < beta_slow < beta_fast, got ", s.beta_slow,
                             " and ", s.beta_fast);
    }
    if (!(s.attention_factor >= 0.0f) || !std::isfinite(s.attention_factor)) {
      return InvalidArgument(source, ": yarn attention_factor ", s.attention_factor, " must be positive");
    }
  }
  if (!s.freq_factors.empty()) {
    if (static_cast<int64_t>(s.freq_factors.size()) != head_dim / 2) {
      return InvalidArgument(source, ": rope_freqs has ", s.freq_factors.size(), " factors, expected head_dim / 2 = ",
                             head_dim / 2);
    }
    for (size_t j = 0; j < s.freq_factors.size(); ++j) {
      if (!positive(s.freq_factors[j])) {
        return InvalidArgument(source, ": rope_freqs[", j, "] = ", s.freq_factors[j], " must be positive");
      }
    }
  }
  return absl::OkStatus();
}

std::vector<float> RopeInverseFrequencies(float theta, int64_t head_dim, const RopeScaling& s) {
  std::vector<float> inv = UnscaledInverseFrequencies(theta, head_dim);
  float low = 0.0f, high = 0.0f;  // kYarn: the ramp's ends, in pairs
  if (s.kind == RopeScalingKind::kYarn) {
    low = YarnCorrectionDim(s.beta_fast, head_dim, theta, s.original_context_length);
    high = YarnCorrectionDim(s.beta_slow, head_dim, theta, s.original_context_length);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0f);
    high = std::min(high, static_cast<float>(head_dim - 1));
    if (low == high) high += 0.001f;  // as transformers: no division by zero
  }
  for (size_t j = 0; j < inv.size(); ++j) {
    switch (s.kind) {
      case RopeScalingKind::kNone: break;
      case RopeScalingKind::kLinear: inv[j] /= s.factor; break;
      case RopeScalingKind::kLlama3: {
        const Llama3Band b = Band(inv[j], s);
        if (b.low) {
          inv[j] /= s.factor;
        } else if (!b.high) {
          inv[j] = (1.0f - b.smooth) * inv[j] / s.factor + b.smooth * inv[j];
        }
        break;
      }
      case RopeScalingKind::kYarn: {
        // Pairs below `low` keep their frequency (extrapolation), those above `high` are divided by
        // factor (interpolation), a linear ramp between.
        const float ramp = std::clamp((static_cast<float>(j) - low) / (high - low), 0.0f, 1.0f);
        const float keep = 1.0f - ramp;
        inv[j] = inv[j] / s.factor * (1.0f - keep) + inv[j] * keep;
        break;
      }
    }
    if (!s.freq_factors.empty()) inv[j] /= s.freq_factors[j];
  }
  return inv;
}

std::vector<float> Llama3FreqFactors(float theta, int64_t head_dim, const RopeScaling& s) {
  std::vector<float> inv = UnscaledInverseFrequencies(theta, head_dim);
  std::vector<float> factors(inv.size(), 1.0f);
  for (size_t j = 0; j < inv.size(); ++j) {
    const Llama3Band b = Band(inv[j], s);
    if (b.low) {
      factors[j] = s.factor;
    } else if (!b.high) {
      factors[j] = 1.0f / ((1.0f - b.smooth) / s.factor + b.smooth);
    }
  }
  return factors;
}

}  // namespace specgen
