// Shared by the pair tests: run the speculative loop with
// a given draft, checking the per-pass invariants (1..k+1 tokens, counts matching the stats) as it
// goes, so every equivalence run also checks the loop's bookkeeping.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "draft/model_proposer.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "engine/speculative/speculative_decoder.h"
#include "gtest/gtest.h"
#include "tests/common/cpu_lm.h"
#include "tests/common/speculative_options.h"

namespace specgen::testing {

struct RunSpec {
  int k = 0;  // 0: plain decoding (no proposer)
  bool adaptive = false;
  AcceptMode mode = AcceptMode::kRejection;
  SamplingParams sampling = SamplingParams::Greedy();
  int64_t new_tokens = 16;
};

// Generates after `prompt`; `draft` may be null. Checks every pass's invariants.
inline std::vector<int32_t> RunPair(CausalLm* target, CausalLm* draft, const RunSpec& spec,
                                    const std::vector<int32_t>& prompt,
                                    SpeculativeStats* stats_out = nullptr) {
  SpeculativeOptions o =
      testing::MakeSpeculativeOptions(spec.sampling, spec.k, spec.adaptive, spec.mode, spec.new_tokens);
  int64_t emitted = 0, accepted = 0, drafted = 0, passes = 0;
  o.on_pass = [&](int k, const AcceptResult& r) {
    EXPECT_LE(k, spec.k);
    EXPECT_GE(r.n_accepted, 0);
    EXPECT_LE(r.n_accepted, k);
    // A pass emits its accepted drafts and one correction or bonus token.
    EXPECT_EQ(static_cast<int64_t>(r.tokens.size()), r.n_accepted + 1);
    emitted += static_cast<int64_t>(r.tokens.size());
    accepted += r.n_accepted;
    drafted += k;
    ++passes;
  };
  ModelProposer proposer(draft, target->vocab_size(), spec.sampling, spec.mode);
  SpeculativeDecoder decoder(target, draft != nullptr && spec.k > 0 ? &proposer : nullptr, o);
  auto out = decoder.Generate(prompt);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  const SpeculativeStats& s = decoder.stats();
  EXPECT_EQ(s.passes, passes);
  EXPECT_EQ(s.accepted, accepted);
  EXPECT_EQ(s.drafted, drafted);
  EXPECT_EQ(s.tokens, static_cast<int64_t>(out->size()));
  // No end tokens here, and k never exceeds what -n leaves, so nothing emitted is cut.
  EXPECT_EQ(s.tokens, emitted);
  if (stats_out != nullptr) *stats_out = s;
  return *out;
}

}  // namespace specgen::testing
