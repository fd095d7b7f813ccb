#include "bench/acceptance/acceptance_script.h"

#include "bench/acceptance/scripted_draft.h"
#include "draft/model_proposer.h"
#include "engine/core/status_macros.h"
#include "engine/speculative/speculative_decoder.h"

namespace specgen::bench {

int32_t AcceptanceScript::Token(int64_t position, int depth, int32_t drawn) const {
  const int64_t i = position - prompt_len_;
  if (i < 0 || i >= static_cast<int64_t>(continuation_.size())) return drawn;
  return ScriptedDraftToken(key_seed_, position, depth, profile_.at(depth), continuation_[static_cast<size_t>(i)],
                            vocab_);
}

absl::StatusOr<std::vector<int32_t>> GreedyContinuation(CausalLm* target, std::span<const int32_t> prompt,
                                                        int64_t n) {
  SpeculativeOptions o;
  o.max_new_tokens = n;
  o.draft_max = 0;
  o.sampling = SamplingParams::Greedy();
  SpeculativeDecoder plain(target, static_cast<Proposer*>(nullptr), o);
  return plain.Generate(prompt);
}

absl::StatusOr<std::unique_ptr<SpeculativeLoop>> MakeScriptedLoop(CudaBackend* cuda, Transformer* target,
                                                                  Transformer* draft,
                                                                  const SpeculativeOptions& options,
                                                                  const AcceptanceScript* script) {
  if (target == nullptr || draft == nullptr || script == nullptr) {
    return InvalidArgument("acceptance regime: needs a target, a draft and a script");
  }
  if (!options.sampling.greedy()) {
    return InvalidArgument("acceptance regime '", script->profile().name,
                           "': greedy only (temperature 0); the script proposes the target's greedy token");
  }
  if (cuda != nullptr) {
    return absl::UnimplementedError(
        Cat("acceptance regime '", script->profile().name,
            "': the GPU loop does not run the scripted draft yet (kernels/scripted_draft.cuh computes its "
            "tokens on the device; DeviceProposer does not call it); run it with device = \"cpu\""));
  }
  auto proposer = std::make_unique<ModelProposer>(draft, target->vocab_size(), options.sampling, options.accept);
  proposer->SetScript([script](int64_t position, int depth, int32_t drawn) {
    return script->Token(position, depth, drawn);
  });
  return std::unique_ptr<SpeculativeLoop>(std::make_unique<SpeculativeDecoder>(target, std::unique_ptr<Proposer>(std::move(proposer)), options));
}

}  // namespace specgen::bench
