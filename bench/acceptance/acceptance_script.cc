#include "bench/acceptance/acceptance_script.h"

#include <algorithm>

#include "bench/acceptance/scripted_draft.h"
#include "draft/model_proposer.h"
#include "engine/core/status_macros.h"
#include "engine/speculative/make_loop.h"
#include "engine/speculative/speculative_decoder.h"
#if defined(SPECGEN_WITH_CUDA)
#include "bench/acceptance/device_script.h"
#include "engine/speculative/device_speculative_decoder.h"
#endif

namespace specgen::bench {

absl::Status AcceptanceScript::SetContinuation(int64_t prompt_len, std::vector<int32_t> continuation,
                                               uint64_t prompt_index) {
  prompt_len_ = prompt_len;
  continuation_ = std::move(continuation);
  key_seed_ = seed_ ^ (prompt_index * 0x9E3779B97F4A7C15ull);
  return mirror_ ? mirror_(*this) : absl::OkStatus();
}

int32_t AcceptanceScript::Token(int64_t position, int depth, int32_t drawn) const {
  const int64_t i = position - prompt_len_;
  if (i < 0 || i >= static_cast<int64_t>(continuation_.size())) return drawn;
  return ScriptedDraftToken(key_seed_, position, depth, profile_.at(depth), continuation_[static_cast<size_t>(i)],
                            vocab_);
}

absl::StatusOr<std::vector<int32_t>> GreedyContinuation(CudaBackend* cuda, Transformer* target,
                                                        std::span<const int32_t> prompt, int64_t n) {
  SpeculativeOptions o;
  o.max_new_tokens = n;
  o.draft_max = 0;
  o.sampling = SamplingParams::Greedy();
  ASSIGN_OR_RETURN(std::unique_ptr<SpeculativeLoop> plain, MakeSpeculativeLoop(cuda, target, nullptr, o));
  return plain->Generate(prompt);
}

absl::StatusOr<std::unique_ptr<SpeculativeLoop>> MakeScriptedLoop(CudaBackend* cuda, Transformer* target,
                                                                  Transformer* draft,
                                                                  const SpeculativeOptions& options,
                                                                  AcceptanceScript* script) {
  if (target == nullptr || draft == nullptr || script == nullptr) {
    return InvalidArgument("acceptance regime: needs a target, a draft and a script");
  }
  if (!options.sampling.greedy()) {
    return InvalidArgument("acceptance regime '", script->profile().name,
                           "': greedy only (temperature 0); the script proposes the target's greedy token");
  }
  if (cuda != nullptr) {
#if defined(SPECGEN_WITH_CUDA)
    ASSIGN_OR_RETURN(std::shared_ptr<DeviceScript> device,
                     DeviceScript::Create(script->profile(), std::max<int64_t>(options.max_new_tokens, 1)));
    DeviceLoopHooks hooks;
    hooks.draft.script = device->table();
    ASSIGN_OR_RETURN(std::unique_ptr<DeviceSpeculativeDecoder> loop,
                     DeviceSpeculativeDecoder::Create(cuda, target, draft, options, hooks));
    script->set_mirror([device](const AcceptanceScript& s) { return device->Upload(s); });
    RETURN_IF_ERROR(device->Upload(*script));
    return std::unique_ptr<SpeculativeLoop>(std::move(loop));
#else
    return absl::FailedPreconditionError("acceptance regime: this build has no CUDA support");
#endif
  }
  auto proposer = std::make_unique<ModelProposer>(draft, target->vocab_size(), options.sampling, options.accept);
  proposer->SetScript([script](int64_t position, int depth, int32_t drawn) {
    return script->Token(position, depth, drawn);
  });
  return std::unique_ptr<SpeculativeLoop>(
      std::make_unique<SpeculativeDecoder>(target, std::unique_ptr<Proposer>(std::move(proposer)), options));
}

}  // namespace specgen::bench
