// The benchmarks' acceptance regimes on the device (docs/design.md §3.5; never generate or chat): the
// twin of bench/acceptance/scripted_draft.h. After the draft has written its drawn tokens, this
// replaces each by the script's: the target's greedy token at that position with probability a_depth
// (keyed by seed, position and depth), else a token the target does not pick. The position is read
// from device memory when the kernel runs, so a decode replayed from a CUDA graph scripts the replay's
// position; nothing is read by the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace specgen::kernels {

// The script on the device.
struct ScriptedDraftTable {
  const int32_t* continuation = nullptr;  // the target's greedy tokens after the prompt, [length]
  int64_t first_position = 0;             // absolute position of continuation[0] (the prompt's length)
  int64_t length = 0;
  const double* profile = nullptr;        // a_0..a_{profile_len - 1}; the last holds deeper
  int profile_len = 0;
  uint64_t seed = 0;
  int32_t vocab = 0;
};

// For t < n: tokens[t] (the draft's drawn token on entry) becomes the script's token at absolute
// position (*base if given, else 0) + offset + t and depth depth0 + t (0-based within the step); it is
// left as drawn where the continuation does not reach. `base`: device int32 read when the kernel runs
// (a captured launch: e.g. the draft's device length); an eager launch may pass null and the position
// in `offset` (DeviceProposer draws each token eagerly at a host-known position).
cudaError_t LaunchScriptedDraft(const ScriptedDraftTable& table, const int32_t* base, int64_t offset, int depth0,
                                int n, int32_t* tokens, cudaStream_t stream);

}  // namespace specgen::kernels
