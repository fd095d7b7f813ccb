#include "engine/speculative/make_loop.h"

#include "draft/model_proposer.h"
#include "engine/core/status_macros.h"
#include "engine/speculative/speculative_decoder.h"
#if defined(SPECGEN_WITH_CUDA)
#include "engine/speculative/device_speculative_decoder.h"
#endif

namespace specgen {

absl::StatusOr<std::unique_ptr<SpeculativeLoop>> MakeSpeculativeLoop(CudaBackend* cuda, Transformer* target,
                                                                     Transformer* draft,
                                                                     const SpeculativeOptions& options) {
  if (target == nullptr) return InvalidArgument("speculative loop: no target");
  if (draft != nullptr && options.draft_max <= 0) draft = nullptr;
  if (cuda != nullptr) {
#if defined(SPECGEN_WITH_CUDA)
    ASSIGN_OR_RETURN(std::unique_ptr<DeviceSpeculativeDecoder> loop,
                     DeviceSpeculativeDecoder::Create(cuda, target, draft, options));
    return std::unique_ptr<SpeculativeLoop>(std::move(loop));
#else
    return absl::FailedPreconditionError("speculative loop: this build has no CUDA support");
#endif
  }
  std::unique_ptr<Proposer> proposer;
  if (draft != nullptr) {
    proposer = std::make_unique<ModelProposer>(draft, target->vocab_size(), options.sampling, options.accept);
  }
  return std::unique_ptr<SpeculativeLoop>(
      std::make_unique<SpeculativeDecoder>(target, std::move(proposer), options));
}

}  // namespace specgen
