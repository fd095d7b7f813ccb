// Checks a parsed PairingConfig against the model files' metadata before any weights load: every
// model's spec reads, the context fits the target, and each draft speaks its target's vocabulary
// (CheckCompatible on the tokenizers, or equal vocabulary sizes where a model has none). Errors name
// the config file, the line and the key that set the model.
#pragma once

#include "absl/status/status.h"
#include "bench/runner/pairing_config.h"

namespace specgen::bench {

absl::Status CheckPairingModels(const PairingConfig& config);

}  // namespace specgen::bench
