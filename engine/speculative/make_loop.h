// MakeSpeculativeLoop: the speculative loop for where the models run, behind one interface: the
// GPU-resident DeviceSpeculativeDecoder when they run on a CudaBackend, else SpeculativeDecoder with a
// ModelProposer over the draft (the CPU reference).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/transformer.h"
#include "engine/speculative/speculative_loop.h"

namespace specgen {

class CudaBackend;

// `cuda`: the backend both models run on when it is the CUDA backend (MadeBackend::cuda), else null.
// `draft` may be null (plain decoding). Neither model is owned; both must outlive the loop.
absl::StatusOr<std::unique_ptr<SpeculativeLoop>> MakeSpeculativeLoop(CudaBackend* cuda, Transformer* target,
                                                                     Transformer* draft,
                                                                     const SpeculativeOptions& options);

}  // namespace specgen
