// What loading a model reports on stderr: a progress line while the weights are generated and
// uploaded (engine/core/progress.h: only for loads over a second), then one line saying what went
// where, e.g.
//   target qwen3-1.7b: cuda, 28 layers, 3.20 GiB bf16 + 112 KiB f32, KV cache 112 MiB
// and, when something streams, from where and through what (expert slots, the dense-layer ring).
// Shared by generate and chat (through LoadPair); stdout carries only the generated text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/model/transformer.h"
#include "moe/run_plan.h"

namespace specgen::cli {

// The line for a loaded model: `role` (target, draft), name, backend, layers, resident bytes by
// dtype (largest first), KV cache bytes.
std::string LoadSummary(std::string_view role, const Transformer& lm, std::string_view backend_name);

// LoadModel + Transformer::Create with progress on stderr, then LoadSummary on stderr.
// `kv_type`: TransformerOptions'; `plan`: what streams (the default: nothing, every weight resident).
// `check_tensors`: a model read from a file has its weights checked for NaN and infinity first
// (CheckLoadedTensors; --no-check-tensors turns it off).
absl::StatusOr<std::unique_ptr<Transformer>> LoadWithReport(std::string_view role, const std::string& path,
                                                             Backend* backend, int64_t context, DType kv_type,
                                                             const moe::RunPlan& plan = {},
                                                             bool check_tensors = true);

// The check of engine/io/tensor_check.h on a model loaded from `path`, under a progress bar labelled
// with `role`; synthetic presets (generated finite) are not checked.
absl::Status CheckLoadedTensors(std::string_view role, const std::string& path, const LoadedModel& model);

}  // namespace specgen::cli
