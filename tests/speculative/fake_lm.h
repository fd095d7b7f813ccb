// FakeLm: a CausalLm test double whose next-token logits are a deterministic function of (previous
// token, position, seed), so runs are reproducible, batch-invariant by construction, and a "draft"
// is the same function with a perturbation of chosen strength. It records what its cache holds, so
// tests can check rollback and count forward passes.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/status_macros.h"
#include "engine/model/causal_lm.h"

namespace specgen::testing {

class FakeLm : public CausalLm {
 public:
  // Logits = sharpness · (base(prev, pos) + perturbation · noise(prev, pos, perturb_seed)), with base
  // and noise uniform in [-1, 1] per vocab id.
  FakeLm(int64_t vocab, int64_t max_context, double sharpness = 4.0, double perturbation = 0.0,
         uint64_t perturb_seed = 1)
      : max_context_(max_context),
        sharpness_(sharpness),
        perturbation_(perturbation),
        perturb_seed_(perturb_seed) {
    spec_.vocab_size = vocab;
    spec_.name = "fake";
  }

  const ModelSpec& spec() const override { return spec_; }
  int64_t n_past() const override { return static_cast<int64_t>(cache_.size()); }
  int64_t max_context() const override { return max_context_; }

  absl::Status Forward(std::span<const int32_t> tokens, std::vector<float>* logits) override {
    if (tokens.empty()) return InvalidArgument("fake: empty batch");
    if (n_past() + static_cast<int64_t>(tokens.size()) > max_context_) {
      return InvalidArgument("fake: context overflow");
    }
    ++forward_calls_;
    const size_t v = static_cast<size_t>(spec_.vocab_size);
    logits->resize(tokens.size() * v);
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || tokens[i] >= spec_.vocab_size) return InvalidArgument("fake: bad token");
      NextLogits(tokens[i], n_past(), logits->data() + i * v);
      cache_.push_back(tokens[i]);
    }
    return absl::OkStatus();
  }

  absl::Status Truncate(int64_t n) override {
    if (n < 0 || n > n_past()) return InvalidArgument("fake: truncate ", n, " of ", n_past());
    cache_.resize(n);
    return absl::OkStatus();
  }

  // Logits for the token after `prev` placed at `pos`.
  void NextLogits(int32_t prev, int64_t pos, float* out) const {
    for (int64_t j = 0; j < spec_.vocab_size; ++j) {
      const double base = Unit(Hash(0x5eed, prev, pos, j));
      const double noise = perturbation_ > 0 ? Unit(Hash(perturb_seed_, prev, pos, j)) : 0.0;
      out[j] = static_cast<float>(sharpness_ * (base + perturbation_ * noise));
    }
  }

  const std::vector<int32_t>& cache() const { return cache_; }
  int64_t forward_calls() const { return forward_calls_; }

 private:
  static uint64_t Hash(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    uint64_t h = a * 0x9E3779B97F4A7C15ull;
    for (uint64_t x : {b, c, d}) {  // splitmix64 finalizer per word
      h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
      h ^= h >> 30;
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 27;
      h *= 0x94D049BB133111EBull;
      h ^= h >> 31;
    }
    return h;
  }
  static double Unit(uint64_t h) { return double(h >> 11) * 0x1p-53 * 2.0 - 1.0; }

  ModelSpec spec_;
  int64_t max_context_;
  double sharpness_;
  double perturbation_;
  uint64_t perturb_seed_;
  std::vector<int32_t> cache_;
  int64_t forward_calls_ = 0;
};

}  // namespace specgen::testing
