// ModelSpec from a Hugging Face config.json (LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM,
// MixtralForCausalLM), accepting the transformers 4.x and 5.x spellings (num_experts /
// num_local_experts, rope_theta / rope_parameters.rope_theta, head_dim absent or null, ...).
// HF checkpoints use rotate-half RoPE whatever the architecture (formats.md §4.3).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/model/model_spec.h"

namespace specgen {

// Reads `path` (a config.json, or a directory holding one).
absl::StatusOr<ModelSpec> ModelSpecFromHfConfig(const std::string& path);
// Parses config.json text; `source` names the file in errors.
absl::StatusOr<ModelSpec> ModelSpecFromHfConfigText(std::string_view json_text, std::string_view source);

}  // namespace specgen
